// `gradsync train --waves 2` as users run it: worker processes over TCP, one killed mid-training,
// and a refusal from the command line.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "common/socket.h"
#include "common/subprocess.h"
#include "support/read_file.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::readFile;

fs::path scratch(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("gradsync-wavelet-e2e-" + std::to_string(::getpid())) / name;
  fs::create_directories(dir);
  return dir;
}

void removeScratch(const fs::path& dir) {
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  fs::remove(dir.parent_path(), ignored);  // fails while another test's folder is there
}

// A worker process killed while both waves of every worker train: the other workers fail
// promptly (not at their 30 s timeout) with an error naming the killed rank, never hang; no
// wave is left waiting at a gate or for the master.
TEST(WaveletCli, KilledWorkerIsNamedByEveryOtherWorker) {
  const fs::path dir = scratch("killed");
  Fd probe = listenTcp("127.0.0.1", 0);
  const std::string port = std::to_string(boundPort(probe.get()));
  probe.reset();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 4; ++rank) {
    SpawnOptions spawn;
    spawn.argv = {GRADSYNC_BIN,
                  "train",
                  "--model",
                  "mlp",
                  "--dataset",
                  "synthetic",
                  "--waves",
                  "2",
                  "--steps",
                  "1000000",
                  "--timeout",
                  "30s",
                  "--wave-consistency",
                  "shared"};
    if (rank != 0) spawn.argv.push_back("--quiet");
    spawn.env = {{"RANK", std::to_string(rank)},
                 {"WORLD_SIZE", "4"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", port},
                 {"GRADSYNC_JOB_TOKEN", "wavelet"}};
    spawn.stdoutPath = (dir / ("rank" + std::to_string(rank) + ".out")).string();
    spawn.stderrPath = (dir / ("rank" + std::to_string(rank) + ".err")).string();
    pids.push_back(spawnProcess(spawn));
  }
  // Rank 0 prints the waves once every worker's engines are up; then training runs.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (readFile(dir / "rank0.out").find("waves: 2") == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << readFile(dir / "rank0.err");
    ASSERT_FALSE(waitAny(pids, 0ms).has_value()) << readFile(dir / "rank0.err");
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(1s);
  ASSERT_FALSE(waitAny(pids, 0ms).has_value()) << readFile(dir / "rank0.err");
  ::kill(pids[2], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  for (int rank : {0, 1, 3}) {
    auto ended = waitAny({pids[rank]}, 60s);
    ASSERT_TRUE(ended.has_value()) << "worker " << rank << " hung";
    EXPECT_EQ(ended->second.code, 1) << ended->second.describe();
    const std::string err = readFile(dir / ("rank" + std::to_string(rank) + ".err"));
    EXPECT_NE(err.find("rank 2"), std::string::npos) << err;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 10s) << "the workers took too long";
  waitAny({pids[2]}, 5s);
  if (!HasFailure()) removeScratch(dir);
}

// The command line refuses an unsupported combination before starting any worker.
TEST(WaveletCli, UnsupportedScheduleIsRefusedUpFront) {
  const fs::path dir = scratch("refused");
  SpawnOptions spawn;
  spawn.argv = {GRADSYNC_BIN, "train",     "--model", "mlp",     "--dataset",
                "synthetic",  "--workers", "2",       "--waves", "2",
                "--schedule", "p3",        "--steps", "4"};
  spawn.stdoutPath = (dir / "out").string();
  spawn.stderrPath = (dir / "err").string();
  auto ended = waitAny({spawnProcess(spawn)}, 60s);
  ASSERT_TRUE(ended.has_value()) << "gradsync hung";
  EXPECT_NE(ended->second.code, 0);
  const std::string err = readFile(dir / "err");
  EXPECT_NE(err.find("--waves 2 does not support --schedule p3"), std::string::npos) << err;
  if (!HasFailure()) removeScratch(dir);
}

}  // namespace
}  // namespace gradsync
