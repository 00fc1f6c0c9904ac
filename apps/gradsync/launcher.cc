#include "launcher.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "common/socket.h"
#include "common/subprocess.h"
#include "gradsync/error.h"
#include "job/elastic_rendezvous.h"
#include "rendezvous/tcp_store.h"

namespace gradsync {
namespace {

// The children to forward signals to. A signal handler can reach only static storage; this is
// written before the handlers are installed and only read by them.
constexpr int kMaxChildren = 1024;
pid_t gChildren[kMaxChildren];
std::atomic<int> gChildCount{0};
std::atomic<int> gSignal{0};  // the signal the launcher was sent (elastic: no restarts after one)

// gradsync train's exit code after a graceful stop (kStoppedExitCode in torch/train/trainer.h): the
// process was asked to stop, not failed, so it is not restarted.
constexpr int kAskedToStop = 75;

void forwardSignal(int signal) {
  gSignal.store(signal);
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

void remember(pid_t pid) {
  const int slot = gChildCount.load();
  if (slot >= kMaxChildren) return;  // respawns beyond the table: signals do not reach them
  gChildren[slot] = pid;
  gChildCount.fetch_add(1);
}

void forget(pid_t pid) {
  for (int i = 0; i < gChildCount.load(); ++i) {
    if (gChildren[i] == pid) gChildren[i] = 0;
  }
}

int exitCodeOf(const ExitStatus& status) {
  return status.signal != 0 ? 128 + status.signal : status.code;
}

// Every rank's command line and environment, to start it (again), with the store at `port`.
std::vector<SpawnOptions> rankSpawns(const LaunchOptions& options, const std::string& port,
                                     const std::string& token) {
  std::vector<SpawnOptions> spawns;
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
    if (options.elastic) {
      spawn.env.emplace("GRADSYNC_EXTERNAL_STORE", "1");
      spawn.env.emplace("GRADSYNC_RESTART_COUNT", "0");
    }
    spawns.push_back(std::move(spawn));
  }
  return spawns;
}

// Starts the processes; returns their pids, by rank.
std::vector<pid_t> spawnRanks(const std::vector<SpawnOptions>& spawns) {
  std::vector<pid_t> pids;
  for (const SpawnOptions& spawn : spawns) {
    try {
      pids.push_back(spawnProcess(spawn));
    } catch (...) {  // the ranks already started would wait for this one until their timeout
      killAll(pids, SIGKILL);
      for (pid_t pid : pids) waitAny({pid}, std::chrono::seconds(5));
      throw;
    }
    remember(pids.back());
  }
  return pids;
}

// Starts the process of `slot` again (--respawn and --max-restarts alike): the same command line
// and environment, GRADSYNC_RESTART_COUNT counting the slot's restarts; it takes the slot's place
// in `pids` and `running`.
void restartSlot(const std::vector<SpawnOptions>& spawns, size_t slot, int restartsOfSlot,
                 std::vector<pid_t>& pids, std::vector<pid_t>& running) {
  SpawnOptions again = spawns[slot];
  again.env["GRADSYNC_RESTART_COUNT"] = std::to_string(restartsOfSlot);
  pids[slot] = spawnProcess(again);
  remember(pids[slot]);
  running.push_back(pids[slot]);
}

// Whether `rank`, just killed by a signal, is started again (LaunchOptions::respawn).
bool respawnable(const LaunchOptions& options, int rank, const ExitStatus& status, int respawned,
                 const std::vector<pid_t>& running) {
  const bool listed =
      std::find(options.respawn.begin(), options.respawn.end(), rank) != options.respawn.end();
  return listed && status.signal != 0 && respawned < options.maxRespawns && !running.empty();
}

// Waits for every process. Every failed rank is reported; a rank killed by a signal is the
// likely culprit (the others fail because they lost it), so it decides the exit code. Once one
// failed, the rest get `grace` to notice and report before they are killed. A respawnable rank
// killed by a signal is started again instead (and is no failure).
int superviseRanks(const LaunchOptions& options, const std::vector<SpawnOptions>& spawns,
                   std::vector<pid_t> pids) {
  int result = 0;
  bool resultFromSignal = false;
  int respawned = 0;
  std::vector<int> respawnsOf(pids.size(), 0);
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
                   running.size(), static_cast<long long>(options.grace.count() / 1000));
      killAll(running, SIGKILL);
      killAt.emplace(std::chrono::seconds(5));
      continue;
    }
    auto [pid, status] = *ended;
    std::erase(running, pid);
    forget(pid);
    if (status.ok()) continue;
    const auto rank = static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    if (!killAt && respawnable(options, rank, status, respawned, running)) {
      ++respawned;
      std::fprintf(stderr, "gradsync launch: rank %d %s; respawning it (%d of at most %d)\n", rank,
                   status.describe().c_str(), respawned, options.maxRespawns);
      const auto slot = static_cast<size_t>(rank);
      restartSlot(spawns, slot, ++respawnsOf[slot], pids, running);
      continue;
    }
    std::fprintf(stderr, "gradsync launch: rank %d %s\n", rank, status.describe().c_str());
    if (result == 0 || (status.signal != 0 && !resultFromSignal)) {
      result = exitCodeOf(status);
      resultFromSignal = status.signal != 0;
    }
    if (!killAt) killAt.emplace(options.grace);
  }
  return result;
}

// Elastic workers: a failed process ends alone (the others re-form the job without it) and, while
// restarts are left and the launcher was not asked to stop, starts again in its slot. Every wait
// is the workers' own (they never hang: each bounds its waits), so none is added here.
// A worker that fails once the job has finished (its last rank 0 failing to write the last
// checkpoint, say) is not restarted: no round would take it in, and the launch fails with its code.
int superviseElastic(const LaunchOptions& options, const std::vector<SpawnOptions>& spawns,
                     std::vector<pid_t> pids, const std::function<bool()>& jobFinished) {
  std::vector<ExitStatus> last(pids.size());
  std::vector<int> restartsOf(pids.size(), 0);
  std::vector<pid_t> running = pids;
  int restarts = 0;
  int failedAfterFinish = 0;
  while (!running.empty()) {
    auto ended = waitAny(running, std::chrono::hours(24));
    if (!ended) continue;
    auto [pid, status] = *ended;
    std::erase(running, pid);
    forget(pid);
    const auto slot = static_cast<size_t>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
    last[slot] = status;
    if (status.ok()) continue;
    std::fprintf(stderr, "gradsync launch: worker %zu %s\n", slot, status.describe().c_str());
    const bool failed = status.signal != 0 || status.code != kAskedToStop;
    if (status.signal == 0 && status.code == kStateLostExitCode) {
      std::fprintf(stderr,
                   "gradsync launch: worker %zu cannot rejoin: the job's state was lost with the "
                   "last worker holding it; not restarted (resume from a checkpoint)\n",
                   slot);
      continue;
    }
    if (failed && jobFinished()) {
      std::fprintf(stderr, "gradsync launch: the job had finished: worker %zu not restarted\n",
                   slot);
      failedAfterFinish = exitCodeOf(status);
      continue;
    }
    if (!failed || restarts >= options.maxRestarts || gSignal.load() != 0 ||
        gChildCount.load() >= kMaxChildren) {
      continue;
    }
    ++restarts;
    std::fprintf(stderr, "gradsync launch: restarting worker %zu (restart %d of %d)\n", slot,
                 restarts, options.maxRestarts);
    restartSlot(spawns, slot, ++restartsOf[slot], pids, running);
  }
  if (failedAfterFinish != 0) return failedAfterFinish;
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

std::vector<int> parseRankList(const std::string& text) {
  std::vector<int> ranks;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? comma : comma - start);
    const size_t dash = item.find('-');
    try {
      size_t used = 0;
      const int first = std::stoi(item.substr(0, dash), &used);
      const int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
      if (used != (dash == std::string::npos ? item.size() : dash) || first < 0 || last < first) {
        throw std::invalid_argument(item);
      }
      for (int r = first; r <= last; ++r) ranks.push_back(r);
    } catch (const std::logic_error&) {
      throw ConfigError(fmt::format("--respawn: '{}' is not a rank or a range of ranks", item),
                        {.hint = "e.g. --respawn 4-5 or --respawn 4,6"});
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ranks;
}

int launchLocal(const LaunchOptions& options) {
  if (options.processes < 1 || options.processes > kMaxChildren) {
    throw ConfigError(fmt::format("cannot launch {} processes", options.processes),
                      {.hint = fmt::format("use 1..{}", kMaxChildren)});
  }
  if (options.command.empty()) throw ConfigError("nothing to launch: the command is empty");
  if (options.maxRestarts < 0) throw ConfigError("--max-restarts must be >= 0");
  LaunchOptions launch = options;
  launch.elastic = options.elastic || options.maxRestarts > 0;
  if (launch.elastic && !options.respawn.empty()) {
    throw ConfigError(
        "--respawn restarts the ranks it names in a fixed job; --elastic and "
        "--max-restarts restart any worker of an elastic one",
        {.hint = "use one of them (docs/cli.md, gradsync launch)"});
  }
  struct sigaction action {};  // before spawning: a signal must never orphan the children
  action.sa_handler = forwardSignal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  const std::string token = randomToken();
  // Elastic: the store lives here, so that it outlives every worker (rank 0's included).
  std::unique_ptr<TcpStoreServer> store;
  std::shared_ptr<Store> client;  // the launcher's own view of the job (elastic)
  std::string port;
  if (launch.elastic) {
    const TcpStoreOptions storeOptions{.jobId = fmt::format("local-{}", ::getpid()),
                                       .jobToken = token};
    store = std::make_unique<TcpStoreServer>(SocketAddress{"127.0.0.1", 0}, storeOptions);
    client = makeTcpStoreClient(store->address(), storeOptions);
    port = std::to_string(store->port());
  } else {
    port = std::to_string(freePort());
  }
  const std::vector<SpawnOptions> spawns = rankSpawns(launch, port, token);
  std::vector<pid_t> pids = spawnRanks(spawns);
  int result = launch.elastic
                   ? superviseElastic(launch, spawns, pids,
                                      [&client] { return ElasticRendezvous::finished(*client); })
                   : superviseRanks(launch, spawns, pids);
  gChildCount.store(0);
  return result;
}

}  // namespace gradsync
