// Bootstrap: precedence flags > env > defaults, every validation error, and connectStore.
#include "gradsync/bootstrap.h"

#include <gtest/gtest.h>

#include "common/env.h"
#include "gradsync/error.h"
#include "rendezvous/tcp_store.h"
#include "support/free_port.h"
#include "support/rank_threads.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using testing::freePort;

// Expects a ConfigError whose message contains `needle` (the flag or variable at fault).
void expectConfigError(const BootstrapFlags& flags, const Env& env, const std::string& needle) {
  try {
    resolveBootstrap(flags, env);
    FAIL() << "no ConfigError; expected one naming " << needle;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Hint:"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "not one line";
  }
}

Env torchrunEnv() {
  return Env::fromMap({{"RANK", "1"},
                       {"WORLD_SIZE", "4"},
                       {"MASTER_ADDR", "10.0.0.1"},
                       {"MASTER_PORT", "1234"},
                       {"GRADSYNC_JOB_ID", "env-job"},
                       {"GRADSYNC_JOB_TOKEN", "env-token"},
                       {"GRADSYNC_TIMEOUT", "30s"}});
}

TEST(Bootstrap, DefaultsAreOneLocalProcess) {
  BootstrapConfig config = resolveBootstrap({}, Env::fromMap({}));
  EXPECT_EQ(config.rank, 0);
  EXPECT_EQ(config.size, 1);
  EXPECT_EQ(config.master.host, "127.0.0.1");
  EXPECT_EQ(config.master.port, 29500);
  EXPECT_EQ(config.jobId, "gradsync");
  EXPECT_EQ(config.jobToken, "");
  EXPECT_EQ(config.timeout, 60s);
  EXPECT_EQ(config.source, "defaults");
  // A default-constructed Env (no launcher, no job id) means the same.
  EXPECT_EQ(resolveBootstrap({}, Env{}).jobId, "gradsync");
}

// TLS is on when the flag or the environment asks for it; off by default.
TEST(Bootstrap, TlsFromFlagOrEnvironment) {
  EXPECT_FALSE(resolveBootstrap({}, torchrunEnv()).tls);
  EXPECT_TRUE(resolveBootstrap({.tls = true}, torchrunEnv()).tls);
  Env env = torchrunEnv();
  env.tls = true;
  EXPECT_TRUE(resolveBootstrap({}, env).tls);
}

TEST(Bootstrap, RanksPerHostAndSharedMemoryFromFlagOrEnvironment) {
  BootstrapConfig config = resolveBootstrap({}, torchrunEnv());
  EXPECT_EQ(config.ranksPerHost, 0);
  EXPECT_TRUE(config.sharedMemory);
  Env env = torchrunEnv();
  env.ranksPerHost = 2;
  env.sharedMemory = false;
  config = resolveBootstrap({}, env);
  EXPECT_EQ(config.ranksPerHost, 2);
  EXPECT_FALSE(config.sharedMemory);
  config = resolveBootstrap({.ranksPerHost = 4, .sharedMemory = true}, env);
  EXPECT_EQ(config.ranksPerHost, 4);
  EXPECT_TRUE(config.sharedMemory);
  expectConfigError({.ranksPerHost = 5}, torchrunEnv(), "--ranks-per-host");
  expectConfigError({.ranksPerHost = 0}, torchrunEnv(), "--ranks-per-host");
  env.ranksPerHost = 9;
  expectConfigError({}, env, "GRADSYNC_RANKS_PER_HOST");
}

TEST(Bootstrap, TorchrunStyleEnvironment) {
  BootstrapConfig config = resolveBootstrap({}, torchrunEnv());
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.size, 4);
  EXPECT_EQ(config.master.toString(), "10.0.0.1:1234");
  EXPECT_EQ(config.jobId, "env-job");
  EXPECT_EQ(config.jobToken, "env-token");
  EXPECT_EQ(config.timeout, 30s);
  EXPECT_EQ(config.source, "env");
}

TEST(Bootstrap, OpenMpiEnvironmentProvidesAToken) {
  BootstrapConfig config = resolveBootstrap({}, Env::fromMap({{"OMPI_COMM_WORLD_RANK", "2"},
                                                              {"OMPI_COMM_WORLD_SIZE", "3"},
                                                              {"OMPI_MCA_ess_base_jobid", "777"}}));
  EXPECT_EQ(config.rank, 2);
  EXPECT_EQ(config.size, 3);
  EXPECT_EQ(config.jobToken, "ompi-777");
  EXPECT_EQ(config.source, "mpirun");
}

TEST(Bootstrap, LocalRankAndSizeComeFromTheLauncher) {
  BootstrapConfig single = resolveBootstrap({}, Env::fromMap({}));
  EXPECT_EQ(single.localRank, 0);
  EXPECT_EQ(single.localSize, 1);
  Env torchrun = Env::fromMap({{"RANK", "3"},
                               {"WORLD_SIZE", "4"},
                               {"LOCAL_RANK", "1"},
                               {"LOCAL_WORLD_SIZE", "2"},
                               {"GRADSYNC_JOB_TOKEN", "t"}});
  BootstrapConfig config = resolveBootstrap({}, torchrun);
  EXPECT_EQ(config.localRank, 1);
  EXPECT_EQ(config.localSize, 2);
  BootstrapConfig mpi = resolveBootstrap({}, Env::fromMap({{"OMPI_COMM_WORLD_RANK", "2"},
                                                           {"OMPI_COMM_WORLD_SIZE", "3"},
                                                           {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                                           {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"},
                                                           {"OMPI_MCA_ess_base_jobid", "7"}}));
  EXPECT_EQ(mpi.localRank, 2);
  EXPECT_EQ(mpi.localSize, 3);
  // A rank given by flags is not the launcher's: its local view does not apply.
  BootstrapFlags flags{.rank = 0, .worldSize = 2};
  EXPECT_EQ(resolveBootstrap(flags, torchrun).localRank, 0);
  EXPECT_EQ(resolveBootstrap(flags, torchrun).localSize, 1);
}

TEST(Bootstrap, LocalRankErrors) {
  auto env = [](const char* localRank, const char* localSize) {
    std::map<std::string, std::string> vars{
        {"RANK", "0"}, {"WORLD_SIZE", "4"}, {"GRADSYNC_JOB_TOKEN", "t"}};
    if (localRank) vars["LOCAL_RANK"] = localRank;
    if (localSize) vars["LOCAL_WORLD_SIZE"] = localSize;
    return Env::fromMap(vars);
  };
  expectConfigError({}, env("2", "2"), "LOCAL_RANK=2");
  expectConfigError({}, env("0", "5"), "LOCAL_WORLD_SIZE=5");
  expectConfigError({}, env("0", "0"), "LOCAL_WORLD_SIZE=0");
  expectConfigError({}, env("1", nullptr), "set LOCAL_WORLD_SIZE");
}

TEST(Bootstrap, FlagsOverrideEnvironment) {
  BootstrapFlags flags;
  flags.rank = 0;
  flags.worldSize = 2;
  flags.masterAddr = "192.168.1.5";
  flags.masterPort = 4000;
  flags.jobId = "flag-job";
  flags.jobToken = "flag-token";
  flags.timeout = "1500ms";
  BootstrapConfig config = resolveBootstrap(flags, torchrunEnv());
  EXPECT_EQ(config.rank, 0);
  EXPECT_EQ(config.size, 2);
  EXPECT_EQ(config.master.toString(), "192.168.1.5:4000");
  EXPECT_EQ(config.jobId, "flag-job");
  EXPECT_EQ(config.jobToken, "flag-token");
  EXPECT_EQ(config.timeout, 1500ms);
  EXPECT_EQ(config.source, "flags");
}

TEST(Bootstrap, EachValueFallsBackOnItsOwn) {
  BootstrapFlags flags;
  flags.masterPort = 4000;  // only the port from a flag
  BootstrapConfig config = resolveBootstrap(flags, torchrunEnv());
  EXPECT_EQ(config.master.toString(), "10.0.0.1:4000");
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.source, "env");
}

TEST(Bootstrap, RankAndSizeErrors) {
  Env none = Env::fromMap({});
  BootstrapFlags flags;
  flags.worldSize = 4;
  flags.rank = 4;
  expectConfigError(flags, none, "--rank=4 is outside [0, 4)");
  flags.rank = -1;
  expectConfigError(flags, none, "--rank=-1");
  flags.rank = 0;
  flags.worldSize = 0;
  expectConfigError(flags, none, "--world-size=0");
  expectConfigError({},
                    Env::fromMap({{"RANK", "5"}, {"WORLD_SIZE", "2"}, {"GRADSYNC_JOB_TOKEN", "t"}}),
                    "RANK=5");
  expectConfigError({}, Env::fromMap({{"WORLD_SIZE", "2"}}), "WORLD_SIZE=2) but the rank");
  expectConfigError({}, Env::fromMap({{"RANK", "1"}}), "RANK=1) but the world size");
  expectConfigError({},
                    Env::fromMap({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "3"}}),
                    "OMPI_COMM_WORLD_RANK=3");
}

TEST(Bootstrap, MasterErrors) {
  BootstrapFlags flags;
  flags.masterPort = 0;
  expectConfigError(flags, Env::fromMap({}), "--master-port=0");
  flags.masterPort = 70000;
  expectConfigError(flags, Env::fromMap({}), "--master-port=70000");
  expectConfigError({}, Env::fromMap({{"MASTER_PORT", "65536"}}), "MASTER_PORT=65536");
  BootstrapFlags empty;
  empty.masterAddr = "";
  expectConfigError(empty, Env::fromMap({}), "--master-addr");
}

TEST(Bootstrap, TokenIsRequiredForSeveralProcesses) {
  Env env = Env::fromMap({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
  expectConfigError({}, env, "no job token");
  BootstrapFlags insecure;
  insecure.insecureNoToken = true;
  EXPECT_EQ(resolveBootstrap(insecure, env).jobToken, "");
  BootstrapFlags emptyFlag;
  emptyFlag.jobToken = "";  // an explicit empty flag does not fall back to the environment
  expectConfigError(emptyFlag, torchrunEnv(), "no job token");
  BootstrapFlags longToken;
  longToken.jobToken = std::string(257, 't');
  expectConfigError(longToken, env, "--job-token is 257 bytes");
  EXPECT_EQ(resolveBootstrap({}, Env::fromMap({})).size, 1);  // one process needs no token
}

TEST(Bootstrap, JobIdAndTimeoutErrors) {
  BootstrapFlags id;
  id.jobId = "";
  expectConfigError(id, Env::fromMap({}), "--job-id is empty");
  id.jobId = std::string(300, 'j');
  expectConfigError(id, Env::fromMap({}), "--job-id is 300 bytes");
  BootstrapFlags timeout;
  timeout.timeout = "0s";
  expectConfigError(timeout, Env::fromMap({}), "--timeout");
  timeout.timeout = "soon";
  expectConfigError(timeout, Env::fromMap({}), "--timeout");
  expectConfigError({}, Env::fromMap({{"GRADSYNC_TIMEOUT", "0"}}), "GRADSYNC_TIMEOUT");
}

BootstrapConfig localJob(int rank, int size, int port) {
  BootstrapConfig config;
  config.rank = rank;
  config.size = size;
  config.master = SocketAddress{"127.0.0.1", port};
  config.jobToken = "t0k3n";
  config.timeout = 5s;
  return config;
}

TEST(Bootstrap, ConnectStoreWithOneProcessNeedsNoServer) {
  std::unique_ptr<TcpStoreServer> server;
  auto store = connectStore(localJob(0, 1, 1), &server);
  EXPECT_EQ(server, nullptr);
  store->setString("k", "v");
  EXPECT_EQ(store->getString("k", 0ms), "v");
}

TEST(Bootstrap, ConnectStoreJoinsThreeRanks) {
  constexpr int kSize = 3;
  int port = freePort();
  testing::runRankThreads(kSize, [&](int rank) {
    std::unique_ptr<TcpStoreServer> server;  // destroyed last on rank 0
    auto store = connectStore(localJob(rank, kSize, port), &server);
    EXPECT_EQ(server != nullptr, rank == 0);
    store->setString("addr/" + std::to_string(rank), "rank" + std::to_string(rank));
    for (int r = 0; r < kSize; ++r) {
      EXPECT_EQ(store->getString("addr/" + std::to_string(r), 5s), "rank" + std::to_string(r));
    }
    // Rank 0 keeps serving until every other rank is done with the store.
    store->setString("done/" + std::to_string(rank), "");
    if (rank == 0) store->wait({"done/1", "done/2"}, 5s);
  });
}

// GRADSYNC_EXTERNAL_STORE=1 (gradsync launch --elastic serves the store): no rank serves, every
// rank is a client, even rank 0 of a job of one.
TEST(Bootstrap, AnExternalStoreIsServedByNoRank) {
  EXPECT_FALSE(resolveBootstrap({}, torchrunEnv()).externalStore);
  Env env = torchrunEnv();
  env.externalStore = true;
  EXPECT_TRUE(resolveBootstrap({}, env).externalStore);
  EXPECT_TRUE(Env::fromMap({{"GRADSYNC_EXTERNAL_STORE", "1"}}).externalStore);
  EXPECT_EQ(Env::fromMap({{"GRADSYNC_RESTART_COUNT", "3"}}).restartCount, 3);
  EXPECT_THROW(Env::fromMap({{"GRADSYNC_EXTERNAL_STORE", "maybe"}}), ConfigError);

  TcpStoreServer launcher(SocketAddress{"127.0.0.1", 0},
                          TcpStoreOptions{.jobId = "gradsync", .jobToken = "t0k3n"});
  for (int size : {1, 2}) {
    BootstrapConfig config = localJob(0, size, launcher.port());
    config.externalStore = true;
    std::unique_ptr<TcpStoreServer> server;
    auto store = connectStore(config, &server);
    EXPECT_EQ(server, nullptr) << "rank 0 of " << size << " served the store";
    store->setString("seen/" + std::to_string(size), "yes");
    EXPECT_EQ(makeTcpStoreClient(launcher.address(), {.jobToken = "t0k3n"})
                  ->getString("seen/" + std::to_string(size), 1s),
              "yes");
  }
}

TEST(Bootstrap, ConnectStoreRefusesAnotherJobsToken) {
  int port = freePort();
  std::unique_ptr<TcpStoreServer> server;
  auto rank0 = connectStore(localJob(0, 2, port), &server);
  BootstrapConfig intruder = localJob(1, 2, port);
  intruder.jobToken = "other";
  EXPECT_THROW(connectStore(intruder, nullptr), ProtocolError);
}

}  // namespace
}  // namespace gradsync
