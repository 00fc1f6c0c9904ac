#include "support/killed_rank.h"

#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <thread>

#include "common/socket.h"
#include "common/subprocess.h"
#include "support/read_file.h"

namespace gradsync::testing {

using namespace std::chrono_literals;

namespace {

std::vector<pid_t> startJob(const KilledRankJob& job, const std::filesystem::path& dir) {
  Fd probe = listenTcp("127.0.0.1", 0);
  const std::string port = std::to_string(boundPort(probe.get()));
  probe.reset();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < job.ranks; ++rank) {
    SpawnOptions spawn;
    spawn.argv = job.argv;
    if (rank != 0) spawn.argv.push_back("--quiet");
    spawn.env = {{"RANK", std::to_string(rank)},
                 {"WORLD_SIZE", std::to_string(job.ranks)},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", port},
                 {"GRADSYNC_JOB_TOKEN", job.token}};
    spawn.stdoutPath = (dir / ("rank" + std::to_string(rank) + ".out")).string();
    spawn.stderrPath = (dir / ("rank" + std::to_string(rank) + ".err")).string();
    pids.push_back(spawnProcess(spawn));
  }
  return pids;
}

}  // namespace

void expectKilledRankNamedByTheOthers(const KilledRankJob& job, const std::filesystem::path& dir) {
  const std::vector<pid_t> pids = startJob(job, dir);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (readFile(dir / "rank0.out").find(job.ready) == std::string::npos) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << readFile(dir / "rank0.err");
    ASSERT_FALSE(waitAny(pids, 0ms).has_value()) << readFile(dir / "rank0.err");
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(1s);
  ASSERT_FALSE(waitAny(pids, 0ms).has_value()) << readFile(dir / "rank0.err");
  ::kill(pids[job.victim], SIGKILL);
  const auto killed = std::chrono::steady_clock::now();
  const std::string named = "rank " + std::to_string(job.victim);
  for (int rank = 0; rank < job.ranks; ++rank) {
    if (rank == job.victim) continue;
    auto ended = waitAny({pids[rank]}, 60s);
    ASSERT_TRUE(ended.has_value()) << "rank " << rank << " hung";
    EXPECT_EQ(ended->second.code, 1) << ended->second.describe();
    const std::string err = readFile(dir / ("rank" + std::to_string(rank) + ".err"));
    EXPECT_NE(err.find(named), std::string::npos) << err;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 10s) << "the others took too long to notice";
  waitAny({pids[job.victim]}, 5s);
}

}  // namespace gradsync::testing
