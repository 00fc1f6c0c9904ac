// gradsync::shrink (include/gradsync/context.h), each rank a thread with a Context of its own
// over rank 0's TCP store: a rank that leaves makes the others' collective fail; they shrink to a
// group of the survivors (ranks in the order of the old ones) whose collectives work, and shrink
// again; a survivor that arrives after the window is left out; too few survivors are refused.
// Real processes killed with SIGKILL: tests/multiproc (collective_rank shrink).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gradsync/collectives.h"
#include "gradsync/context.h"
#include "gradsync/error.h"
#include "support/free_port.h"
#include "support/local_job.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;

Context joinOverTcp(int rank, int size, int port) {
  InitOptions options;
  options.bootstrap = testing::localJobFlags(rank, size, port, "shrink-test");
  options.bootstrap.sharedMemory = false;
  return init(options);
}

// The sum of every member's `value`.
float sumOf(Context& context, float value) {
  std::vector<float> data{value};
  allreduce(context.transport(), data);
  return data[0];
}

struct Member {
  int rank = -1, size = 0, generation = 0;
  float sum = 0;
};

// Counts members past a point; a member that leaves waits there first, so that its goodbye fails
// the others' next collective and never one still finishing that it took part in (a slow member
// would otherwise see its assertion-free collective throw, and the exception end the process).
void passTogether(std::atomic<int>& passed, int members) {
  ++passed;
  while (passed < members) std::this_thread::sleep_for(1ms);
}

// Each rank r runs `body(r, context)`; rank 0 (which serves the store) leaves last.
template <typename Body>
void runRanks(int size, Body body) {
  const int port = testing::freePort();
  std::atomic<int> finished{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Context context = joinOverTcp(r, size, port);
      context = body(r, std::move(context));
      ++finished;
      if (r == 0) {
        while (finished < size) std::this_thread::sleep_for(1ms);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

TEST(Shrink, SurvivorsFormAGroupInTheOrderOfTheirRanksAndShrinkAgain) {
  std::vector<Member> first(4), second(4);
  std::atomic<int> firstSums{0}, secondSums{0};
  runRanks(4, [&](int r, Context context) {
    EXPECT_EQ(sumOf(context, 1), 4);
    passTogether(firstSums, 4);
    if (r == 2) return context;  // leaves: its transport says goodbye
    EXPECT_THROW(sumOf(context, 1), PeerLostError);
    context = shrink(std::move(context), {.window = 3s});
    first[r] = {context.rank(), context.size(), context.generation(),
                sumOf(context, static_cast<float>(r + 1))};
    passTogether(secondSums, 3);
    if (r == 3) return context;  // old rank 3, now rank 2, leaves the survivors too
    EXPECT_THROW(sumOf(context, 1), PeerLostError);
    context = shrink(std::move(context), {.window = 3s});
    second[r] = {context.rank(), context.size(), context.generation(),
                 sumOf(context, static_cast<float>(r + 1))};
    return context;
  });
  const int newRanks[] = {0, 1, -1, 2};
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(first[r].rank, newRanks[r]) << "old rank " << r;
    EXPECT_EQ(first[r].size, 3);
    EXPECT_EQ(first[r].generation, 1);
    EXPECT_EQ(first[r].sum, 1 + 2 + 4);
  }
  for (int r : {0, 1}) {
    EXPECT_EQ(second[r].rank, r);
    EXPECT_EQ(second[r].size, 2);
    EXPECT_EQ(second[r].generation, 2);
    EXPECT_EQ(second[r].sum, 1 + 2);
  }
}

TEST(Shrink, ASurvivorArrivingAfterTheWindowIsLeftOut) {
  std::vector<Member> seen(3);
  std::atomic<bool> leftOut{false};
  std::atomic<int> sums{0};
  runRanks(3, [&](int r, Context context) {
    sumOf(context, 1);
    passTogether(sums, 3);
    if (r == 1) return context;
    EXPECT_THROW(sumOf(context, 1), PeerLostError);
    if (r == 2) std::this_thread::sleep_for(1s);  // the window is 200 ms
    try {
      context = shrink(std::move(context), {.window = 200ms});
    } catch (const PeerLostError& e) {
      EXPECT_EQ(r, 2);
      EXPECT_NE(std::string(e.what()).find("after the 1 survivors had closed"), std::string::npos)
          << e.what();
      leftOut = true;
      return joinOverTcp(0, 1, testing::freePort());  // a Context of its own to return
    }
    seen[r] = {context.rank(), context.size(), context.generation(), sumOf(context, 5)};
    return context;
  });
  EXPECT_TRUE(leftOut);
  EXPECT_EQ(seen[0].size, 1);
  EXPECT_EQ(seen[0].sum, 5);
}

TEST(Shrink, FewerSurvivorsThanTheMinimumAreRefused) {
  std::atomic<int> sums{0};
  runRanks(2, [&](int r, Context context) {
    sumOf(context, 1);
    passTogether(sums, 2);
    if (r == 1) return context;
    EXPECT_THROW(sumOf(context, 1), PeerLostError);
    EXPECT_THROW(shrink(std::move(context), {.window = 100ms, .minSize = 2}), ConfigError);
    return joinOverTcp(0, 1, testing::freePort());
  });
}

TEST(Shrink, ABadWindowIsAConfigError) {
  runRanks(1, [&](int, Context context) {
    EXPECT_THROW(shrink(std::move(context), {.window = -1ms}), ConfigError);
    return joinOverTcp(0, 1, testing::freePort());
  });
}

}  // namespace
}  // namespace gradsync
