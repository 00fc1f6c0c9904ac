// ElasticSession (include/gradsync/elastic.h), each worker a thread with a session of its own
// over worker 0's TCP store: the first round connects every launched worker; a newcomer waits,
// the members see it waiting and re-form with it (ranks by progress, the newcomer last); a
// member that leaves makes the others' collective fail, and they go on in a round without it.
#include "gradsync/elastic.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/topology.h"
#include "support/free_port.h"
#include "support/local_job.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;

ElasticSessionOptions sessionOptions(int slot, int launched, int port) {
  ElasticSessionOptions options;
  options.range = "2:4";
  options.init.bootstrap = testing::localJobFlags(slot, launched, port, "elastic-session-test");
  return options;
}

// Every rank's (rank + 1), summed: size * (size + 1) / 2 when every member took part.
float sumOfRanks(Context& context) {
  std::vector<float> value{static_cast<float>(context.rank() + 1)};
  allreduce(context.transport(), value);
  return value[0];
}

struct Seen {
  int rank = -1, size = 0;
  float sum = 0;
};

TEST(ElasticSession, RoundsTakeANewcomerInAndGoOnWithoutALeaver) {
  const int port = testing::freePort();
  std::atomic<bool> newcomerWaits{false}, leaverGone{false};
  std::atomic<int> secondSums{0};  // members past round 1's allreduce: the newcomer leaves after
  std::vector<Seen> first(3), second(4), third(3);

  // Worker 0 serves the store: it stays for the whole test.
  auto member = [&](int slot) {
    ElasticSession session(sessionOptions(slot, 3, port));
    {
      std::optional<Context> c = session.joinNextRound(-1);
      ASSERT_TRUE(c);
      first[slot] = {c->rank(), c->size(), sumOfRanks(*c)};
      // Rank 0 looks for the newcomer; one allreduce tells every member (as hvd.elastic's commit).
      std::vector<float> waiting{0};
      while (waiting[0] == 0) {
        if (c->rank() == 0) waiting[0] = static_cast<float>(session.waiting());
        allreduce(c->transport(), waiting);
        if (waiting[0] == 0) std::this_thread::sleep_for(5ms);
      }
    }
    std::optional<Context> c = session.joinNextRound(5);
    ASSERT_TRUE(c);
    EXPECT_EQ(session.round(), 1);
    second[slot] = {c->rank(), c->size(), sumOfRanks(*c)};
    ++secondSums;
    while (!leaverGone) std::this_thread::sleep_for(1ms);
    EXPECT_THROW(sumOfRanks(*c), PeerLostError);  // the newcomer left
    c->transport().abort(std::make_exception_ptr(PeerLostError("left behind")));
    c.reset();
    c = session.joinNextRound(6);
    ASSERT_TRUE(c);
    third[slot] = {c->rank(), c->size(), sumOfRanks(*c)};
    if (c->rank() == 0) session.finish();
  };
  auto newcomer = [&] {
    while (!newcomerWaits) std::this_thread::sleep_for(1ms);
    ElasticSession session(sessionOptions(1, 3, port));  // as slot 1 restarted would
    std::optional<Context> c = session.joinNextRound(-1);
    ASSERT_TRUE(c);
    second[3] = {c->rank(), c->size(), sumOfRanks(*c)};
    // Its goodbye must fail the members' next allreduce, not one a slow member is still in.
    while (secondSums < 3) std::this_thread::sleep_for(1ms);
    leaverGone = true;
    c.reset();  // leaves: its goodbye fails the others' collective
  };

  std::vector<std::thread> threads;
  for (int slot = 0; slot < 3; ++slot) threads.emplace_back(member, slot);
  std::this_thread::sleep_for(50ms);
  newcomerWaits = true;
  threads.emplace_back(newcomer);
  for (std::thread& t : threads) t.join();

  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(first[slot].rank, slot);
    EXPECT_EQ(first[slot].size, 3);
    EXPECT_EQ(first[slot].sum, 6);
    EXPECT_EQ(second[slot].rank, slot) << "members keep their order, ahead of the newcomer";
    EXPECT_EQ(third[slot].size, 3);
    EXPECT_EQ(third[slot].sum, 6);
  }
  EXPECT_EQ(second[3].rank, 3);
  for (const Seen& s : second) {
    EXPECT_EQ(s.size, 4);
    EXPECT_EQ(s.sum, 10);
  }
}

// A round's members on one host talk through shared memory, as a fixed job's do (--shm, the
// default), and over TCP with it off; either way the context knows the members' host.
class ElasticSessionLinks : public ::testing::TestWithParam<bool> {};

TEST_P(ElasticSessionLinks, ARoundOnOneHostTalksAsAFixedJobWould) {
  const bool sharedMemory = GetParam();
  const int port = testing::freePort();
  std::vector<Seen> seen(3);
  std::vector<int> localRanks(3, -1), localSizes(3, 0);
  std::vector<Topology::HostLinks> links(3);
  auto member = [&](int slot) {
    ElasticSessionOptions options = sessionOptions(slot, 3, port);
    options.init.bootstrap.sharedMemory = sharedMemory;
    ElasticSession session(options);
    std::optional<Context> c = session.joinNextRound(-1);
    ASSERT_TRUE(c);
    const Topology* topology = c->transport().topology();
    ASSERT_NE(topology, nullptr);
    links[slot] = topology->hostLinks();
    localRanks[slot] = c->localRank();
    localSizes[slot] = c->localSize();
    seen[slot] = {c->rank(), c->size(), sumOfRanks(*c)};
    if (c->rank() == 0) session.finish();
  };
  std::vector<std::thread> threads;
  for (int slot = 0; slot < 3; ++slot) threads.emplace_back(member, slot);
  for (std::thread& t : threads) t.join();
  for (int slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(links[slot],
              sharedMemory ? Topology::HostLinks::kSharedMemory : Topology::HostLinks::kTcp);
    EXPECT_EQ(localRanks[slot], seen[slot].rank);
    EXPECT_EQ(localSizes[slot], 3);
    EXPECT_EQ(seen[slot].sum, 6);
  }
}

INSTANTIATE_TEST_SUITE_P(SharedMemory, ElasticSessionLinks, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "on" : "off";
                         });

TEST(ElasticSession, ABadRangeIsAConfigError) {
  ElasticSessionOptions options = sessionOptions(0, 1, testing::freePort());
  options.range = "3:2";
  EXPECT_THROW(ElasticSession session(options), ConfigError);
}

}  // namespace
}  // namespace gradsync
