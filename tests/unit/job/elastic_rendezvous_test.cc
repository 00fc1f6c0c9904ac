// Elastic membership rounds (job/elastic_rendezvous.h), each worker a thread with its own
// ElasticRendezvous over one shared store (in-memory; the TCP store once): rounds form with the
// right members and ranks, a regroup to take a worker in closes at once, a round after a failure
// waits only for the settle time, a late arrival moves on to the next round, MAX caps a round,
// fewer than MIN fails naming the lost workers, and a waiting worker neither hangs nor outlives
// the job.
#include "job/elastic_rendezvous.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "gradsync/error.h"
#include "job/agreement.h"
#include "rendezvous/tcp_store.h"
#include "support/rank_threads.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using MonotonicClock = std::chrono::steady_clock;

ElasticRendezvousOptions optionsFor(int min, int max, int initial) {
  return {.range = {min, max},
          .initialWorkers = initial,
          .timeout = 5s,
          .poll = 2ms,
          .minSettle = 150ms};
}

ElasticWorker fresh(int slot, const std::string& lr = "0.05") {
  return {.name = "worker " + std::to_string(slot),
          .where = "thread",
          .slot = slot,
          .settings = encodeSettings({{"--model", "mlp"}, {"--lr", lr}})};
}

// `worker` after training in `m` up to `progress` steps.
ElasticWorker after(ElasticWorker worker, const ElasticMembership& m, int64_t progress) {
  worker.progress = progress;
  worker.lastRound = m.round;
  worker.lastRank = m.rank;
  return worker;
}

// Round 0 of `count` fresh workers (slots 0..count-1), by slot.
std::vector<ElasticMembership> formFirstRound(Store& store, const ElasticRendezvousOptions& options,
                                              int count) {
  std::vector<ElasticMembership> joined(count);
  testing::runRankThreads(count, [&](int slot) {
    ElasticRendezvous rendezvous(store, options);
    joined[slot] = rendezvous.join(rendezvous.nextRound(), fresh(slot));
  });
  return joined;
}

std::vector<std::string> names(const ElasticMembership& m) {
  std::vector<std::string> out;
  for (const ElasticWorker& w : m.members) out.push_back(w.name);
  return out;
}

TEST(ElasticRange, ParsesMinAndMax) {
  EXPECT_FALSE(parseElasticRange("").enabled());
  const ElasticRange range = parseElasticRange("3:4");
  EXPECT_EQ(range.min, 3);
  EXPECT_EQ(range.max, 4);
  EXPECT_EQ(range.describe(), "3:4");
  for (const char* bad : {"3", "0:4", "5:4", "1:1025", "a:b", ":4", "3:", "-1:2"}) {
    EXPECT_THROW(parseElasticRange(bad), ConfigError) << bad;
  }
}

TEST(ElasticRendezvous, FirstRoundHasEveryLaunchedWorkerRankedBySlot) {
  auto store = makeInMemoryStore();
  for (int count : {1, 3, 4}) {
    auto own = makeInMemoryStore();
    std::vector<ElasticMembership> joined = formFirstRound(*own, optionsFor(1, 4, count), count);
    for (int slot = 0; slot < count; ++slot) {
      EXPECT_EQ(joined[slot].round, 0);
      EXPECT_EQ(joined[slot].rank, slot);
      EXPECT_EQ(joined[slot].size(), count);
      EXPECT_EQ(names(joined[slot]), names(joined[0]));
    }
    EXPECT_EQ(ElasticRendezvous(*own, optionsFor(1, 4, count)).nextRound(), 1);
  }
  EXPECT_THROW(ElasticRendezvous(*store, optionsFor(3, 4, 2)), ConfigError);
  EXPECT_THROW(ElasticRendezvous(*store, optionsFor(3, 4, 5)), ConfigError);
}

// Survivors of a failure: the round waits out the settle time for stragglers, then forms; the
// most advanced state gets rank 0, ties go by the previous ranks.
TEST(ElasticRendezvous, SurvivorsRegroupRankedByProgress) {
  auto store = makeInMemoryStore();
  const ElasticRendezvousOptions options = optionsFor(2, 4, 4);
  std::vector<ElasticMembership> first = formFirstRound(*store, options, 4);
  const std::vector<int64_t> progress = {10, 11, -1, 11};  // slot 2 was lost
  std::vector<ElasticMembership> second(4);
  const auto start = MonotonicClock::now();
  testing::runRankThreads(4, [&](int slot) {
    if (slot == 2) return;
    ElasticRendezvous rendezvous(*store, options);
    second[slot] = rendezvous.join(1, after(fresh(slot), first[slot], progress[slot]));
  });
  EXPECT_GE(MonotonicClock::now() - start, options.minSettle)
      << "a failure's round waits for stragglers";
  EXPECT_EQ(names(second[0]), (std::vector<std::string>{"worker 1", "worker 3", "worker 0"}));
  EXPECT_EQ(second[1].rank, 0);
  EXPECT_EQ(second[3].rank, 1);
  EXPECT_EQ(second[0].rank, 2);
  EXPECT_EQ(second[0].members[0].progress, 11);
}

// A worker waits to come in; the members see it at a step boundary and all come over: the round
// forms as soon as the last of them arrives, without the settle time.
TEST(ElasticRendezvous, RegroupToTakeAWorkerInDoesNotWait) {
  auto store = makeInMemoryStore();
  ElasticRendezvousOptions options = optionsFor(1, 4, 2);
  options.minSettle = 10s;
  std::vector<ElasticMembership> first = formFirstRound(*store, options, 2);
  auto joiner = std::async(std::launch::async, [&] {
    ElasticRendezvous rendezvous(*store, options);
    return rendezvous.join(rendezvous.nextRound(), fresh(7));
  });
  ElasticRendezvous watcher(*store, options);
  while (watcher.waiting(0) == 0) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(watcher.waiting(0), 1);
  std::vector<ElasticMembership> second(2);
  const auto start = MonotonicClock::now();
  testing::runRankThreads(2, [&](int slot) {
    ElasticRendezvous rendezvous(*store, options);
    second[slot] = rendezvous.join(1, after(fresh(slot), first[slot], 5));
  });
  EXPECT_LT(MonotonicClock::now() - start, 5s);
  const ElasticMembership joined = joiner.get();
  EXPECT_EQ(joined.round, 1);
  EXPECT_EQ(joined.rank, 2);  // no state: last
  EXPECT_EQ(names(joined), (std::vector<std::string>{"worker 0", "worker 1", "worker 7"}));
}

// A member that comes after its round formed moves on to the next one, which the others start
// when they see it waiting.
TEST(ElasticRendezvous, ALateArrivalEntersTheNextRound) {
  auto store = makeInMemoryStore();
  const ElasticRendezvousOptions options = optionsFor(2, 4, 3);
  std::vector<ElasticMembership> first = formFirstRound(*store, options, 3);
  std::vector<ElasticMembership> second(2);
  testing::runRankThreads(2, [&](int slot) {
    ElasticRendezvous rendezvous(*store, options);
    second[slot] = rendezvous.join(1, after(fresh(slot), first[slot], 3));
  });
  ASSERT_EQ(second[0].size(), 2);
  auto late = std::async(std::launch::async, [&] {
    ElasticRendezvous rendezvous(*store, options);
    return rendezvous.join(1, after(fresh(2), first[2], 3));
  });
  ElasticRendezvous watcher(*store, options);
  while (watcher.waiting(1) == 0) std::this_thread::sleep_for(1ms);
  std::vector<ElasticMembership> third(2);
  testing::runRankThreads(2, [&](int slot) {
    ElasticRendezvous rendezvous(*store, options);
    third[slot] = rendezvous.join(2, after(fresh(slot), second[slot], 4));
  });
  const ElasticMembership moved = late.get();
  EXPECT_EQ(moved.round, 2);
  EXPECT_EQ(moved.size(), 3);
  EXPECT_EQ(moved.rank, 2);  // its state (3 steps) is behind the others' (4)
  EXPECT_EQ(third[0].rank, 0);
}

// A worker launched with other settings is refused on its own; the job takes in the others.
TEST(ElasticRendezvous, AWorkerWithOtherSettingsIsRefusedAlone) {
  auto store = makeInMemoryStore();
  const ElasticRendezvousOptions options = optionsFor(1, 4, 1);
  std::vector<ElasticMembership> first = formFirstRound(*store, options, 1);
  std::string refused;
  auto misfit = std::async(std::launch::async, [&] {
    ElasticRendezvous rendezvous(*store, options);
    try {
      rendezvous.join(1, fresh(5, "0.1"));
    } catch (const ConfigError& e) {
      refused = e.what();
    }
  });
  auto fitting = std::async(std::launch::async, [&] {
    ElasticRendezvous rendezvous(*store, options);
    return rendezvous.join(1, fresh(6));
  });
  ElasticRendezvous member(*store, options);
  while (member.waiting(0) < 2) std::this_thread::sleep_for(1ms);
  const ElasticMembership second = member.join(1, after(fresh(0), first[0], 3));
  misfit.get();
  EXPECT_EQ(names(second), (std::vector<std::string>{"worker 0", "worker 6"}));
  EXPECT_EQ(fitting.get().rank, 1);
  EXPECT_NE(refused.find("elastic round 1 refused worker 5 (thread): worker 5 has --lr 0.1 but "
                         "the job has 0.05"),
            std::string::npos)
      << refused;
}

TEST(ElasticRendezvous, MaxCapsARound) {
  auto store = makeInMemoryStore();
  const ElasticRendezvousOptions options = optionsFor(1, 2, 2);
  std::vector<ElasticMembership> joined(3);
  testing::runRankThreads(3, [&](int slot) {
    ElasticRendezvous rendezvous(*store, options);
    if (slot == 2) {  // comes after the round is complete, and waits to come in
      while (rendezvous.nextRound() == 0) std::this_thread::sleep_for(1ms);
      joined[2] = rendezvous.join(0, fresh(slot));
      return;
    }
    joined[slot] = rendezvous.join(0, fresh(slot));
    if (slot == 0) {
      while (rendezvous.waiting(0) == 0) std::this_thread::sleep_for(1ms);
      rendezvous.finish();  // the job ends instead of taking it in
    }
  });
  EXPECT_EQ(joined[0].size(), 2);
  EXPECT_TRUE(joined[2].jobFinished);
  EXPECT_EQ(joined[2].round, 1);
}

// At MAX, the workers holding the job's state stay in, even when newcomers came first.
TEST(ElasticRendezvous, AtMaxMembersGoBeforeNewcomers) {
  auto store = makeInMemoryStore();
  const ElasticRendezvousOptions options = optionsFor(1, 3, 2);
  std::vector<ElasticMembership> first = formFirstRound(*store, options, 2);
  std::vector<std::future<ElasticMembership>> newcomers;
  for (int slot : {7, 8}) {
    newcomers.push_back(std::async(std::launch::async, [&, slot] {
      ElasticRendezvous rendezvous(*store, options);
      return rendezvous.join(1, fresh(slot));
    }));
  }
  ElasticRendezvous watcher(*store, options);
  while (watcher.waiting(0) < 2) std::this_thread::sleep_for(1ms);
  std::vector<ElasticMembership> second(2);
  testing::runRankThreads(2, [&](int slot) {
    ElasticRendezvous rendezvous(*store, options);
    second[slot] = rendezvous.join(1, after(fresh(slot), first[slot], 4));
  });
  EXPECT_EQ(names(second[0]), (std::vector<std::string>{"worker 0", "worker 1", "worker 7"}));
  watcher.finish();  // the one left out waits for the next round: the job ends first
  EXPECT_EQ(newcomers[0].get().rank, 2);
  EXPECT_TRUE(newcomers[1].get().jobFinished);
}

// Fewer than MIN come back: every survivor fails, naming the workers lost and their ranks.
TEST(ElasticRendezvous, BelowMinimumFailsNamingTheLostWorkers) {
  auto store = makeInMemoryStore();
  ElasticRendezvousOptions options = optionsFor(3, 4, 4);
  std::vector<ElasticMembership> first = formFirstRound(*store, options, 4);
  options.timeout = 300ms;
  std::vector<std::string> errors(2);
  testing::runRankThreads(2, [&](int slot) {
    ElasticRendezvous rendezvous(*store, options);
    try {
      rendezvous.join(1, after(fresh(slot), first[slot], 9));
    } catch (const PeerLostError& e) {
      errors[slot] = e.what();
    }
  });
  for (const std::string& error : errors) {
    EXPECT_NE(error.find("fewer than the minimum of --elastic 3:4"), std::string::npos) << error;
    EXPECT_NE(error.find("2 worker(s) came to round 1"), std::string::npos) << error;
    EXPECT_NE(error.find("lost rank 2 (worker 2, thread), rank 3 (worker 3, thread) of the 4 "
                         "workers of round 0"),
              std::string::npos)
        << error;
  }
}

TEST(ElasticRendezvous, FirstRoundFailsWhenTooFewStart) {
  auto store = makeInMemoryStore();
  ElasticRendezvousOptions options = optionsFor(3, 3, 3);
  options.timeout = 200ms;
  ElasticRendezvous rendezvous(*store, options);
  try {
    rendezvous.join(0, fresh(0));
    FAIL() << "formed without enough workers";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("only 1 of the 3 workers launched came"),
              std::string::npos)
        << e.what();
  }
}

// A waiting worker waits as long as a round trains (heartbeats), and no longer; past round 0
// nothing can form the round it waits for (no member of the last one is left): the job's state
// is lost (StateLostError, which `gradsync launch` does not restart).
TEST(ElasticRendezvous, AWaitingWorkerGivesUpOnASilentJob) {
  auto store = makeInMemoryStore();
  ElasticRendezvousOptions options = optionsFor(1, 4, 1);
  options.timeout = 300ms;
  std::atomic<bool> beating{true};
  std::thread job([&] {
    ElasticRendezvous rendezvous(*store, options);
    for (int i = 0; i < 30 && beating; ++i) {
      rendezvous.heartbeat();
      std::this_thread::sleep_for(30ms);
    }
  });
  ElasticRendezvous rendezvous(*store, options);
  const auto start = MonotonicClock::now();
  try {
    rendezvous.join(5, fresh(1));
    ADD_FAILURE() << "joined a silent job";
  } catch (const StateLostError& e) {
    EXPECT_NE(std::string(e.what()).find("only a member of round 4 can form it"), std::string::npos)
        << e.what();
  }
  beating = false;
  job.join();
  EXPECT_GE(MonotonicClock::now() - start, 900ms) << "gave up while the job was alive";
}

// The same rounds over the real TCP store, as processes use it.
TEST(ElasticRendezvous, RoundsOverTheTcpStore) {
  TcpStoreOptions storeOptions{.jobId = "elastic", .jobToken = "t0k3n"};
  TcpStoreServer server(SocketAddress{"127.0.0.1", 0}, storeOptions);
  auto store = makeTcpStoreClient(server.address(), storeOptions);
  const ElasticRendezvousOptions options = optionsFor(2, 3, 3);
  std::vector<ElasticMembership> first = formFirstRound(*store, options, 3);
  std::vector<ElasticMembership> second(3);
  testing::runRankThreads(3, [&](int slot) {
    if (slot == 1) return;  // lost
    auto own = makeTcpStoreClient(server.address(), storeOptions);
    ElasticRendezvous rendezvous(*own, options);
    second[slot] = rendezvous.join(1, after(fresh(slot), first[slot], 2));
  });
  EXPECT_EQ(names(second[0]), (std::vector<std::string>{"worker 0", "worker 2"}));
  EXPECT_EQ(second[2].rank, 1);
}

}  // namespace
}  // namespace gradsync
