// Gloo baseline for `gradsync bench allreduce`: Gloo's ring allreduce (the `gloo::allreduce(opts)`
// API only: mixing in the legacy algorithm classes stalls at >= 3 ranks) of float32 sums over TCP
// on loopback, measured by the shared method in peer_bench.h.
//
// `peers_gloo_allreduce --workers N [--min-bytes 1M] [--max-bytes 64M] [--iters 20] [--json F]`
// starts the N ranks itself: it makes a temporary directory for Gloo's FileStore rendezvous
// (this Gloo has no TCP store), forks and re-executes itself once per rank with the hidden
// `--rank R --store-dir DIR`, waits for all, and removes the directory. If one rank fails the
// others are killed after a short grace period, so a failure never turns into a hang.
//
// Launched (one rank per host, e.g. under scripts/netem): with RANK and WORLD_SIZE set (or
// --rank R --workers N) and `--store-dir DIR`, a directory every rank sees (and empty at the
// start: a stale store would pair ranks of different runs), it runs as that one rank, its Gloo
// device bound to --host (default: $NETEM_ADDR, else 127.0.0.1).
// Exit status: 0 ok, 2 bad arguments, 3 wrong results, 1 any other error, 128+N killed by signal N.
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "peer_bench.h"

namespace {

using gradsync::peers::BenchOptions;
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

constexpr std::string_view kLoopback = "127.0.0.1";  // Not "localhost", which may be ::1.

struct LaunchOptions {
  int workers = 4;
  int rank = -1;  // Set only in the processes this program starts.
  std::string storeDir;
  std::string host{kLoopback};  // The address this rank's Gloo device binds to.
  int timeoutSeconds = 300;
};

class GlooPeer {
 public:
  explicit GlooPeer(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}

  int rank() const { return context_->rank; }
  int size() const { return context_->size; }

  void allreduceSum(std::span<float> data) {
    allreduce(data.data(), data.size(), static_cast<ReduceFn>(&gloo::sum<float>));
  }

  void barrier() {
    gloo::BarrierOptions options(context_);
    options.setTag(nextTag());
    gloo::barrier(options);
  }

  double maxOverRanks(double value) {
    allreduce(&value, 1, static_cast<ReduceFn>(&gloo::max<double>));
    return value;
  }

  int64_t sumOverRanks(int64_t value) {
    allreduce(&value, 1, static_cast<ReduceFn>(&gloo::sum<int64_t>));
    return value;
  }

 private:
  // In place: Gloo reduces the output buffer when no input is set.
  template <class T>
  void allreduce(T* data, size_t count, ReduceFn reduce) {
    gloo::AllreduceOptions options(context_);
    options.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    options.setOutput(data, count);
    options.setReduceFunction(reduce);
    options.setTag(nextTag());
    gloo::allreduce(options);
  }

  // One tag per operation, as PyTorch's ProcessGroupGloo does, so that a straggler's messages
  // can never be matched with the next operation's.
  uint32_t nextTag() { return tag_++; }

  std::shared_ptr<gloo::Context> context_;
  uint32_t tag_ = 0;
};

int runRank(const BenchOptions& options, const LaunchOptions& launch) {
  gloo::rendezvous::FileStore store(launch.storeDir);
  gloo::transport::tcp::attr attr;
  attr.hostname = launch.host;
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto context = std::make_shared<gloo::rendezvous::Context>(launch.rank, launch.workers);
  context->setTimeout(std::chrono::seconds(launch.timeoutSeconds));
  context->connectFullMesh(store, device);
  GlooPeer peer(context);
  const std::string transport =
      launch.host == kLoopback
          ? "gloo tcp loopback 127.0.0.1, file store rendezvous"
          : fmt::format("gloo tcp {} (rank {}), file store rendezvous", launch.host, launch.rank);
  const int64_t wrong = gradsync::peers::runSweep(peer, "gloo", transport, options);
  if (wrong != 0 && launch.rank == 0) fmt::print(stderr, "error: {} wrong elements\n", wrong);
  return wrong == 0 ? 0 : 3;
}

[[noreturn]] void execRank(int argc, char** argv, int rank, const std::string& storeDir) {
  // Die with the launcher, so that killing it (e.g. by `timeout`) leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::vector<std::string> args(argv, argv + argc);
  args.insert(args.end(), {"--rank", std::to_string(rank), "--store-dir", storeDir});
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  execv("/proc/self/exe", pointers.data());
  fmt::print(stderr, "exec of rank {} failed: {}\n", rank, std::strerror(errno));
  _exit(127);
}

int exitCode(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Reaps every rank. After the first failure the others get a grace period to finish by
// themselves (rank 0 may still be reporting), then are killed. Returns the first failure's code.
int waitForRanks(std::map<pid_t, int> pending) {
  using Clock = std::chrono::steady_clock;
  int result = 0;
  Clock::time_point killAt = Clock::time_point::max();
  while (!pending.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "wait");
    if (pid > 0 && pending.contains(pid)) {
      const int code = exitCode(status);
      if (code != 0 && result == 0) {
        fmt::print(stderr, "gloo rank {} failed with exit status {}\n", pending[pid], code);
        result = code;
        killAt = Clock::now() + std::chrono::seconds(5);
      }
      pending.erase(pid);
      continue;
    }
    if (Clock::now() >= killAt) {
      for (const auto& [child, rank] : pending) kill(child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

int launchRanks(int argc, char** argv, int workers) {
  std::string storeDir = (std::filesystem::temp_directory_path() / "gloo_store.XXXXXX").string();
  if (mkdtemp(storeDir.data()) == nullptr) {
    throw std::system_error(errno, std::generic_category(), "mkdtemp " + storeDir);
  }
  std::fflush(stdout);  // Or the children would inherit and repeat unflushed output.
  std::map<pid_t, int> children;
  for (int rank = 0; rank < workers; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
    if (pid == 0) execRank(argc, argv, rank, storeDir);
    children[pid] = rank;
  }
  const int result = waitForRanks(children);
  std::filesystem::remove_all(storeDir);
  return result;
}

// RANK/WORLD_SIZE (torchrun style, as scripts/netem sets them) when --rank is not given.
void rankFromEnvironment(LaunchOptions& launch) {
  const char* rank = std::getenv("RANK");
  const char* size = std::getenv("WORLD_SIZE");
  if (launch.rank < 0 && rank != nullptr && size != nullptr) {
    launch.rank = std::stoi(rank);
    launch.workers = std::stoi(size);
  }
  if (launch.rank < 0) return;
  if (launch.rank >= launch.workers) {
    throw std::invalid_argument(
        fmt::format("rank {} out of range for {} workers", launch.rank, launch.workers));
  }
  if (launch.storeDir.empty()) {
    throw std::invalid_argument("a launched rank needs --store-dir (a directory all ranks see)");
  }
}

int run(int argc, char** argv) {
  BenchOptions options;
  LaunchOptions launch;
  if (const char* address = std::getenv("NETEM_ADDR")) launch.host = address;
  CLI::App app{
      "Gloo ring allreduce baseline over TCP (starts its own ranks, or runs as RANK of "
      "WORLD_SIZE)"};
  gradsync::peers::addCommonOptions(app, options);
  app.add_option("--workers", launch.workers, "number of ranks to start")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--timeout-s", launch.timeoutSeconds, "Gloo timeout per operation (seconds)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--host", launch.host, "address to bind (launched ranks; default $NETEM_ADDR)")
      ->capture_default_str();
  app.add_option("--store-dir", launch.storeDir,
                 "launched ranks: FileStore directory shared by all ranks (fresh per run)");
  // Set by the launcher for the ranks it starts (else RANK from the environment).
  app.add_option("--rank", launch.rank)->group("");
  try {
    app.parse(argc, argv);
    gradsync::peers::finishOptions(options);
    rankFromEnvironment(launch);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // CLI11 has its own codes; keep the documented one.
  } catch (const std::invalid_argument& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 2;
  }
  if (launch.rank < 0) return launchRanks(argc, argv, launch.workers);
  try {
    return runRank(options, launch);
  } catch (const std::exception& e) {
    fmt::print(stderr, "gloo rank {}: error: {}\n", launch.rank, e.what());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
}
