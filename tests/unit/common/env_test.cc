#include "common/env.h"

#include <gtest/gtest.h>

#include "gradsync/error.h"

namespace gradsync {

TEST(Env, EmptyHasNoLauncher) {
  Env env = Env::fromMap({});
  EXPECT_EQ(env.launcher, "");
  EXPECT_FALSE(env.rank.has_value());
  EXPECT_EQ(env.jobId, "gradsync");
  EXPECT_EQ(env.logLevel, LogLevel::kWarn);
}

TEST(Env, TorchrunStyle) {
  Env env = Env::fromMap({{"RANK", "2"},
                          {"WORLD_SIZE", "4"},
                          {"LOCAL_RANK", "0"},
                          {"MASTER_ADDR", "10.0.0.1"},
                          {"MASTER_PORT", "29500"},
                          {"GRADSYNC_JOB_TOKEN", "secret"},
                          {"GRADSYNC_TIMEOUT", "30s"}});
  EXPECT_EQ(env.launcher, "env");
  EXPECT_EQ(*env.rank, 2);
  EXPECT_EQ(*env.worldSize, 4);
  EXPECT_EQ(env.masterAddr, "10.0.0.1");
  EXPECT_EQ(*env.masterPort, 29500);
  EXPECT_EQ(env.jobToken, "secret");
  EXPECT_DOUBLE_EQ(*env.timeoutSeconds, 30.0);
}

// gradsync's store beside torch.distributed's: GRADSYNC_MASTER_PORT wins over MASTER_PORT, and
// under torchrun's static rendezvous (its agent's store on MASTER_PORT) the next port is taken.
TEST(Env, MasterPortBesideTorchDistributed) {
  Env own = Env::fromMap({{"MASTER_PORT", "29500"}, {"GRADSYNC_MASTER_PORT", "29600"}});
  EXPECT_EQ(*own.masterPort, 29600);
  EXPECT_EQ(own.masterPortFrom, "GRADSYNC_MASTER_PORT");
  Env agent = Env::fromMap({{"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  EXPECT_EQ(*agent.masterPort, 29501);
  Env standalone =
      Env::fromMap({{"MASTER_PORT", "29500"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  EXPECT_EQ(*standalone.masterPort, 29500);
  EXPECT_EQ(standalone.masterPortFrom, "MASTER_PORT");
  Env both = Env::fromMap({{"MASTER_PORT", "29500"},
                           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                           {"GRADSYNC_MASTER_PORT", "29700"}});
  EXPECT_EQ(*both.masterPort, 29700);
  EXPECT_THROW(Env::fromMap({{"GRADSYNC_MASTER_PORT", "http"}}), ConfigError);
}

TEST(Env, OpenMpi) {
  Env env = Env::fromMap({{"OMPI_COMM_WORLD_RANK", "1"},
                          {"OMPI_COMM_WORLD_SIZE", "3"},
                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                          {"OMPI_MCA_ess_base_jobid", "12345"}});
  EXPECT_EQ(env.launcher, "mpirun");
  EXPECT_EQ(*env.rank, 1);
  EXPECT_EQ(*env.worldSize, 3);
  EXPECT_EQ(env.localRank, 1);
  EXPECT_EQ(env.localSize, 2);
  EXPECT_EQ(env.jobToken, "ompi-12345");
}

TEST(Env, MalformedValuesAreConfigErrors) {
  EXPECT_THROW(Env::fromMap({{"RANK", "two"}}), ConfigError);
  EXPECT_THROW(Env::fromMap({{"GRADSYNC_LOG_LEVEL", "loud"}}), ConfigError);
  EXPECT_THROW(Env::fromMap({{"GRADSYNC_TLS", "maybe"}}), ConfigError);
}

TEST(Env, TlsIsABoolean) {
  EXPECT_FALSE(Env::fromMap({}).tls);
  EXPECT_TRUE(Env::fromMap({{"GRADSYNC_TLS", "1"}}).tls);
  EXPECT_TRUE(Env::fromMap({{"GRADSYNC_TLS", "true"}}).tls);
  EXPECT_FALSE(Env::fromMap({{"GRADSYNC_TLS", "0"}}).tls);
  EXPECT_FALSE(Env::fromMap({{"GRADSYNC_TLS", "off"}}).tls);
}

TEST(Env, SharedMemoryAndRanksPerHost) {
  EXPECT_TRUE(Env::fromMap({}).sharedMemory);
  EXPECT_FALSE(Env::fromMap({{"GRADSYNC_SHM", "0"}}).sharedMemory);
  EXPECT_TRUE(Env::fromMap({{"GRADSYNC_SHM", "on"}}).sharedMemory);
  EXPECT_THROW(Env::fromMap({{"GRADSYNC_SHM", "fast"}}), ConfigError);
  EXPECT_FALSE(Env::fromMap({}).ranksPerHost.has_value());
  EXPECT_EQ(Env::fromMap({{"GRADSYNC_RANKS_PER_HOST", "4"}}).ranksPerHost, 4);
}

TEST(Env, SimdNamesAnInstructionSet) {
  EXPECT_FALSE(Env::fromMap({}).simd.has_value());
  EXPECT_EQ(Env::fromMap({{"GRADSYNC_SIMD", "scalar"}}).simd, simd::Path::kScalar);
  EXPECT_EQ(Env::fromMap({{"GRADSYNC_SIMD", "avx512"}}).simd, simd::Path::kAvx512);
  EXPECT_THROW(Env::fromMap({{"GRADSYNC_SIMD", "sse4"}}), ConfigError);
}

}  // namespace gradsync
