#include "commands.h"

#include "common/rank_threads.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "gradsync/loopback.h"
#include "job/rank_context.h"
#include "launcher.h"

namespace gradsync {
namespace {

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

}  // namespace

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

int runRanks(const RankFlags& flags, const Env& env, const std::vector<std::string>& argv,
             const std::function<int(Transport&)>& body) {
  BootstrapFlags bootstrap = flags.bootstrap;
  TransportOptions link = parseLink(flags);  // validated before any rank starts
  if (flags.transport == "loopback") {
    bootstrap.rank = 0;
    bootstrap.worldSize = flags.workers;
    bootstrap.insecureNoToken = true;
    link.timeout = resolveBootstrap(bootstrap, Env{}).timeout;
    LoopbackFabric fabric(flags.workers, link);
    return runRankThreads(flags.workers, [&](int rank) {
      auto transport = fabric.connect(rank);
      return body(*transport);
    });
  }
  if (flags.bootstrap.rank || !env.launcher.empty()) {
    RankContext context = joinJob(resolveBootstrap(bootstrap, env), link);
    return body(*context.transport);
  }
  BootstrapConfig config = resolveBootstrap(
      BootstrapFlags{.timeout = flags.bootstrap.timeout, .insecureNoToken = true}, Env{});
  std::vector<std::string> command = argv;
  command[0] = selfExecutable();
  return launchLocal({flags.workers, command, config.timeout + std::chrono::seconds(5)});
}

}  // namespace gradsync
