#include "launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "common/socket.h"
#include "common/subprocess.h"
#include "gradsync/error.h"
#include "rendezvous/tcp_store.h"

namespace gradsync {
namespace {

// The children to forward signals to. A signal handler can reach only static storage; this is
// written by the launching thread alone, and only read by the handlers.
constexpr int kMaxChildren = 1024;
pid_t gChildren[kMaxChildren];
std::atomic<int> gChildCount{0};
std::atomic<int> gSignal{0};  // the signal the launcher was sent (no restarts after one)

// gradsync train's exit code after a graceful stop (kStoppedExitCode in torch/trainer.h): the
// process was asked to stop, not failed, so it is not restarted.
constexpr int kAskedToStop = 75;

void forwardSignal(int signal) {
  gSignal.store(signal);
  for (int i = 0; i < gChildCount.load(); ++i) {
    if (gChildren[i] > 0) ::kill(gChildren[i], signal);  // 0: reaped, its pid may be reused
  }
}

void track(pid_t pid) {
  const int at = gChildCount.load();
  gChildren[at] = pid;
  gChildCount.store(at + 1);
}

void untrack(pid_t pid) {
  for (int i = 0; i < gChildCount.load(); ++i) {
    if (gChildren[i] == pid) gChildren[i] = 0;
  }
}

std::string randomToken() {
  std::random_device device;
  std::string token;
  for (int i = 0; i < 4; ++i) token += fmt::format("{:08x}", device());
  return token;
}

int freePort() {
  Fd probe = listenTcp("127.0.0.1", 0);
  return boundPort(probe.get());
}

void killAll(const std::vector<pid_t>& pids, int signal) {
  for (pid_t pid : pids) ::kill(pid, signal);
}

// What every process of one job shares.
struct Job {
  std::string jobId = fmt::format("local-{}", ::getpid());
  std::string token = randomToken();
  std::string port;
};

// Starts the process of `rank` (its slot) with the job's environment.
pid_t spawnRank(const LaunchOptions& options, const Job& job, int rank, int restarts) {
  SpawnOptions spawn;
  spawn.argv = options.command;
  spawn.env = {
      {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(options.processes)},
      {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(options.processes)},
      {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", job.port},
      {"GRADSYNC_JOB_ID", job.jobId},       {"GRADSYNC_JOB_TOKEN", job.token}};
  if (options.tls) spawn.env.emplace("GRADSYNC_TLS", "1");
  if (options.elastic) {
    spawn.env.emplace("GRADSYNC_EXTERNAL_STORE", "1");
    spawn.env.emplace("GRADSYNC_RESTART_COUNT", std::to_string(restarts));
  }
  const pid_t pid = spawnProcess(spawn);
  track(pid);
  return pid;
}

// Starts the processes; returns their pids, by rank.
std::vector<pid_t> spawnRanks(const LaunchOptions& options, const Job& job) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < options.processes; ++rank) {
    try {
      pids.push_back(spawnRank(options, job, rank, 0));
    } catch (...) {  // the ranks already started would wait for this one until their timeout
      killAll(pids, SIGKILL);
      for (pid_t pid : pids) waitAny({pid}, std::chrono::seconds(5));
      throw;
    }
  }
  return pids;
}

int exitCodeOf(const ExitStatus& status) {
  return status.signal != 0 ? 128 + status.signal : status.code;
}

// Waits for every process. Every failed rank is reported; a rank killed by a signal is the
// likely culprit (the others fail because they lost it), so it decides the exit code. Once one
// failed, the rest get `grace` to notice and report before they are killed.
int superviseRanks(const std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  int result = 0;
  bool resultFromSignal = false;
  std::vector<pid_t> running = pids;
  std::optional<Deadline> killAt;
  while (!running.empty()) {
    auto wait = killAt ? std::chrono::duration_cast<std::chrono::milliseconds>(killAt->remaining())
                       : std::chrono::milliseconds(24 * 3600 * 1000);
    auto ended = waitAny(running, std::max(wait, std::chrono::milliseconds(0)));
    if (!ended) {
      std::fprintf(stderr,
                   "gradsync launch: killing %zu process(es) still running %lld s after "
                   "the first failure\n",
                   running.size(), static_cast<long long>(grace.count() / 1000));
      killAll(running, SIGKILL);
      killAt.emplace(std::chrono::seconds(5));
      continue;
    }
    auto [pid, status] = *ended;
    std::erase(running, pid);
    untrack(pid);
    if (status.ok()) continue;
    auto rank = std::find(pids.begin(), pids.end(), pid) - pids.begin();
    std::fprintf(stderr, "gradsync launch: rank %d %s\n", static_cast<int>(rank),
                 status.describe().c_str());
    if (result == 0 || (status.signal != 0 && !resultFromSignal)) {
      result = exitCodeOf(status);
      resultFromSignal = status.signal != 0;
    }
    if (!killAt) killAt.emplace(grace);
  }
  return result;
}

// Elastic workers: a failed process ends alone (the others re-form the job without it) and, while
// restarts are left and the launcher was not asked to stop, starts again in its slot. Every wait
// is the workers' own (they never hang: each bounds its waits), so none is added here.
int superviseElastic(const LaunchOptions& options, const Job& job, std::vector<pid_t> pids) {
  std::vector<ExitStatus> last(pids.size());
  std::vector<int> restartsOf(pids.size(), 0);
  std::vector<pid_t> running = pids;
  int restarts = 0;
  while (!running.empty()) {
    auto ended = waitAny(running, std::chrono::hours(24));
    if (!ended) continue;
    auto [pid, status] = *ended;
    std::erase(running, pid);
    untrack(pid);
    const auto slot = static_cast<size_t>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    last[slot] = status;
    if (status.ok()) continue;
    std::fprintf(stderr, "gradsync launch: worker %zu %s\n", slot, status.describe().c_str());
    const bool failed = status.signal != 0 || status.code != kAskedToStop;
    if (!failed || restarts >= options.maxRestarts || gSignal.load() != 0 ||
        gChildCount.load() >= kMaxChildren) {
      continue;
    }
    ++restarts;
    std::fprintf(stderr, "gradsync launch: restarting worker %zu (restart %d of %d)\n", slot,
                 restarts, options.maxRestarts);
    pids[slot] = spawnRank(options, job, static_cast<int>(slot), ++restartsOf[slot]);
    running.push_back(pids[slot]);
  }
  if (std::any_of(last.begin(), last.end(), [](const ExitStatus& s) { return s.ok(); })) return 0;
  int result = 0;
  bool fromSignal = false;
  for (const ExitStatus& status : last) {  // as superviseRanks: a signal is the likely culprit
    if (result == 0 || (status.signal != 0 && !fromSignal)) {
      result = exitCodeOf(status);
      fromSignal = status.signal != 0;
    }
  }
  return result;
}

}  // namespace

int launchLocal(const LaunchOptions& options) {
  if (options.processes < 1 || options.processes > kMaxChildren) {
    throw ConfigError(fmt::format("cannot launch {} processes", options.processes),
                      {.hint = fmt::format("use 1..{}", kMaxChildren)});
  }
  if (options.command.empty()) throw ConfigError("nothing to launch: the command is empty");
  struct sigaction action {};  // before spawning: a signal must never orphan the children
  action.sa_handler = forwardSignal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  if (options.maxRestarts < 0) throw ConfigError("--max-restarts must be >= 0");
  const bool elastic = options.elastic || options.maxRestarts > 0;
  LaunchOptions launch = options;
  launch.elastic = elastic;
  Job job;
  // Elastic: the store lives here, so that it outlives every worker (rank 0's included).
  std::unique_ptr<TcpStoreServer> store;
  if (elastic) {
    store = std::make_unique<TcpStoreServer>(
        SocketAddress{"127.0.0.1", 0}, TcpStoreOptions{.jobId = job.jobId, .jobToken = job.token});
    job.port = std::to_string(store->port());
  } else {
    job.port = std::to_string(freePort());
  }
  std::vector<pid_t> pids = spawnRanks(launch, job);
  int result = elastic ? superviseElastic(launch, job, pids) : superviseRanks(pids, options.grace);
  gChildCount.store(0);
  return result;
}

}  // namespace gradsync
