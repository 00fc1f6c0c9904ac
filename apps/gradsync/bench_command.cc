// gradsync bench allreduce|allgather|broadcast|compress
#include "bench_collectives.h"
#include "bench_compress.h"
#include "commands.h"
#include "common/units.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

struct BenchFlags {
  BenchOptions options;
  RankFlags ranks;
  std::string minBytes = "1M";
  std::string maxBytes = "64M";
  std::string segment = "1M";
  std::vector<std::string> methods;  // bench compress
  std::vector<std::string> sizes;    // bench compress, in elements ("1M" = 2^20)
  std::string simd;                  // bench compress: instruction sets
};

void runCompress(const BenchFlags& flags) {
  CompressBenchOptions options;
  options.methods = flags.methods;
  options.iters = flags.options.iters;
  options.jsonPath = flags.options.jsonPath;
  options.simd = flags.simd;
  if (!flags.sizes.empty()) {
    options.sizes.clear();
    for (const std::string& s : flags.sizes) options.sizes.push_back(parseBytes(s, "--sizes"));
  }
  if (options.iters < 1) throw ConfigError("--iters must be at least 1");
  runCompressBench(options);
}

}  // namespace

void addBenchCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand("bench", "measure collectives like nccl-tests");
  bench
      ->add_option("what", flags->options.collective,
                   "allreduce | allgather | broadcast | compress")
      ->required()
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast", "compress"}));
  addRankFlags(bench, flags->ranks, 4);
  bench->add_option("--min-bytes", flags->minBytes, "smallest message")->capture_default_str();
  bench->add_option("--max-bytes", flags->maxBytes, "largest message")->capture_default_str();
  bench->add_option("--factor", flags->options.factor, "size multiplier")->capture_default_str();
  bench->add_option("--iters", flags->options.iters, "timed iterations per size")
      ->capture_default_str();
  bench->add_option("--warmup", flags->options.warmup, "untimed iterations")->capture_default_str();
  bench->add_option("--segment-bytes", flags->segment, "pipeline segment")->capture_default_str();
  bench->add_option("--json", flags->options.jsonPath, "write results as JSON");
  bench
      ->add_option(
          "--algorithm", flags->options.algorithm,
          "allreduce: ring, doubling (recursive), halving (halving-doubling), hierarchical "
          "(across hosts) or auto; allgather: ring, doubling (Bruck's) or auto")
      ->check(CLI::IsMember({"auto", "ring", "doubling", "halving", "hierarchical"}))
      ->capture_default_str();
  bench->add_option("--methods", flags->methods, "compress: specs to measure (default: all)");
  bench->add_option("--sizes", flags->sizes, "compress: gradient sizes in elements (1M = 2^20)");
  bench
      ->add_option("--simd", flags->simd,
                   "compress: instruction sets to measure, all or scalar|avx2|avx512 (default: "
                   "the active one)")
      ->check(CLI::IsMember({"all", "scalar", "avx2", "avx512"}));
  bench->callback([flags, &context] {
    if (flags->options.collective == "compress") {
      runCompress(*flags);
      return;
    }
    BenchOptions& options = flags->options;
    options.minBytes = parseBytes(flags->minBytes, "--min-bytes");
    options.maxBytes = parseBytes(flags->maxBytes, "--max-bytes");
    options.segmentBytes = parseBytes(flags->segment, "--segment-bytes");
    options.transportName = flags->ranks.transport;
    const bool tls = flags->ranks.bootstrap.tls || context.env.tls;
    if (tls && options.transportName == "tcp") options.transportName = "tcp+tls";
    validateBench(options);
    Settings settings = {{"bench", options.collective},
                         {"--transport", flags->ranks.transport},
                         {"--min-bytes", std::to_string(options.minBytes)},
                         {"--max-bytes", std::to_string(options.maxBytes)},
                         {"--factor", std::to_string(options.factor)},
                         {"--iters", std::to_string(options.iters)},
                         {"--warmup", std::to_string(options.warmup)},
                         {"--segment-bytes", std::to_string(options.segmentBytes)},
                         {"--algorithm", options.algorithm}};
    context.exitCode = runRanks(flags->ranks, context.env, context.argv, settings,
                                [&](Transport& t) { return runBench(t, options) == 0 ? 0 : 1; });
  });
}

}  // namespace gradsync
