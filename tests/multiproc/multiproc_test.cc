// Real processes of one job on this host, over each way they can reach each other: shared memory
// (the default between ranks of one host), TCP (GRADSYNC_SHM=0), and both at once (two ranks
// per emulated host: shared memory inside, TCP between).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/socket.h"
#include "common/subprocess.h"
#include "support/sanitized.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct Job {
  std::vector<pid_t> pids;
  fs::path dir;
  std::string log(int rank) const {
    std::ifstream in(dir / ("rank" + std::to_string(rank) + ".err"));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
};

enum class Links { kShm, kTcp, kMixed };

std::string nameOf(Links links) {
  return links == Links::kShm ? "shm" : links == Links::kTcp ? "tcp" : "mixed";
}

// The environment that makes the ranks use `links`.
std::map<std::string, std::string> linksEnv(Links links) {
  if (links == Links::kTcp) return {{"GRADSYNC_SHM", "0"}};
  if (links == Links::kMixed) return {{"GRADSYNC_RANKS_PER_HOST", "2"}};
  return {};
}

// The shared-memory objects the processes `pids` created in /dev/shm (gradsync-PID-...): none
// may outlive a job.
std::vector<std::string> shmLeftovers(const std::vector<pid_t>& pids) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    std::string name = entry.path().filename().string();
    for (pid_t pid : pids) {
      if (name.starts_with("gradsync-" + std::to_string(pid) + "-")) names.push_back(name);
    }
  }
  return names;
}

// Starts `size` collective_rank processes of one job, stderr of each in dir/rankN.err.
Job startJob(int size, const std::vector<std::string>& args, const std::string& timeout = "60",
             Links links = Links::kShm) {
  Job job;
  job.dir = fs::temp_directory_path() /
            ("gradsync-multiproc-" + std::to_string(::getpid()) + "-" + std::to_string(size));
  fs::remove_all(job.dir);
  fs::create_directories(job.dir);
  Fd probe = listenTcp("127.0.0.1", 0);
  std::string port = std::to_string(boundPort(probe.get()));
  probe.reset();
  for (int rank = 0; rank < size; ++rank) {
    SpawnOptions spawn;
    spawn.argv = {COLLECTIVE_RANK_BIN};
    spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
    spawn.env = {{"RANK", std::to_string(rank)},      {"WORLD_SIZE", std::to_string(size)},
                 {"MASTER_ADDR", "127.0.0.1"},        {"MASTER_PORT", port},
                 {"GRADSYNC_JOB_TOKEN", "multiproc"}, {"GRADSYNC_TIMEOUT", timeout}};
    for (const auto& [name, value] : linksEnv(links)) spawn.env[name] = value;
    spawn.stderrPath = (job.dir / ("rank" + std::to_string(rank) + ".err")).string();
    job.pids.push_back(spawnProcess(spawn));
  }
  return job;
}

// Waits for every process; returns their statuses by rank, or fails the test on a hang.
std::vector<ExitStatus> waitAll(const Job& job, std::chrono::milliseconds limit) {
  std::vector<ExitStatus> statuses(job.pids.size());
  std::vector<pid_t> running = job.pids;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!running.empty()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    auto ended = waitAny(running, std::max(left, 0ms));
    if (!ended) {
      for (pid_t pid : running) ::kill(pid, SIGKILL);
      ADD_FAILURE() << running.size() << " process(es) hung past " << limit.count() << " ms";
      waitAny(running, 5s);
      break;
    }
    std::erase(running, ended->first);
    auto index = std::find(job.pids.begin(), job.pids.end(), ended->first) - job.pids.begin();
    statuses[index] = ended->second;
  }
  return statuses;
}

class MultiProcess : public ::testing::TestWithParam<std::tuple<int, Links>> {};

TEST_P(MultiProcess, EveryCollectiveVerifiesAcrossProcesses) {
  auto [size, links] = GetParam();
  Job job = startJob(size, {"verify"}, "60", links);
  std::vector<ExitStatus> statuses = waitAll(job, 240s);
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    EXPECT_TRUE(statuses[rank].ok()) << "rank " << rank << " " << statuses[rank].describe() << "\n"
                                     << job.log(static_cast<int>(rank));
  }
  EXPECT_EQ(shmLeftovers(job.pids), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, MultiProcess,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(Links::kShm, Links::kTcp,
                                                              Links::kMixed)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_" +
                                  nameOf(std::get<1>(info.param));
                         });

// Scale on one machine: 32 processes (8 under a sanitizer, whose processes are heavy on 2 cores)
// rendezvous at once (a connection storm on rank 0's store, 496 mesh connections, 32 descriptors
// per process) and verify every collective at counts up to 64 Ki against naive sums.
TEST(MultiProcessScale, ThirtyTwoProcessesVerifyEveryCollective) {
  const int size = testing::kSanitized ? 8 : 32;
  Job job = startJob(size, {"verify", std::to_string((1 << 16) + 3)}, /*timeout=*/"120");
  std::vector<ExitStatus> statuses = waitAll(job, 300s);
  for (size_t rank = 0; rank < statuses.size(); ++rank) {
    EXPECT_TRUE(statuses[rank].ok()) << "rank " << rank << " " << statuses[rank].describe() << "\n"
                                     << job.log(static_cast<int>(rank));
  }
}

// Kill one rank mid-allreduce: every other rank must fail promptly (well within the timeout)
// with an error naming the lost rank, never hang, and no shared memory may be left behind. In
// the ring (1 Mi floats) and in recursive doubling (256 floats, allreduce's pick for them).
class MultiProcessFailure : public ::testing::TestWithParam<std::tuple<Links, size_t>> {};

TEST_P(MultiProcessFailure, KilledRankIsNamedByEverySurvivor) {
  constexpr int kSize = 4;
  constexpr int kVictim = 2;
  const auto [links, count] = GetParam();
  Job job = startJob(
      kSize,
      {"loop", (fs::temp_directory_path() / "gs-kill-ready").string(), std::to_string(count)},
      /*timeout=*/"30", links);
  auto ready = [&] {
    for (int r = 0; r < kSize; ++r) {
      if (!fs::exists(fs::temp_directory_path() / ("gs-kill-ready." + std::to_string(r)))) {
        return false;
      }
    }
    return true;
  };
  auto waitStart = std::chrono::steady_clock::now();
  while (!ready() && std::chrono::steady_clock::now() - waitStart < 60s) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(ready()) << "the job never started: " << job.log(0);
  std::this_thread::sleep_for(200ms);
  ::kill(job.pids[kVictim], SIGKILL);
  auto killed = std::chrono::steady_clock::now();
  std::vector<ExitStatus> statuses = waitAll(job, 60s);
  auto elapsed = std::chrono::steady_clock::now() - killed;
  EXPECT_LT(elapsed, 10s) << "survivors took too long to notice";
  EXPECT_EQ(statuses[kVictim].signal, SIGKILL);
  for (int rank = 0; rank < kSize; ++rank) {
    if (rank == kVictim) continue;
    std::string log = job.log(rank);
    EXPECT_EQ(statuses[rank].code, 1) << "rank " << rank << " " << statuses[rank].describe();
    EXPECT_NE(log.find("rank 2"), std::string::npos) << "rank " << rank << " said: " << log;
  }
  for (int r = 0; r < kSize; ++r) {
    fs::remove(fs::temp_directory_path() / ("gs-kill-ready." + std::to_string(r)));
  }
  EXPECT_EQ(shmLeftovers(job.pids), std::vector<std::string>{});
}

INSTANTIATE_TEST_SUITE_P(Links, MultiProcessFailure,
                         ::testing::Combine(::testing::Values(Links::kShm, Links::kTcp,
                                                              Links::kMixed),
                                            ::testing::Values(size_t{1} << 20, size_t{256})),
                         [](const auto& info) {
                           return nameOf(std::get<0>(info.param)) +
                                  (std::get<1>(info.param) > 256 ? "_ring" : "_doubling");
                         });

}  // namespace
}  // namespace gradsync
