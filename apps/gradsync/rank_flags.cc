#include "commands.h"

#include "common/logging.h"
#include "common/rank_threads.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "gradsync/error.h"
#include "gradsync/loopback.h"
#ifdef GRADSYNC_HAVE_MPI
#include "gradsync/mpi.h"
#endif
#include "gradsync/context.h"
#include "gradsync/topology.h"
#include "launcher.h"
#include "transport/routed_transport.h"

namespace gradsync {

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

namespace {

// This process as one rank of an mpirun launch, over the MPI transport.
int runMpiRank(const BootstrapFlags& bootstrap, const Env& env, TransportOptions link,
               const Settings& settings, const std::function<int(Transport&)>& body) {
  if (bootstrap.tls || env.tls) {
    throw ConfigError("--tls encrypts gradsync's own TCP links; the MPI transport's are Open MPI's",
                      {.hint = "use --transport tcp with --tls, or drop --tls (GRADSYNC_TLS)"});
  }
#ifdef GRADSYNC_HAVE_MPI
  if (env.launcher != "mpirun") {
    throw ConfigError("--transport mpi needs a launch by mpirun (no OMPI_COMM_WORLD_* variables)",
                      {.hint = "start it as `mpirun -np N gradsync ... --transport mpi` "
                               "(scripts/mpirun adds the flags root needs)"});
  }
  link.timeout = resolveBootstrap(bootstrap, env).timeout;
  std::unique_ptr<Transport> transport = connectMpiTransport({.transport = link});
  GS_LOG(kInfo, "rank {} of {} connected over MPI", transport->rank(), transport->size());
  checkSameSettings(*transport, settings);
  return body(*transport);
#else
  throw ConfigError("this gradsync was built without MPI (GRADSYNC_WITH_MPI=OFF)",
                    {.hint = "use --transport tcp, or rebuild with libopenmpi-dev installed"});
#endif
}

}  // namespace

void addRankFlags(CLI::App* app, RankFlags& flags, int defaultWorkers) {
  flags.workers = defaultWorkers;
  app->add_option("--workers", flags.workers, "local ranks to start (when not launched)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app->add_option("--transport", flags.transport,
                  "tcp: processes over TCP; loopback: threads; mpi: under mpirun")
      ->check(CLI::IsMember({"tcp", "loopback", "mpi"}))
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
  app->add_flag("--tls", flags.bootstrap.tls,
                "encrypt every link between ranks with TLS 1.3 (all ranks or none)");
  app->add_option("--ranks-per-host", flags.bootstrap.ranksPerHost,
                  "consecutive runs of N ranks form a host (default: the hosts they share)")
      ->check(CLI::PositiveNumber);
  app->add_option("--shm", flags.bootstrap.sharedMemory,
                  "on: ranks of one host talk through shared memory (default); off: over TCP")
      ->transform(CLI::IsMember(std::map<std::string, bool>{{"on", true}, {"off", false}}));
}

int runRanks(const RankFlags& flags, const Env& env, const std::vector<std::string>& argv,
             const Settings& settings, const std::function<int(Transport&)>& body) {
  BootstrapFlags bootstrap = flags.bootstrap;
  TransportOptions link = parseLink(flags);  // validated before any rank starts
  if (flags.transport == "loopback") {
    bootstrap.rank = 0;
    bootstrap.worldSize = flags.workers;
    bootstrap.insecureNoToken = true;
    link.timeout = resolveBootstrap(bootstrap, Env{}).timeout;
    LoopbackFabric fabric(flags.workers, link);
    const int perHost = resolveBootstrap(bootstrap, env).ranksPerHost;
    return runRankThreads(flags.workers, [&](int rank) {
      std::unique_ptr<Transport> transport = fabric.connect(rank);
      // Threads share one process: hosts exist only when --ranks-per-host declares them.
      if (perHost > 0) {
        transport = withTopology(std::move(transport), Topology::uniform(flags.workers, perHost));
      }
      return body(*transport);
    });
  }
  if (flags.transport == "mpi") return runMpiRank(bootstrap, env, link, settings, body);
  if (flags.bootstrap.rank || !env.launcher.empty()) {
    Context context = join(resolveBootstrap(bootstrap, env), link);
    checkSameSettings(context.transport(), settings);
    return body(context.transport());
  }
  BootstrapConfig config = resolveBootstrap(
      BootstrapFlags{.timeout = flags.bootstrap.timeout, .insecureNoToken = true}, Env{});
  std::vector<std::string> command = argv;
  command[0] = selfExecutable();
  LaunchOptions launch{flags.workers, command, config.timeout + std::chrono::seconds(5)};
  launch.ranksPerHost = flags.bootstrap.ranksPerHost.value_or(0);  // LOCAL_RANK per host
  return launchLocal(launch);
}

int runElasticWorkers(
    const RankFlags& flags, const Env& env, const std::vector<std::string>& argv,
    const std::function<int(const BootstrapConfig&, const TransportOptions&)>& body) {
  if (flags.transport != "tcp") {
    throw ConfigError(
        "--elastic runs its workers as processes on gradsync's own transport (TCP, "
        "shared memory inside a host): its rounds re-form the mesh",
        {.hint = "drop --transport " + flags.transport});
  }
  TransportOptions link = parseLink(flags);
  if (flags.bootstrap.rank || !env.launcher.empty()) {
    BootstrapConfig config = resolveBootstrap(flags.bootstrap, env);
    link.timeout = config.timeout;
    return body(config, link);
  }
  BootstrapConfig config = resolveBootstrap(
      BootstrapFlags{.timeout = flags.bootstrap.timeout, .insecureNoToken = true}, Env{});
  std::vector<std::string> command = argv;
  command[0] = selfExecutable();
  LaunchOptions launch{flags.workers, command, config.timeout + std::chrono::seconds(5)};
  launch.elastic = true;  // the store outlives every worker
  return launchLocal(launch);
}

}  // namespace gradsync
