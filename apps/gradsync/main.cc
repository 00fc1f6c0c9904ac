// The gradsync command line: thin subcommands over the library (docs/cli.md).
#include <cstdio>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_collectives.h"
#include "common/env.h"
#include "common/logging.h"
#include "common/rank_threads.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "gradsync/error.h"
#include "gradsync/loopback.h"
#include "job/rank_context.h"
#include "launcher.h"

namespace gradsync {
namespace {

// Flags shared by every subcommand that runs ranks.
struct RankFlags {
  BootstrapFlags bootstrap;
  int workers = 2;
  std::string transport = "tcp";
  std::string bandwidth;
  std::string latency;
};

void addRankFlags(CLI::App* app, RankFlags& flags, int defaultWorkers) {
  flags.workers = defaultWorkers;
  app->add_option("--workers", flags.workers, "local ranks to start (when not launched)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app->add_option("--transport", flags.transport, "tcp: processes over TCP; loopback: threads")
      ->check(CLI::IsMember({"tcp", "loopback"}))
      ->capture_default_str();
  app->add_option("--bandwidth", flags.bandwidth, "emulated egress rate per rank, e.g. 1gbit");
  app->add_option("--latency", flags.latency, "emulated one-way latency, e.g. 100us");
  app->add_option("--rank", flags.bootstrap.rank, "this process's rank (multi-host runs)");
  app->add_option("--world-size", flags.bootstrap.worldSize, "number of ranks (multi-host runs)");
  app->add_option("--master-addr", flags.bootstrap.masterAddr, "host of rank 0's store");
  app->add_option("--master-port", flags.bootstrap.masterPort, "port of rank 0's store");
  app->add_option("--job-id", flags.bootstrap.jobId, "job name shared by all ranks");
  app->add_option("--job-token", flags.bootstrap.jobToken, "secret shared by all ranks");
  app->add_option("--timeout", flags.bootstrap.timeout, "bound on every wait (default 60s)");
}

// Link emulation from the flags; the timeout is filled in from the bootstrap configuration.
TransportOptions parseLink(const RankFlags& flags) {
  TransportOptions link;
  if (!flags.bandwidth.empty()) {
    link.bandwidthBytesPerSec = parseBandwidth(flags.bandwidth, "--bandwidth");
  }
  if (!flags.latency.empty()) {
    link.latency = std::chrono::microseconds(
        static_cast<int64_t>(parseDurationSeconds(flags.latency, "--latency") * 1e6));
  }
  return link;
}

// Runs `body` as the ranks of a job, in whichever of three ways fits: as threads over loopback,
// as this process's rank when a launcher (ours, torchrun-style env, mpirun) started us, or by
// launching --workers copies of this very command.
int runRanks(const RankFlags& flags, const Env& env, const std::vector<std::string>& argv,
             const std::function<int(Transport&)>& body) {
  BootstrapFlags bootstrap = flags.bootstrap;
  TransportOptions link = parseLink(flags);  // validated before any rank starts
  if (flags.transport == "loopback") {
    bootstrap.rank = 0;
    bootstrap.worldSize = flags.workers;
    bootstrap.insecureNoToken = true;
    BootstrapConfig config = resolveBootstrap(bootstrap, Env{});
    link.timeout = config.timeout;
    LoopbackFabric fabric(flags.workers, link);
    return runRankThreads(flags.workers, [&](int rank) {
      auto transport = fabric.connect(rank);
      return body(*transport);
    });
  }
  if (flags.bootstrap.rank || !env.launcher.empty()) {
    BootstrapConfig config = resolveBootstrap(bootstrap, env);
    RankContext context = joinJob(config, link);
    return body(*context.transport);
  }
  BootstrapConfig config = resolveBootstrap(
      BootstrapFlags{.timeout = flags.bootstrap.timeout, .insecureNoToken = true}, Env{});
  std::vector<std::string> command = argv;
  command[0] = selfExecutable();
  return launchLocal({flags.workers, command, config.timeout + std::chrono::seconds(5)});
}

int run(int argc, char** argv) {
  Env env = Env::fromProcess();
  setLogLevel(env.logLevel);
  std::vector<std::string> args(argv, argv + argc);

  CLI::App app{"gradsync: communication-efficient data-parallel training"};
  app.require_subcommand(1);

  CLI::App* bench = app.add_subcommand("bench", "measure collectives like nccl-tests");
  BenchOptions benchOptions;
  RankFlags benchFlags;
  bench->add_option("collective", benchOptions.collective, "allreduce | allgather | broadcast")
      ->required()
      ->check(CLI::IsMember({"allreduce", "allgather", "broadcast"}));
  addRankFlags(bench, benchFlags, 4);
  std::string minBytes = "1M", maxBytes = "64M", segment = "1M";
  bench->add_option("--min-bytes", minBytes, "smallest message")->capture_default_str();
  bench->add_option("--max-bytes", maxBytes, "largest message")->capture_default_str();
  bench->add_option("--factor", benchOptions.factor, "size multiplier")->capture_default_str();
  bench->add_option("--iters", benchOptions.iters, "timed iterations per size")
      ->capture_default_str();
  bench->add_option("--warmup", benchOptions.warmup, "untimed iterations")->capture_default_str();
  bench->add_option("--segment-bytes", segment, "pipeline segment")->capture_default_str();
  bench->add_option("--json", benchOptions.jsonPath, "write results as JSON");

  CLI::App* launch = app.add_subcommand("launch", "start N local processes with the job's env");
  LaunchOptions launchOptions;
  launch->add_option("-n,--processes", launchOptions.processes, "processes")->required();
  launch->add_option("command", launchOptions.command, "command to run")->required();
  launch->allow_extras(false);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is not an error; bad flags are config errors
  }

  if (bench->parsed()) {
    benchOptions.minBytes = parseBytes(minBytes, "--min-bytes");
    benchOptions.maxBytes = parseBytes(maxBytes, "--max-bytes");
    benchOptions.segmentBytes = parseBytes(segment, "--segment-bytes");
    benchOptions.transportName = benchFlags.transport;
    validateBench(benchOptions);
    return runRanks(benchFlags, env, args,
                    [&](Transport& t) { return runBench(t, benchOptions) == 0 ? 0 : 1; });
  }
  if (launch->parsed()) return launchLocal(launchOptions);
  return 0;
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  try {
    return gradsync::run(argc, argv);
  } catch (const gradsync::ConfigError& e) {
    std::fprintf(stderr, "gradsync: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradsync: error: %s\n", e.what());
    return 1;
  }
}
