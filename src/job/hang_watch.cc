#include "job/hang_watch.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// Added to a member's count when it leaves its round normally: no heartbeat count gets near it.
constexpr int64_t kLeft = int64_t{1} << 40;

std::string aliveKey(int64_t round, int rank) {
  return fmt::format("elastic/{}/alive/{}", round, rank);
}

}  // namespace

HangWatch::HangWatch(Store& store, int64_t round, int rank, int size, std::string watched,
                     std::chrono::milliseconds bound,
                     std::function<void(std::exception_ptr)> onHung)
    : store_(store),
      round_(round),
      rank_(rank),
      size_(size),
      mine_(aliveKey(round, rank)),
      theirs_(aliveKey(round, (rank + 1) % size)),
      watched_(std::move(watched)),
      bound_(bound),
      onHung_(std::move(onHung)),
      lastChange_(std::chrono::steady_clock::now()),
      lastCheck_(lastChange_),
      thread_([this] { watch(); }) {}

HangWatch::~HangWatch() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  try {
    store_.add(mine_, kLeft);
  } catch (const Error&) {  // the store is gone: nobody is left to watch this member
  }
}

void HangWatch::watch() {
  const auto period = std::max(bound_ / 4, std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    try {
      beat(std::chrono::steady_clock::now());
    } catch (const Error& e) {  // the store is lost: the round's own waits will say so
      GS_LOG(kDebug, "elastic round {}: hang watch of rank {} ends: {}", round_, rank_, e.what());
      return;
    }
    lock.lock();
  }
}

void HangWatch::beat(std::chrono::steady_clock::time_point now) {
  if (now - lastCheck_ > bound_ / 2) lastChange_ = now;  // this thread stood still itself
  lastCheck_ = now;
  store_.add(mine_, 1);
  if (!watching_) return;  // beats on after naming one: its own silence would blame it
  const int64_t count = store_.add(theirs_, 0);
  if (count >= kLeft) {
    watching_ = false;
    return;
  }
  if (count != lastCount_) {
    lastCount_ = count;
    lastChange_ = now;
    return;
  }
  if (now - lastChange_ < bound_) return;
  watching_ = false;
  const auto silent =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - lastChange_).count();
  onHung_(std::make_exception_ptr(TimeoutError(
      fmt::format("elastic round {}: {} gave no sign of life for {} ms (hung: stopped, frozen "
                  "or swapping; --hang-timeout {} ms)",
                  round_, watched_, silent, bound_.count()),
      {.rank = rank_,
       .peer = (rank_ + 1) % size_,
       .operation = "elastic hang watch",
       .hint = "a worker paused on purpose for longer (a debugger) needs a larger "
               "--hang-timeout, or 0: then only --timeout bounds a silent worker"})));
}

std::unique_ptr<HangWatch> watchRound(Store& store, const ElasticMembership& m,
                                      std::chrono::milliseconds bound, Transport& transport) {
  if (m.size() < 2 || bound.count() <= 0) return nullptr;
  const int next = (m.rank + 1) % m.size();
  return std::make_unique<HangWatch>(store, m.round, m.rank, m.size(),
                                     describeMember(m.members[next], next), bound,
                                     [&transport](std::exception_ptr e) { transport.abort(e); });
}

}  // namespace gradsync
