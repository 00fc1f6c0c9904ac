// Ranks launched with different configurations are refused at startup, with an error naming the
// differing rank and setting, never a hang: real processes, bootstrapped from torchrun-style
// environment variables (TCP) or started by a real mpirun (MPI).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>

#include "common/socket.h"
#include "common/subprocess.h"
#include "support/read_file.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::readFile;

struct RankRun {
  std::vector<std::string> args;           // after the gradsync binary
  std::map<std::string, std::string> env;  // on top of the rendezvous variables
};

struct RankResult {
  ExitStatus status;
  std::string err;
};

fs::path scratch(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("gradsync-startup-" + std::to_string(::getpid())) / name;
  fs::create_directories(dir);
  return dir;
}

// Starts one process per rank with RANK/WORLD_SIZE/MASTER_* set, and waits for all of them.
std::vector<RankResult> runJob(const std::string& name, const std::vector<RankRun>& ranks) {
  fs::path dir = scratch(name);
  Fd probe = listenTcp("127.0.0.1", 0);
  std::string port = std::to_string(boundPort(probe.get()));
  probe.reset();
  std::vector<pid_t> pids;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    SpawnOptions spawn;
    spawn.argv = {GRADSYNC_BIN};
    spawn.argv.insert(spawn.argv.end(), ranks[rank].args.begin(), ranks[rank].args.end());
    spawn.env = {{"RANK", std::to_string(rank)},
                 {"WORLD_SIZE", std::to_string(ranks.size())},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", port},
                 {"GRADSYNC_JOB_TOKEN", "startup-check"},
                 {"GRADSYNC_TIMEOUT", "8"}};
    for (const auto& [key, value] : ranks[rank].env) spawn.env[key] = value;
    spawn.stderrPath = (dir / ("rank" + std::to_string(rank) + ".err")).string();
    pids.push_back(spawnProcess(spawn));
  }
  std::vector<RankResult> results(ranks.size());
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    auto ended = waitAny({pids[rank]}, 60s);
    EXPECT_TRUE(ended.has_value()) << name << ": rank " << rank << " hung";
    if (!ended) ::kill(pids[rank], SIGKILL);
    results[rank] = {ended ? ended->second : ExitStatus{.code = -1},
                     readFile(dir / ("rank" + std::to_string(rank) + ".err"))};
  }
  return results;
}

void expectNamed(const RankResult& result, const std::string& text, int rank) {
  EXPECT_FALSE(result.status.ok()) << "rank " << rank << " should have failed";
  EXPECT_NE(result.err.find(text), std::string::npos) << "rank " << rank << ": " << result.err;
}

std::vector<std::string> bench(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"bench",       "allreduce", "--min-bytes", "4K",
                                   "--max-bytes", "4K",        "--iters",     "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(StartupCheck, SameConfigurationRuns) {
  auto results = runJob("same", {{bench()}, {bench()}, {bench()}});
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_TRUE(results[rank].status.ok()) << results[rank].status.describe() << results[rank].err;
  }
}

TEST(StartupCheck, DifferentSettingIsNamedByEveryRank) {
  auto results = runJob("setting", {{bench()}, {bench()}, {bench({"--warmup", "2"})}});
  for (int rank = 0; rank < 3; ++rank) {
    expectNamed(results[rank], "rank 2 has --warmup 2 but rank 0 has 3", rank);
    EXPECT_EQ(results[rank].status.code, 2) << "a configuration error";
  }
}

TEST(StartupCheck, DifferentWorldSizeIsNamed) {
  auto results = runJob("world", {{bench()}, {bench()}, {bench(), {{"WORLD_SIZE", "4"}}}});
  expectNamed(results[0], "rank 2 has world size 4 but rank 0 has 3", 0);
  expectNamed(results[2], "rank 2 has world size 4 but rank 0 has 3", 2);
  EXPECT_FALSE(results[1].status.ok());  // its job is gone
}

TEST(StartupCheck, DifferentJobTokenIsNamed) {
  auto results =
      runJob("token", {{bench()}, {bench(), {{"GRADSYNC_JOB_TOKEN", "other"}}}, {bench()}});
  expectNamed(results[1], "[rank 1]", 1);
  expectNamed(results[1], "token", 1);
  expectNamed(results[0], "rank 1 did not join the job", 0);
  EXPECT_FALSE(results[2].status.ok());
}

#ifdef GRADSYNC_HAVE_TORCH
std::vector<std::string> train(const std::string& model, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"train",     "--model", model, "--dataset",
                                   "synthetic", "--steps", "2",   "--quiet"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(StartupCheck, DifferentModelOrCompressorIsNamedByEveryRank) {
  auto results = runJob("model", {{train("mlp")}, {train("mlp")}, {train("cnn")}});
  for (int rank = 0; rank < 3; ++rank) {
    expectNamed(results[rank], "rank 2 has --model cnn but rank 0 has mlp", rank);
  }
  results = runJob("compressor", {{train("mlp")}, {train("mlp", {"--compress", "topk:0.01"})}});
  for (int rank = 0; rank < 2; ++rank) {
    expectNamed(results[rank], "rank 1 has --compress topk:0.01 but rank 0 has none", rank);
  }
}
#endif

#ifdef GRADSYNC_HAVE_MPI
// mpirun's MPMD form gives rank 2 another --warmup: every rank names it, and mpirun fails.
TEST(StartupCheck, DifferentSettingUnderMpirunIsNamed) {
  fs::path dir = scratch("mpi");
  SpawnOptions spawn;
  spawn.argv = {GRADSYNC_MPIRUN, "-np", "2", GRADSYNC_BIN};
  for (const std::string& arg : bench({"--transport", "mpi"})) spawn.argv.push_back(arg);
  for (const char* arg : {":", "-np", "1", GRADSYNC_BIN}) spawn.argv.push_back(arg);
  for (const std::string& arg : bench({"--transport", "mpi", "--warmup", "2"})) {
    spawn.argv.push_back(arg);
  }
  spawn.stdoutPath = (dir / "out").string();
  spawn.stderrPath = (dir / "err").string();
  auto ended = waitAny({spawnProcess(spawn)}, 120s);
  ASSERT_TRUE(ended.has_value()) << "mpirun hung";
  EXPECT_FALSE(ended->second.ok());
  std::string err = readFile(dir / "err");
  for (int rank = 0; rank < 3; ++rank) {
    std::string line =
        "[rank " + std::to_string(rank) + "] startup check: rank 2 has --warmup 2 but rank 0 has 3";
    EXPECT_NE(err.find(line), std::string::npos) << err;
  }
}
#endif

}  // namespace
}  // namespace gradsync
