// The hierarchical allreduce against naive sums on (hosts x ranks per host) = 1x4, 4x1, 2x2, 3x2
// and 2x3, element counts 0, 1, non-divisible and large, over loopback threads given a topology
// and over the routed transport (shared memory inside hosts, TCP between); every rank ends with
// the same bits; the automatic choice follows the cost model.
#include "gradsync/hierarchical.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gradsync/error.h"
#include "gradsync/loopback.h"
#include "gradsync/store.h"
#include "job/host_transport.h"
#include "support/rank_threads.h"
#include "support/sanitized.h"
#include "transport/routed_transport.h"

namespace gradsync {
namespace {

float input(int rank, size_t i) {
  return static_cast<float>(i % 89 + 103 * rank);
}

struct Shape {
  int hosts;
  int perHost;
  bool routed;  // shared memory + TCP rather than loopback threads
};

std::string shapeName(const ::testing::TestParamInfo<Shape>& info) {
  return std::to_string(info.param.hosts) + "x" + std::to_string(info.param.perHost) +
         (info.param.routed ? "_routed" : "_loopback");
}

void runOn(const Shape& shape, const std::function<void(Transport&)>& body) {
  const int size = shape.hosts * shape.perHost;
  const Topology topology = Topology::uniform(size, shape.perHost);
  if (!shape.routed) {
    LoopbackFabric fabric(size);
    testing::runRankThreads(size, [&](int rank) {
      auto transport = withTopology(fabric.connect(rank), topology);
      body(*transport);
    });
    return;
  }
  auto store = makeInMemoryStore();
  HostTransportOptions options{.ranksPerHost = shape.perHost};
  options.tcp.jobToken = "test";
  testing::runRankThreads(size, [&](int rank) {
    auto transport = connectHostTransport(*store, rank, size, options);
    ASSERT_EQ(*transport->topology(), topology);
    body(*transport);
  });
}

class Hierarchical : public ::testing::TestWithParam<Shape> {};

TEST_P(Hierarchical, SumsAndAveragesMatchNaiveReference) {
  runOn(GetParam(), [](Transport& t) {
    const int n = t.size();
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1003},
                         testing::sanitizedSize((1 << 18) + 5, (1 << 12) + 5)}) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = input(t.rank(), i);
      // Small segments reach the pipelines' multi-segment paths.
      CollectiveOptions options{.segmentBytes = 4096,
                                .algorithm = AllreduceAlgorithm::kHierarchical};
      hierarchicalAllreduce(t, *t.topology(), data, ReduceOp::kSum, options);
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += input(r, i);
        ASSERT_EQ(data[i], sum) << "rank " << t.rank() << " element " << i << " of " << count;
      }
      for (size_t i = 0; i < count; ++i) data[i] = input(t.rank(), i);
      allreduce(t, data, ReduceOp::kAverage, options);
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < n; ++r) sum += input(r, i);
        ASSERT_FLOAT_EQ(data[i], sum / n) << "element " << i;
      }
    }
  });
}

// Random values, whose sums round: every rank must still hold the very same bits (a host's ranks
// copy one reduced block; a cross group's ring gives each block one summation order).
TEST_P(Hierarchical, EveryRankEndsWithTheSameBits) {
  runOn(GetParam(), [](Transport& t) {
    std::mt19937 random(static_cast<unsigned>(t.rank() + 1));
    std::normal_distribution<float> normal;
    std::vector<float> data(10'007);
    for (float& v : data) v = normal(random);
    hierarchicalAllreduce(t, *t.topology(), data);
    std::vector<float> fromRoot = data;
    broadcast(t, fromRoot, 0, {.tag = 1});
    EXPECT_EQ(std::memcmp(data.data(), fromRoot.data(), data.size() * sizeof(float)), 0)
        << "rank " << t.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(Shapes, Hierarchical,
                         ::testing::Values(Shape{1, 4, false}, Shape{4, 1, false},
                                           Shape{2, 2, false}, Shape{3, 2, false},
                                           Shape{2, 3, false}, Shape{2, 2, true},
                                           Shape{3, 2, true}),
                         shapeName);

// The cross groups take the fastest flat algorithm for their block over a NIC shared by the n
// groups of a host: on 4 hosts of 2 with 1 ms between hosts, a 64 KiB allreduce's cross step by
// recursive doubling pays 2 latencies where the ring's pays 6.
TEST(HierarchicalModel, CrossGroupsTakeTheFastestFlatAlgorithm) {
  const Topology hosts = Topology::uniform(8, 2);
  LinkModel links;
  links.interLatencySec = 1e-3;
  LinkModel shared = links;
  shared.interBytesPerSec /= 2;
  const size_t bytes = 64 << 10;
  const double intra = 2 * (links.intraLatencySec + (bytes / 2.0) / links.intraBytesPerSec);
  EXPECT_DOUBLE_EQ(hierarchicalAllreduceSeconds(hosts, bytes, links),
                   intra + recursiveDoublingAllreduceSeconds(Topology::flat(4), bytes / 2, shared));
  EXPECT_LT(recursiveDoublingAllreduceSeconds(Topology::flat(4), bytes / 2, shared),
            ringAllreduceSeconds(Topology::flat(4), bytes / 2, shared) / 2);
  EXPECT_EQ(chooseAllreduce(hosts, bytes, links), AllreduceAlgorithm::kHierarchical);
  // Large blocks go by the ring, as before: d/(N B) a step of the 2(N-1).
  const size_t large = size_t{64} << 20;
  EXPECT_DOUBLE_EQ(
      hierarchicalAllreduceSeconds(hosts, large, links),
      2 * (links.intraLatencySec + (large / 2.0) / links.intraBytesPerSec + links.intraLatencySec) +
          6 * (links.interLatencySec + large / 4.0 / links.interBytesPerSec));
}

TEST(HierarchicalModel, ChoosesHierarchicalWhereTheNicIsTheBottleneck) {
  const Topology two = Topology::uniform(4, 2);
  LinkModel slow = LinkModel::of({.bandwidthBytesPerSec = 12.5e6});  // 100 Mbit/s between hosts
  EXPECT_EQ(chooseAllreduce(two, 64 << 20, slow), AllreduceAlgorithm::kHierarchical);
  EXPECT_EQ(chooseAllreduce(two, 4096, slow), AllreduceAlgorithm::kHierarchical);
  // Flat ring: 2(P-1)/P = 1.5 d over the NIC; hierarchical: 2(N-1)/N = d, plus d over memory.
  EXPECT_NEAR(
      ringAllreduceSeconds(two, 1 << 30, slow) / hierarchicalAllreduceSeconds(two, 1 << 30, slow),
      1.5, 0.01);
  // As fast between hosts as inside them, the two extra intra-host passes cost more than the
  // NIC saves: the ring.
  LinkModel even{.intraBytesPerSec = 1e9, .interBytesPerSec = 1e9};
  EXPECT_EQ(chooseAllreduce(two, 64 << 20, even), AllreduceAlgorithm::kRing);
  // One host, one rank per host, hosts of unequal sizes, no topology: the ring.
  for (const Topology& t :
       {Topology::uniform(4, 4), Topology::uniform(4, 1), Topology::uniform(5, 2)}) {
    EXPECT_EQ(chooseAllreduce(t, 64 << 20, slow), AllreduceAlgorithm::kRing) << t.describe();
  }
  EXPECT_EQ(chooseAllreduce(Topology::flat(4), 64 << 20, slow), AllreduceAlgorithm::kRing);
}

// Recursive doubling sends log2 P whole buffers (a fold and an unfold more where P is not a
// power of two) and waits for each addition; halving-doubling sends the ring's bytes in 2 log2 P
// messages and waits for (P - 1) / P of an addition; the ring sends 2 (P - 1) messages of 1/P
// and hides its additions. With the default model between hosts (50 us, 1.25 GB/s, additions at
// 5 GB/s) on 4 ranks: recursive doubling and halving-doubling cross where halving-doubling's 2
// latencies more equal the half buffer more that recursive doubling sends and its 1.25 more
// additions, 100 us = d (0.5 / 1.25e9 + 1.25 / 5e9), d = 154 kB; halving-doubling and the ring
// where the ring's 2 latencies more equal 0.75 of an addition, 100 us = 0.75 d / 5e9, d = 667 kB.
TEST(AllreduceModel, ChoosesByTheLatencyCrossovers) {
  const LinkModel links;
  const Topology four = Topology::flat(4);
  EXPECT_EQ(chooseAllreduce(four, 4, links), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(four, 150'000, links), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(four, 160'000, links), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(four, 660'000, links), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(four, 680'000, links), AllreduceAlgorithm::kRing);
  const double message = links.interLatencySec + 1000 / links.interBytesPerSec;
  const double addition = 1000 / links.reduceBytesPerSec;
  EXPECT_DOUBLE_EQ(recursiveDoublingAllreduceSeconds(four, 1000, links),
                   2 * message + 2 * addition);
  EXPECT_DOUBLE_EQ(
      halvingDoublingAllreduceSeconds(four, 1000, links),
      4 * links.interLatencySec + 1.5 * 1000 / links.interBytesPerSec + 0.75 * addition);
  // 5 ranks: 2 swaps among 4, a fold and an unfold; halving-doubling folds the same way.
  const Topology five = Topology::flat(5);
  EXPECT_DOUBLE_EQ(recursiveDoublingAllreduceSeconds(five, 1000, links),
                   4 * message + 3 * addition);
  EXPECT_DOUBLE_EQ(halvingDoublingAllreduceSeconds(five, 1000, links),
                   halvingDoublingAllreduceSeconds(four, 1000, links) + 2 * message + addition);
  // Two ranks: one swap against the ring's two half messages, the same crossover of one latency
  // against one addition at 250 kB; halving-doubling is the ring there plus an addition: never.
  const Topology two = Topology::flat(2);
  EXPECT_EQ(chooseAllreduce(two, 240'000, links), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(two, 260'000, links), AllreduceAlgorithm::kRing);
  EXPECT_GT(halvingDoublingAllreduceSeconds(two, 1 << 20, links),
            ringAllreduceSeconds(two, 1 << 20, links));
  EXPECT_EQ(recursiveDoublingAllreduceSeconds(Topology::flat(1), 1000, links), 0);
  EXPECT_EQ(halvingDoublingAllreduceSeconds(Topology::flat(1), 1000, links), 0);
}

// Inside a host over shared memory a message from 64 KiB up takes the single-copy path and pays
// its acknowledgement's latency: halving-doubling's 128 KiB has two such messages where the
// ring's 32 KiB blocks have none, and at 256 KiB the ring's six 64 KiB blocks pay six.
TEST(AllreduceModel, SingleCopyMessagesPayARoundTrip) {
  const LinkModel links;
  const Topology host = Topology::uniform(4, 4);
  const double below = 65535, at = 65536;
  EXPECT_NEAR(
      ringAllreduceSeconds(host, 4 * at, links) - ringAllreduceSeconds(host, 4 * below, links),
      6 * (links.intraLatencySec + 1 / links.intraBytesPerSec), 1e-12);
  EXPECT_EQ(chooseAllreduce(host, 32 << 10, links), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(host, 128 << 10, links), AllreduceAlgorithm::kRing);
  EXPECT_EQ(chooseAllreduce(host, 256 << 10, links), AllreduceAlgorithm::kHalvingDoubling);
  // No such path over TCP inside a host, nor on an accelerator's links.
  EXPECT_EQ(LinkModel::of({}, Topology::HostLinks::kTcp).intraRoundTripMinBytes, SIZE_MAX);
}

// The model against a recorded table (docs/performance.md, "Small messages", 2026-12-01: `gradsync
// bench allreduce --workers 4 --shm on|off --algorithm ring|doubling|halving`, interleaved
// repeats, median us per allreduce on one host of 4 ranks): at every size it picks the
// measured fastest, or one within 5% of it (the near ties, closer than the repeats' spread).
TEST(AllreduceModel, PicksTheMeasuredFastestAtEverySize) {
  struct Recorded {
    Topology::HostLinks links;
    size_t bytes;
    double ringMicros, doublingMicros, halvingMicros;
  };
  using enum Topology::HostLinks;
  const Recorded table[] = {
      {kSharedMemory, 4 << 10, 282, 177, 255},    {kSharedMemory, 8 << 10, 295, 221, 300},
      {kSharedMemory, 16 << 10, 373, 333, 368},   {kSharedMemory, 32 << 10, 259, 240, 353},
      {kSharedMemory, 64 << 10, 274, 354, 282},   {kSharedMemory, 128 << 10, 322, 523, 456},
      {kSharedMemory, 256 << 10, 842, 1086, 656}, {kTcp, 64 << 10, 1030, 489, 806},
      {kTcp, 128 << 10, 1004, 577, 915},          {kTcp, 256 << 10, 1204, 832, 1034},
      {kTcp, 512 << 10, 1476, 1248, 1289},        {kTcp, 1 << 20, 2316, 3107, 1995},
      {kTcp, 2 << 20, 4596, 6486, 4700},          {kTcp, 4 << 20, 9716, 12423, 9525}};
  for (const Recorded& r : table) {
    const Topology host = Topology::uniform(4, 4).withHostLinks(r.links);
    const double fastest = std::min({r.ringMicros, r.doublingMicros, r.halvingMicros});
    const AllreduceAlgorithm picked = chooseAllreduce(host, r.bytes, LinkModel::of({}, r.links));
    const double micros = picked == AllreduceAlgorithm::kRing                ? r.ringMicros
                          : picked == AllreduceAlgorithm::kRecursiveDoubling ? r.doublingMicros
                                                                             : r.halvingMicros;
    EXPECT_LE(micros, 1.05 * fastest)
        << r.bytes << " bytes over " << (r.links == kTcp ? "TCP" : "shared memory");
  }
}

// One host of 4 whose ranks talk over TCP loopback (120 us, 1 GB/s, no single-copy path):
// recursive doubling up to 326 kB, halving-doubling up to 1.6 MB, then the ring (measured:
// recursive doubling fastest up to 256 KiB, level with halving-doubling at 512 KiB,
// halving-doubling 1.16x faster than the ring at 1 MiB, level with it from 2 MiB).
TEST(AllreduceModel, TcpInsideAHostMovesTheCrossoversUp) {
  const Topology host = Topology::uniform(4, 4).withHostLinks(Topology::HostLinks::kTcp);
  const LinkModel links = LinkModel::of({}, host.hostLinks());
  EXPECT_EQ(links.intraLatencySec, LinkModel::kLoopbackLatencySec);
  EXPECT_EQ(chooseAllreduce(host, 64 << 10, links), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(host, 256 << 10, links), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllreduce(host, 1 << 20, links), AllreduceAlgorithm::kHalvingDoubling);
  EXPECT_EQ(chooseAllreduce(host, 2 << 20, links), AllreduceAlgorithm::kRing);
  // Across hosts the NIC's link is charged whatever the hosts' insides.
  const Topology hosts = Topology::flat(4).withHostLinks(Topology::HostLinks::kTcp);
  EXPECT_EQ(chooseAllreduce(hosts, 680'000, LinkModel::of({}, hosts.hostLinks())),
            AllreduceAlgorithm::kRing);
}

// The host transport says how a host's ranks talk: shared memory where every host's ranks
// share a segment, else TCP (--shm off here), the same on every rank.
TEST(AllreduceModel, HostTransportReportsItsHostLinks) {
  for (bool sharedMemory : {true, false}) {
    auto store = makeInMemoryStore();
    HostTransportOptions options{.sharedMemory = sharedMemory};
    options.tcp.jobToken = "test";
    testing::runRankThreads(3, [&](int rank) {
      auto transport = connectHostTransport(*store, rank, 3, options);
      ASSERT_EQ(transport->topology()->hosts(), 1);
      EXPECT_EQ(transport->topology()->hostLinks(),
                sharedMemory ? Topology::HostLinks::kSharedMemory : Topology::HostLinks::kTcp);
      std::vector<float> data(100'000, static_cast<float>(rank));  // 400 kB: doubling over TCP
      allreduce(*transport, data);
      EXPECT_EQ(data.front(), 3.0F);
      EXPECT_EQ(data.back(), 3.0F);
    });
  }
}

// Allgather's model against a recorded table (docs/performance.md, "Allgather: Bruck's against
// the ring", 2026-12-01: `gradsync bench allgather --workers 4 [--shm off | --latency 1ms]
// --algorithm ring|doubling`, us per allgather; only the sizes where the two differ by more
// than the repeats' spread): Bruck's over shared memory up to 64 KiB and across hosts 1 ms
// apart; the ring over TCP inside a host, where the model keeps it.
TEST(AllgatherModel, PicksTheMeasuredFasterWhereTheyDiffer) {
  struct Recorded {
    Topology topology;
    TransportOptions link;
    size_t bytes;
    double ringMicros, bruckMicros;
  };
  const Topology shm = Topology::uniform(4, 4);
  const Topology tcp = shm.withHostLinks(Topology::HostLinks::kTcp);
  const Topology far = Topology::flat(4);
  const TransportOptions none, latency{.latency = std::chrono::milliseconds(1)};
  const Recorded table[] = {
      {shm, none, 4 << 10, 72.9, 35.4},        {shm, none, 16 << 10, 75.3, 48.5},
      {shm, none, 64 << 10, 98.6, 62.2},       {tcp, none, 128 << 10, 247.8, 286.0},
      {tcp, none, 512 << 10, 549.2, 778.2},    {tcp, none, 4 << 20, 3385.1, 4613.1},
      {far, latency, 4 << 10, 3326.1, 2231.1}, {far, latency, 64 << 10, 3314.5, 2224.9},
      {far, latency, 1 << 20, 4003.4, 2947.0}};
  for (const Recorded& r : table) {
    const LinkModel links = LinkModel::of(r.link, r.topology.hostLinks());
    const AllreduceAlgorithm picked = chooseAllgather(r.topology, r.bytes, links);
    const AllreduceAlgorithm faster = r.bruckMicros < r.ringMicros
                                          ? AllreduceAlgorithm::kRecursiveDoubling
                                          : AllreduceAlgorithm::kRing;
    EXPECT_EQ(picked, faster) << r.bytes << " bytes on " << r.topology.describe();
  }
}

// Bruck's sends the ring's bytes in ceil(log2 P) messages (1, 2, 4, ... blocks); two ranks are
// one message either way (a tie: the ring). Ranks that share a NIC share it at every Bruck step,
// where the ring crosses it once per step: on 2 hosts of 2, Bruck's for latency, the ring for
// bandwidth.
TEST(AllgatherModel, ChargesBrucksStepsAndSharedNics) {
  const LinkModel links;
  const Topology five = Topology::flat(5);
  const double block = 1000 / links.interBytesPerSec;
  EXPECT_DOUBLE_EQ(bruckAllgatherSeconds(five, 5000, links),
                   3 * links.interLatencySec + 4 * block);  // 1 + 2 + 1 blocks
  EXPECT_DOUBLE_EQ(ringAllgatherSeconds(five, 5000, links), 4 * (links.interLatencySec + block));
  EXPECT_EQ(chooseAllgather(Topology::flat(2), 4, links), AllreduceAlgorithm::kRing);
  EXPECT_EQ(bruckAllgatherSeconds(Topology::flat(1), 1000, links), 0);
  const Topology twoByTwo = Topology::uniform(4, 2);
  EXPECT_EQ(chooseAllgather(twoByTwo, 4 << 10, links), AllreduceAlgorithm::kRecursiveDoubling);
  EXPECT_EQ(chooseAllgather(twoByTwo, 64 << 20, links), AllreduceAlgorithm::kRing);
}

TEST(HierarchicalModel, UnequalHostsAreRefused) {
  LoopbackFabric fabric(3);
  testing::runRankThreads(3, [&](int rank) {
    auto transport = fabric.connect(rank);
    std::vector<float> data(4);
    EXPECT_THROW(hierarchicalAllreduce(*transport, Topology::uniform(3, 2), data), ConfigError);
  });
}

}  // namespace
}  // namespace gradsync
