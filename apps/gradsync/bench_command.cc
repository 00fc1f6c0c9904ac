// gradsync bench allreduce|allgather|broadcast
#include "bench_collectives.h"
#include "commands.h"
#include "common/units.h"

namespace gradsync {
namespace {

struct BenchFlags {
  BenchOptions options;
  RankFlags ranks;
  std::string minBytes = "1M";
  std::string maxBytes = "64M";
  std::string segment = "1M";
};

}  // namespace

void addBenchCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand("bench", "measure collectives like nccl-tests");
  bench->add_option("collective", flags->options.collective, "allreduce | allgather | broadcast")
      ->required()
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast"}));
  addRankFlags(bench, flags->ranks, 4);
  bench->add_option("--min-bytes", flags->minBytes, "smallest message")->capture_default_str();
  bench->add_option("--max-bytes", flags->maxBytes, "largest message")->capture_default_str();
  bench->add_option("--factor", flags->options.factor, "size multiplier")->capture_default_str();
  bench->add_option("--iters", flags->options.iters, "timed iterations per size")
      ->capture_default_str();
  bench->add_option("--warmup", flags->options.warmup, "untimed iterations")->capture_default_str();
  bench->add_option("--segment-bytes", flags->segment, "pipeline segment")->capture_default_str();
  bench->add_option("--json", flags->options.jsonPath, "write results as JSON");
  bench->callback([flags, &context] {
    BenchOptions& options = flags->options;
    options.minBytes = parseBytes(flags->minBytes, "--min-bytes");
    options.maxBytes = parseBytes(flags->maxBytes, "--max-bytes");
    options.segmentBytes = parseBytes(flags->segment, "--segment-bytes");
    options.transportName = flags->ranks.transport;
    validateBench(options);
    context.exitCode = runRanks(flags->ranks, context.env, context.argv,
                                [&](Transport& t) { return runBench(t, options) == 0 ? 0 : 1; });
  });
}

}  // namespace gradsync
