#include "gradsync/bootstrap.h"

#include <fmt/format.h>

#include <cmath>

#include "common/check.h"
#include "common/env.h"
#include "common/units.h"
#include "gradsync/error.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_wire.h"

namespace gradsync {
namespace {

// A resolved value and the flag, variable or "default" it came from (for error messages).
template <typename T>
struct Sourced {
  std::optional<T> value;
  std::string from;
};

template <typename T>
Sourced<T> pick(const std::optional<T>& flag, const char* flagName, const std::optional<T>& env,
                const std::string& envName) {
  if (flag) return {flag, flagName};
  if (env) return {env, envName};
  return {std::nullopt, ""};
}

[[noreturn]] void refuseBootstrap(const std::string& message, const std::string& hint) {
  throw ConfigError(message, {.operation = "bootstrap", .hint = hint});
}

void resolveRankAndSize(const BootstrapFlags& flags, const Env& env, BootstrapConfig& config) {
  bool mpi = env.launcher == "mpirun";
  auto rank = pick(flags.rank, "--rank", env.rank, mpi ? "OMPI_COMM_WORLD_RANK" : "RANK");
  auto size = pick(flags.worldSize, "--world-size", env.worldSize,
                   mpi ? "OMPI_COMM_WORLD_SIZE" : "WORLD_SIZE");
  if (!rank.value && !size.value) return;  // a single process: rank 0 of 1, source "defaults"
  if (!rank.value) {
    refuseBootstrap(
        fmt::format("the world size is set ({}={}) but the rank is not", size.from, *size.value),
        "pass --rank or set RANK (or launch with gradsync launch / torchrun / mpirun)");
  }
  if (!size.value) {
    refuseBootstrap(
        fmt::format("the rank is set ({}={}) but the world size is not", rank.from, *rank.value),
        "pass --world-size or set WORLD_SIZE");
  }
  if (*size.value < 1) {
    refuseBootstrap(fmt::format("{}={} is not a valid world size", size.from, *size.value),
                    "the world size is the number of processes, at least 1");
  }
  if (*rank.value < 0 || *rank.value >= *size.value) {
    refuseBootstrap(fmt::format("{}={} is outside [0, {}) (world size from {})", rank.from,
                                *rank.value, *size.value, size.from),
                    "ranks are numbered 0 .. world size - 1");
  }
  config.rank = *rank.value;
  config.size = *size.value;
  config.source = flags.rank || flags.worldSize ? "flags" : env.launcher;
}

void resolveLocal(const Env& env, BootstrapConfig& config) {
  if (config.source != env.launcher) return;  // rank from flags or defaults: no local view
  bool mpi = env.launcher == "mpirun";
  const char* rankFrom = mpi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "LOCAL_RANK";
  const char* sizeFrom = mpi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "LOCAL_WORLD_SIZE";
  int localSize = env.localSize.value_or(1);
  int localRank = env.localRank.value_or(0);
  if (localSize < 1 || localSize > config.size) {
    refuseBootstrap(
        fmt::format("{}={} is outside [1, {}] (the world size)", sizeFrom, localSize, config.size),
        "the local size is the number of this job's processes on this host");
  }
  if (localRank < 0 || localRank >= localSize) {
    refuseBootstrap(
        fmt::format("{}={} is outside [0, {}) (the local size)", rankFrom, localRank, localSize),
        env.localSize ? "local ranks are numbered 0 .. local size - 1"
                      : fmt::format("set {} too", sizeFrom));
  }
  config.localRank = localRank;
  config.localSize = localSize;
}

void resolveMaster(const BootstrapFlags& flags, const Env& env, BootstrapConfig& config) {
  if (flags.masterAddr) {
    if (flags.masterAddr->empty())
      refuseBootstrap("--master-addr is empty", "give the host name or IP of rank 0");
    config.master.host = *flags.masterAddr;
  } else if (!env.masterAddr.empty()) {
    config.master.host = env.masterAddr;
  }
  auto port = pick(flags.masterPort, "--master-port", env.masterPort, env.masterPortFrom);
  if (port.value) {
    if (*port.value < 1 || *port.value > 65535) {
      refuseBootstrap(fmt::format("{}={} is not a valid port", port.from, *port.value),
                      "ports are 1..65535; pick a free one (default 29500)");
    }
    config.master.port = *port.value;
  }
}

void resolveJob(const BootstrapFlags& flags, const Env& env, BootstrapConfig& config) {
  constexpr size_t kMax = rendezvous::wire::kMaxJobFieldBytes;
  if (flags.jobId) {
    config.jobId = *flags.jobId;
  } else if (!env.jobId.empty()) {
    config.jobId = env.jobId;
  }
  const char* idFrom = flags.jobId ? "--job-id" : "GRADSYNC_JOB_ID";
  if (config.jobId.empty())
    refuseBootstrap(fmt::format("{} is empty", idFrom), "give the job a name");
  if (config.jobId.size() > kMax) {
    refuseBootstrap(fmt::format("{} is {} bytes long", idFrom, config.jobId.size()),
                    "at most 256 bytes");
  }
  config.jobToken = flags.jobToken ? *flags.jobToken : env.jobToken;
  const char* tokenFrom = flags.jobToken ? "--job-token" : "GRADSYNC_JOB_TOKEN";
  if (config.jobToken.size() > kMax) {
    refuseBootstrap(fmt::format("{} is {} bytes long", tokenFrom, config.jobToken.size()),
                    "at most 256 bytes; 32 random hex digits are plenty");
  }
  if (config.jobToken.empty() && config.size > 1 && !flags.insecureNoToken) {
    refuseBootstrap(
        fmt::format("no job token for a job of {} processes", config.size),
        "set the same secret in every process with --job-token or GRADSYNC_JOB_TOKEN (e.g. "
        "`openssl rand -hex 16`), or pass --insecure-no-token on a trusted network");
  }
}

void resolveTimeout(const BootstrapFlags& flags, const Env& env, BootstrapConfig& config) {
  std::optional<double> seconds = env.timeoutSeconds;
  const char* from = "GRADSYNC_TIMEOUT";
  if (flags.timeout) {
    seconds = parseDurationSeconds(*flags.timeout, "--timeout");
    from = "--timeout";
  }
  if (!seconds) return;
  if (!(*seconds > 0) || *seconds > 7 * 24 * 3600.0) {
    refuseBootstrap(fmt::format("{}={}s is not a usable timeout", from, *seconds),
                    "give a positive duration up to a week, e.g. 60s or 5m");
  }
  config.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::ceil(*seconds * 1000)));
}

}  // namespace

BootstrapConfig resolveBootstrap(const BootstrapFlags& flags, const Env& env) {
  BootstrapConfig config;
  resolveRankAndSize(flags, env, config);
  resolveLocal(env, config);
  resolveMaster(flags, env, config);
  resolveJob(flags, env, config);
  resolveTimeout(flags, env, config);
  config.tls = flags.tls || env.tls;
  config.sharedMemory = flags.sharedMemory.value_or(env.sharedMemory);
  const std::optional<int> perHost = flags.ranksPerHost ? flags.ranksPerHost : env.ranksPerHost;
  if (perHost && (*perHost < 1 || *perHost > config.size)) {
    refuseBootstrap(fmt::format("{}={} is outside [1, {}] (the world size)",
                                flags.ranksPerHost ? "--ranks-per-host" : "GRADSYNC_RANKS_PER_HOST",
                                *perHost, config.size),
                    "give the number of ranks each host runs");
  }
  config.ranksPerHost = perHost.value_or(0);
  config.externalStore = env.externalStore;
  return config;
}

std::shared_ptr<Store> connectStore(const BootstrapConfig& config,
                                    std::unique_ptr<TcpStoreServer>* serverOut) {
  if (config.size == 1 && !config.externalStore) {
    if (serverOut != nullptr) serverOut->reset();
    return makeInMemoryStore();
  }
  TcpStoreOptions options;
  options.jobId = config.jobId;
  options.jobToken = config.jobToken;
  options.connectTimeout = config.timeout;
  options.requestTimeout = config.timeout;
  if (config.rank == 0 && !config.externalStore) {
    GS_CHECK(serverOut != nullptr);
    try {
      *serverOut = std::make_unique<TcpStoreServer>(config.master, options);
    } catch (const SystemError& e) {
      throw SystemError(fmt::format("rank 0 cannot serve the rendezvous store on {}: {}",
                                    config.master.toString(), e.detail()),
                        {.rank = 0,
                         .operation = "bootstrap",
                         .hint = "another job may use this port: choose another --master-port / "
                                 "MASTER_PORT, and check that --master-addr is an address of "
                                 "rank 0's host"});
    }
  }
  try {
    return makeTcpStoreClient(config.master, options);
  } catch (const ProtocolError& e) {  // a refused handshake: say which rank was refused
    ErrorContext context = e.context();
    context.rank = config.rank;
    throw ProtocolError(e.detail(), context);
  }
}

}  // namespace gradsync
