// HangWatch (job/hang_watch.h): the heartbeats of a round's members through one in-memory store,
// each member's watch on a thread of its own. A member whose watch thread freezes (as under
// SIGSTOP: its store requests block) is named by the member before it within the bound, and only
// by that one; a member that leaves normally, or beats on through a long time, is never named;
// a watcher that was frozen itself gives the member it watches a whole bound once thawed.
#include "job/hang_watch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "gradsync/error.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kBound = 400ms;

// The shared store as one member's thread sees it: freeze() makes its requests block until
// thaw(), as a stopped process's would.
class FreezableStore : public Store {
 public:
  explicit FreezableStore(std::shared_ptr<Store> shared) : shared_(std::move(shared)) {}
  void set(const std::string& key, const Bytes& value) override {
    pass();
    shared_->set(key, value);
  }
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    pass();
    return shared_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    pass();
    return shared_->add(key, delta);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    pass();
    shared_->wait(keys, timeout);
  }
  void freeze() {
    std::lock_guard<std::mutex> lock(mutex_);
    frozen_ = true;
  }
  void thaw() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      frozen_ = false;
    }
    thawed_.notify_all();
  }

 private:
  void pass() {
    std::unique_lock<std::mutex> lock(mutex_);
    thawed_.wait(lock, [this] { return !frozen_; });
  }

  std::shared_ptr<Store> shared_;
  std::mutex mutex_;
  std::condition_variable thawed_;
  bool frozen_ = false;
};

// What one member's watch reported, and when.
struct Report {
  std::mutex mutex;
  std::optional<std::string> message;
  std::optional<int> peer;
  Clock::time_point at;

  void take(std::exception_ptr error) {
    std::lock_guard<std::mutex> lock(mutex);
    try {
      std::rethrow_exception(error);
    } catch (const TimeoutError& e) {
      message = e.what();
      peer = e.context().peer;
    }
    at = Clock::now();
  }
  bool named() {
    std::lock_guard<std::mutex> lock(mutex);
    return message.has_value();
  }
};

// A round of `size` members over one shared store, each with its own view of it.
struct Round {
  explicit Round(int size) : shared(makeInMemoryStore()), reports(size) {
    for (int rank = 0; rank < size; ++rank) {
      views.push_back(std::make_unique<FreezableStore>(shared));
    }
    for (int rank = 0; rank < size; ++rank) start(rank);
  }
  void start(int rank) {
    const int size = static_cast<int>(views.size());
    watches.push_back(std::make_unique<HangWatch>(
        *views[rank], 7, rank, size, "rank " + std::to_string((rank + 1) % size), kBound,
        [this, rank](std::exception_ptr e) { reports[rank].take(e); }));
  }

  std::shared_ptr<Store> shared;
  std::vector<std::unique_ptr<FreezableStore>> views;
  std::vector<Report> reports;
  std::vector<std::unique_ptr<HangWatch>> watches;
};

TEST(HangWatch, MembersThatBeatOnAreNeverNamed) {
  Round round(3);
  std::this_thread::sleep_for(3 * kBound);
  for (Report& r : round.reports) EXPECT_FALSE(r.named());
}

TEST(HangWatch, AFrozenMemberIsNamedWithinTheBoundByTheMemberBeforeIt) {
  Round round(3);
  std::this_thread::sleep_for(kBound);
  const auto frozen = Clock::now();
  round.views[2]->freeze();
  const auto deadline = frozen + 3 * kBound;
  while (!round.reports[1].named() && Clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(round.reports[1].named()) << "rank 1 watches rank 2";
  const auto after = round.reports[1].at - frozen;
  // Within [bound - period, bound + 2 periods] (period = bound/4: the last read that saw a change
  // was up to a period either side of the freeze, the first read past the bound up to a period
  // after it); the upper bound leaves a half bound for a loaded machine's scheduling.
  EXPECT_GE(after, kBound - kBound / 4);
  EXPECT_LE(after, 2 * kBound) << std::chrono::duration<double>(after).count() << " s";
  EXPECT_NE(round.reports[1].message->find("elastic round 7: rank 2 gave no sign of life"),
            std::string::npos)
      << *round.reports[1].message;
  EXPECT_EQ(round.reports[1].peer, 2);
  EXPECT_FALSE(round.reports[0].named()) << "rank 0 watches rank 1, which beats on";
  round.views[2]->thaw();
}

// A watcher that stood still itself cannot tell who did: thawed, it gives the member it watches
// a whole bound from then, though that one's count has not moved since before the freeze.
TEST(HangWatch, AThawedWatcherRestartsItsClock) {
  Round round(2);
  std::this_thread::sleep_for(kBound / 2);
  round.views[0]->freeze();
  std::this_thread::sleep_for(2 * kBound);  // rank 1 names rank 0 meanwhile, and beats on
  round.views[1]->freeze();                 // now rank 1 stands still too
  const auto thawed = Clock::now();
  round.views[0]->thaw();
  while (!round.reports[0].named() && Clock::now() < thawed + 3 * kBound) {
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(round.reports[0].named());
  EXPECT_GE(round.reports[0].at - thawed, kBound - kBound / 4) << "named before a bound had passed";
  EXPECT_TRUE(round.reports[1].named());
  round.views[1]->thaw();
}

TEST(HangWatch, AMemberThatLeavesIsNotNamed) {
  Round round(2);
  std::this_thread::sleep_for(kBound / 2);
  round.watches[1].reset();  // rank 1 ends its round normally
  std::this_thread::sleep_for(3 * kBound);
  EXPECT_FALSE(round.reports[0].named()) << *round.reports[0].message;
}

TEST(HangWatch, AMemberThatNeverBeatsIsNamed) {
  auto store = makeInMemoryStore();
  Report report;
  const auto start = Clock::now();
  HangWatch watch(*store, 0, 0, 2, "rank 1", kBound,
                  [&report](std::exception_ptr e) { report.take(e); });
  while (!report.named() && Clock::now() < start + 3 * kBound) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(report.named());
  EXPECT_LE(report.at - start, 2 * kBound);
}

}  // namespace
}  // namespace gradsync
