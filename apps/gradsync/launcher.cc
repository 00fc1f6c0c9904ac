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

namespace gradsync {
namespace {

// The children to forward signals to. A signal handler can reach only static storage; this is
// written before the handlers are installed and only read by them.
constexpr int kMaxChildren = 1024;
pid_t gChildren[kMaxChildren];
std::atomic<int> gChildCount{0};

void forwardSignal(int signal) {
  for (int i = 0; i < gChildCount.load(); ++i) {
    if (gChildren[i] > 0) ::kill(gChildren[i], signal);  // 0: reaped, its pid may be reused
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

// Starts the processes with the job's environment; returns their pids, by rank.
std::vector<pid_t> spawnRanks(const LaunchOptions& options) {
  std::string port = std::to_string(freePort());
  std::string token = randomToken();
  std::vector<pid_t> pids;
  const int perHost = options.ranksPerHost > 0 ? options.ranksPerHost : options.processes;
  for (int rank = 0; rank < options.processes; ++rank) {
    SpawnOptions spawn;
    spawn.argv = options.command;
    const int hostBegin = rank / perHost * perHost;
    spawn.env = {
        {"RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(options.processes)},
        {"LOCAL_RANK", std::to_string(rank - hostBegin)},
        {"LOCAL_WORLD_SIZE", std::to_string(std::min(perHost, options.processes - hostBegin))},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", port},
        {"GRADSYNC_JOB_ID", fmt::format("local-{}", ::getpid())},
        {"GRADSYNC_JOB_TOKEN", token}};
    if (options.tls) spawn.env.emplace("GRADSYNC_TLS", "1");
    if (options.ranksPerHost > 0) {
      spawn.env.emplace("GRADSYNC_RANKS_PER_HOST", std::to_string(options.ranksPerHost));
    }
    try {
      pids.push_back(spawnProcess(spawn));
    } catch (...) {  // the ranks already started would wait for this one until their timeout
      killAll(pids, SIGKILL);
      for (pid_t pid : pids) waitAny({pid}, std::chrono::seconds(5));
      throw;
    }
    gChildren[gChildCount.load()] = pids.back();
    gChildCount.fetch_add(1);
  }
  return pids;
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
    for (int i = 0; i < gChildCount.load(); ++i) {
      if (gChildren[i] == pid) gChildren[i] = 0;
    }
    if (status.ok()) continue;
    auto rank = std::find(pids.begin(), pids.end(), pid) - pids.begin();
    std::fprintf(stderr, "gradsync launch: rank %d %s\n", static_cast<int>(rank),
                 status.describe().c_str());
    if (result == 0 || (status.signal != 0 && !resultFromSignal)) {
      result = status.signal != 0 ? 128 + status.signal : status.code;
      resultFromSignal = status.signal != 0;
    }
    if (!killAt) killAt.emplace(grace);
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
  std::vector<pid_t> pids = spawnRanks(options);
  int result = superviseRanks(pids, options.grace);
  gChildCount.store(0);
  return result;
}

}  // namespace gradsync
