#include "common/stop_request.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace gradsync {
namespace {

std::atomic<int> gRequested{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void onStopSignal(int signal) {
  if (gRequested.exchange(signal) != 0) {  // the second: stop now
    static const char kMessage[] = "gradsync: second stop signal, exiting at once\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(128 + signal);
  }
  static const char kMessage[] =
      "gradsync: stop requested; finishing the step (and writing a checkpoint with "
      "--checkpoint-dir; again to exit now)\n";
  (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
}

}  // namespace

void installStopHandlers() {
  struct sigaction action {};
  action.sa_handler = onStopSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
  ::signal(SIGXFSZ, SIG_IGN);
}

int stopRequested() {
  return gRequested.load(std::memory_order_relaxed);
}

void requestStop(int signal) {
  gRequested.store(signal);
}

void clearStopRequest() {
  gRequested.store(0);
}

}  // namespace gradsync
