// Every collective against a naive reference computed from the same inputs, for world sizes
// 1..8 (threads over loopback; subsets over TCP, TLS, shared memory and the routed transport of
// both with two ranks per host) and element counts 0, 1, non-divisible and
// large. Inputs are small integers unique per (rank, index), so sums are exact in float and a
// misplaced element is always caught.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <vector>

#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "support/sanitized.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

float input(int rank, size_t i) {
  return static_cast<float>(i % 97 + 101 * rank);
}

std::vector<float> inputs(int rank, size_t count) {
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = input(rank, i);
  return data;
}

float naiveSum(int size, size_t i) {
  float sum = 0;
  for (int r = 0; r < size; ++r) sum += input(r, i);
  return sum;
}

struct Case {
  TransportKind kind;
  int size;
  size_t count;
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return kindName(info.param.kind) + "_w" + std::to_string(info.param.size) + "_n" +
         std::to_string(info.param.count);
}

// Sizes 0, 1, non-divisible and large (a million elements; 16 Ki under a sanitizer, where the
// ring's threads are what is checked, not its throughput).
constexpr size_t kLarge = sanitizedSize((1 << 20) + 3, (1 << 14) + 3);

std::vector<Case> cases() {
  std::vector<Case> all;
  for (int size = 1; size <= 8; ++size) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1003}, kLarge}) {
      all.push_back({TransportKind::kLoopback, size, count});
    }
  }
  for (int size : {2, 3, 4}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{1003}, kLarge}) {
      all.push_back({TransportKind::kTcp, size, count});
    }
  }
  for (int size : {2, 3, 4}) {  // shared memory: eager rings and single-copy sends
    for (size_t count : {size_t{0}, size_t{1}, size_t{1003}, kLarge}) {
      all.push_back({TransportKind::kShm, size, count});
    }
  }
  // Shared memory inside hosts of two ranks, TCP between (allreduce goes hierarchical on 4).
  for (int size : {3, 4, 5}) {
    for (size_t count : {size_t{1}, size_t{1003}, kLarge}) {
      all.push_back({TransportKind::kRouted, size, count});
    }
  }
  for (int size : {2, 3}) {  // every collective over TLS: records, buffered input, odd rings
    for (size_t count : {size_t{1}, size_t{1003}, kLarge}) {
      all.push_back({TransportKind::kTcpTls, size, count});
    }
  }
  // Scale: 64 rank threads (fewer elements than ranks, and a non-divisible 64 Ki).
  for (size_t count : {size_t{13}, sanitizedSize((1 << 16) + 3, (1 << 12) + 3)}) {
    all.push_back({TransportKind::kLoopback, 64, count});
  }
  return all;
}

class Collectives : public ::testing::TestWithParam<Case> {
 protected:
  void run(const std::function<void(Transport&)>& body) {
    runWithTransports(GetParam().kind, GetParam().size, body);
  }
  // Small segments on small inputs reach the multi-segment pipeline paths.
  CollectiveOptions options() const {
    CollectiveOptions o;
    o.segmentBytes = GetParam().count < 5000 ? 64 : 256 * 1024;
    return o;
  }
  size_t count() const { return GetParam().count; }
};

// kAuto (recursive doubling for the small counts, the ring or hierarchical for the large one),
// then the flat algorithm kAuto does not take at this count, forced: both at every count, one
// run fewer than forcing each (these suites run under both sanitizers).
std::vector<AllreduceAlgorithm> allreduceAlgorithms(size_t count) {
  const bool small = count * sizeof(float) < 32 * 1024;
  return {AllreduceAlgorithm::kAuto,
          small ? AllreduceAlgorithm::kRing : AllreduceAlgorithm::kRecursiveDoubling};
}

TEST_P(Collectives, AllreduceSumEqualsNaiveSum) {
  for (AllreduceAlgorithm algorithm : allreduceAlgorithms(count())) {
    run([&](Transport& t) {
      std::vector<float> data = inputs(t.rank(), count());
      CollectiveOptions o = options();
      o.algorithm = algorithm;
      allreduce(t, data, ReduceOp::kSum, o);
      for (size_t i = 0; i < count(); ++i) {
        ASSERT_EQ(data[i], naiveSum(t.size(), i)) << i << ", algorithm " << int(algorithm);
      }
    });
  }
}

TEST_P(Collectives, AllreduceAverage) {
  for (AllreduceAlgorithm algorithm : allreduceAlgorithms(count())) {
    run([&](Transport& t) {
      std::vector<float> data = inputs(t.rank(), count());
      CollectiveOptions o = options();
      o.algorithm = algorithm;
      allreduce(t, data, ReduceOp::kAverage, o);
      for (size_t i = 0; i < count(); ++i) {
        ASSERT_FLOAT_EQ(data[i], naiveSum(t.size(), i) / static_cast<float>(t.size()))
            << i << ", algorithm " << int(algorithm);
      }
    });
  }
}

TEST_P(Collectives, ReduceScatterOwnBlock) {
  run([&](Transport& t) {
    std::vector<float> data = inputs(t.rank(), count());
    reduceScatter(t, data, ReduceOp::kSum, options());
    Block own = blockOf(count(), t.size(), t.rank());
    for (size_t i = own.begin; i < own.end; ++i) ASSERT_EQ(data[i], naiveSum(t.size(), i)) << i;
  });
}

// Both of allgather's algorithms, forced: the ring and Bruck's (kRecursiveDoubling).
constexpr AllreduceAlgorithm kAllgatherAlgorithms[] = {AllreduceAlgorithm::kRing,
                                                       AllreduceAlgorithm::kRecursiveDoubling};

TEST_P(Collectives, AllgatherCollectsEveryBlock) {
  for (AllreduceAlgorithm algorithm : kAllgatherAlgorithms) {
    run([&](Transport& t) {
      std::vector<float> data(count(), -1.0f);
      Block own = blockOf(count(), t.size(), t.rank());
      for (size_t i = own.begin; i < own.end; ++i) data[i] = input(t.rank(), i);
      CollectiveOptions o = options();
      o.algorithm = algorithm;
      allgather(t, data, o);
      for (int r = 0; r < t.size(); ++r) {
        Block b = blockOf(count(), t.size(), r);
        for (size_t i = b.begin; i < b.end; ++i) {
          ASSERT_EQ(data[i], input(r, i)) << i << ", algorithm " << int(algorithm);
        }
      }
    });
  }
}

TEST_P(Collectives, AllgathervWithUnequalAndEmptyBlocks) {
  for (AllreduceAlgorithm algorithm : kAllgatherAlgorithms)
    run([&](Transport& t) {
      // Rank r contributes (count * r) % 7919 bytes: unequal, some empty, never aligned.
      std::vector<size_t> counts(t.size());
      for (int r = 0; r < t.size(); ++r) counts[r] = (count() * static_cast<size_t>(r)) % 7919;
      size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
      std::vector<uint8_t> data(total, 0);
      size_t offset = std::accumulate(counts.begin(), counts.begin() + t.rank(), size_t{0});
      for (size_t i = 0; i < counts[t.rank()]; ++i)
        data[offset + i] = static_cast<uint8_t>(i + t.rank());
      CollectiveOptions o = options();
      o.algorithm = algorithm;
      allgatherv(t, data, counts, o);
      offset = 0;
      for (int r = 0; r < t.size(); ++r) {
        for (size_t i = 0; i < counts[r]; ++i) {
          ASSERT_EQ(data[offset + i], static_cast<uint8_t>(i + r))
              << "rank " << r << " byte " << i << ", algorithm " << int(algorithm);
        }
        offset += counts[r];
      }
    });
}

// What rank `from` sends rank `to` in the all-to-all tests: blocks of unequal sizes (the
// count's blockOf pieces, shifted by sender), some empty when count < P; every rank sends
// `count` elements in all. Values unique per (sender, receiver, index).
size_t pairCount(size_t count, int size, int from, int to) {
  return blockOf(count, size, (from + to) % size).size();
}
float pairValue(int from, int to, size_t i) {
  return static_cast<float>(i % 97 + 101 * from + 13 * to);
}

// Against the naive definition: rank r's block j of the send buffer arrives as block r of rank
// j's receive buffer.
TEST_P(Collectives, AlltoallvDeliversEveryBlockToItsRank) {
  run([&](Transport& t) {
    const int size = t.size();
    std::vector<size_t> sendCounts(size), recvCounts(size);
    for (int j = 0; j < size; ++j) {
      sendCounts[j] = pairCount(count(), size, t.rank(), j);
      recvCounts[j] = pairCount(count(), size, j, t.rank());
    }
    std::vector<float> send, recv(std::accumulate(recvCounts.begin(), recvCounts.end(), 0u), -1);
    for (int j = 0; j < size; ++j) {
      for (size_t i = 0; i < sendCounts[j]; ++i) send.push_back(pairValue(t.rank(), j, i));
    }
    alltoallv(t, send, sendCounts, recv, recvCounts, options());
    size_t at = 0;
    for (int from = 0; from < size; ++from) {
      for (size_t i = 0; i < recvCounts[from]; ++i, ++at) {
        ASSERT_EQ(recv[at], pairValue(from, t.rank(), i)) << "from " << from << " #" << i;
      }
    }
  });
}

// Byte blocks of odd lengths (any element type travels this way): every byte in its place.
TEST_P(Collectives, AlltoallvBytesDeliversOddLengthBlocks) {
  run([&](Transport& t) {
    const int size = t.size();
    std::vector<size_t> sendBytes(size), recvBytes(size);
    for (int j = 0; j < size; ++j) {
      sendBytes[j] = pairCount(count(), size, t.rank(), j) * 3 + 1;
      recvBytes[j] = pairCount(count(), size, j, t.rank()) * 3 + 1;
    }
    auto byte = [](int from, int to, size_t i) {
      return static_cast<uint8_t>(i * 7 + from * 31 + to);
    };
    std::vector<uint8_t> send, recv(std::accumulate(recvBytes.begin(), recvBytes.end(), 0u), 0);
    for (int j = 0; j < size; ++j) {
      for (size_t i = 0; i < sendBytes[j]; ++i) send.push_back(byte(t.rank(), j, i));
    }
    alltoallvBytes(t, send, sendBytes, recv, recvBytes, options());
    size_t at = 0;
    for (int from = 0; from < size; ++from) {
      for (size_t i = 0; i < recvBytes[from]; ++i, ++at) {
        ASSERT_EQ(recv[at], byte(from, t.rank(), i)) << "from " << from << " #" << i;
      }
    }
  });
}

TEST_P(Collectives, AlltoallOfEqualBlocks) {
  run([&](Transport& t) {
    const auto size = static_cast<size_t>(t.size());
    const size_t block = count() / size;  // 0 when there are fewer elements than ranks
    std::vector<float> send(block * size), recv(block * size, -1);
    for (size_t j = 0; j < size; ++j) {
      for (size_t i = 0; i < block; ++i) send[j * block + i] = pairValue(t.rank(), j, i);
    }
    alltoall(t, send, recv, options());
    for (size_t from = 0; from < size; ++from) {
      for (size_t i = 0; i < block; ++i) {
        ASSERT_EQ(recv[from * block + i], pairValue(from, t.rank(), i)) << from << " #" << i;
      }
    }
  });
}

// Every root in the release build. Under a sanitizer the first two, the middle and the last:
// the code is the same relative to the root, and 64 ranks broadcasting from each of 64 roots took
// 14 of ThreadSanitizer's 45 s for this suite.
std::vector<int> rootsToTest(int size) {
  std::vector<int> roots;
  for (int root = 0; root < size; ++root) {
    if (!kSanitized || root < 2 || root == size / 2 || root == size - 1) roots.push_back(root);
  }
  return roots;
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (int root : rootsToTest(GetParam().size)) {
    run([&](Transport& t) {
      std::vector<float> data =
          t.rank() == root ? inputs(root, count()) : std::vector<float>(count(), 0);
      broadcast(t, data, root, options());
      for (size_t i = 0; i < count(); ++i) ASSERT_EQ(data[i], input(root, i)) << i;
    });
    if (count() > 5000) break;  // one root is enough for the large case
  }
}

TEST_P(Collectives, BarrierAndRepeatedCalls) {
  run([&](Transport& t) {
    for (int i = 0; i < 3; ++i) {
      barrier(t);
      std::vector<float> data = inputs(t.rank(), std::min<size_t>(count(), 5000));
      allreduce(t, data, ReduceOp::kSum, options());
      for (size_t j = 0; j < data.size(); ++j) ASSERT_EQ(data[j], naiveSum(t.size(), j));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(All, Collectives, ::testing::ValuesIn(cases()), caseName);

TEST(CollectivesBytes, AllgatherBytesOfUnknownLengths) {
  for (int size : {1, 2, 5}) {
    runWithTransports(TransportKind::kLoopback, size, [](Transport& t) {
      std::string mine(static_cast<size_t>(t.rank() * 3), static_cast<char>('a' + t.rank()));
      auto all = allgatherBytes(t, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size()});
      ASSERT_EQ(all.size(), static_cast<size_t>(t.size()));
      for (int r = 0; r < t.size(); ++r) {
        EXPECT_EQ(std::string(all[r].begin(), all[r].end()),
                  std::string(static_cast<size_t>(r * 3), static_cast<char>('a' + r)));
      }
    });
  }
}

// Lengths 0, 1, not a multiple of a float's 4 bytes, and large (past 2 MiB: received into
// storage advised to huge pages); from every root.
TEST(CollectivesBytes, BroadcastBytesOfAnyLength) {
  for (int size : {1, 2, 3, 5}) {
    runWithTransports(TransportKind::kLoopback, size, [](Transport& t) {
      for (size_t length :
           {size_t{0}, size_t{1}, size_t{7}, size_t{1} << 20 | 3, (size_t{5} << 20) + 1}) {
        for (int root = 0; root < t.size(); ++root) {
          std::vector<uint8_t> expected(length);
          for (size_t i = 0; i < length; ++i) expected[i] = static_cast<uint8_t>(i * 7 + root);
          std::vector<uint8_t> mine = t.rank() == root ? expected : std::vector<uint8_t>(3, 0xff);
          EXPECT_EQ(broadcastBytes(t, mine, root), expected) << length << " from " << root;
        }
      }
    });
  }
}

// Two overlapping groups of a job of 5 ({0,2,4} and {4,3,1,0}, in that rank order), each with
// its own tag, reduce at the same time: each sums its own members only, rank i of the group
// being the i-th rank named.
TEST(SubsetTransports, OverlappingGroupsReduceTheirOwnMembers) {
  const std::vector<std::vector<int>> groups = {{0, 2, 4}, {4, 3, 1, 0}};
  runWithTransports(TransportKind::kLoopback, 5, [&](Transport& t) {
    for (size_t g = 0; g < groups.size(); ++g) {
      const std::vector<int>& ranks = groups[g];
      auto at = std::find(ranks.begin(), ranks.end(), t.rank());
      if (at == ranks.end()) continue;
      std::unique_ptr<Transport> group = subsetTransport(t, ranks);
      EXPECT_EQ(group->rank(), at - ranks.begin());
      EXPECT_EQ(group->size(), static_cast<int>(ranks.size()));
      std::vector<float> data = inputs(t.rank(), 1003);
      allreduce(*group, data, ReduceOp::kSum, {.tag = g + 1});
      for (size_t i = 0; i < data.size(); ++i) {
        float sum = 0;
        for (int r : ranks) sum += input(r, i);
        ASSERT_EQ(data[i], sum) << "group " << g << " #" << i;
      }
    }
  });
}

TEST(SubsetTransports, RefuseRanksThatCannotFormAGroup) {
  runWithTransports(TransportKind::kLoopback, 3, [](Transport& t) {
    EXPECT_THROW(subsetTransport(t, {0, 1, 2, 3}), ConfigError);          // out of range
    EXPECT_THROW(subsetTransport(t, {0, 1, 1, 2}), ConfigError);          // twice
    EXPECT_THROW(subsetTransport(t, {(t.rank() + 1) % 3}), ConfigError);  // not this rank
    EXPECT_EQ(subsetTransport(t, {t.rank()})->size(), 1);
  });
}

TEST(CollectivesErrors, AllgathervNeedsOneCountPerRank) {
  runWithTransports(TransportKind::kLoopback, 2, [](Transport& t) {
    std::vector<uint8_t> data(10);
    std::vector<size_t> counts = {5};
    EXPECT_THROW(allgatherv(t, data, counts), ConfigError);
  });
}

TEST(CollectivesErrors, MismatchedSizesFailInsteadOfHanging) {
  runWithTransports(
      TransportKind::kLoopback, 2,
      [](Transport& t) {
        std::vector<float> data(t.rank() == 0 ? 100 : 200, 1.0f);
        EXPECT_THROW(allreduce(t, data), ProtocolError);
      },
      TransportOptions{.timeout = std::chrono::milliseconds(2000)});
}

// A block whose size the two ranks disagree on fails the receive, never hangs or shifts the
// stream; counts that do not fit the buffers are refused before anything is sent.
TEST(CollectivesErrors, AlltoallSizeDisagreementsFail) {
  runWithTransports(
      TransportKind::kLoopback, 2,
      [](Transport& t) {
        std::vector<float> send(8, 1.0f), recv(8);
        std::vector<size_t> sendCounts = {4, 4};
        std::vector<size_t> recvCounts = {4, 4};
        if (t.rank() == 1) recvCounts = {3, 4};  // rank 0 sends it 4
        if (t.rank() == 1) {
          EXPECT_THROW(alltoallv(t, send, sendCounts, recv, recvCounts), ProtocolError);
        } else {
          alltoallv(t, send, sendCounts, recv, recvCounts);
        }
        std::vector<size_t> tooMany = {5, 5};
        EXPECT_THROW(alltoallv(t, send, tooMany, recv, recvCounts), ConfigError);
        EXPECT_THROW(alltoall(t, std::span<const float>(send).first(7), recv), ConfigError);
      },
      TransportOptions{.timeout = std::chrono::milliseconds(2000)});
}

TEST(CollectivesErrors, BroadcastRootOutOfRange) {
  runWithTransports(TransportKind::kLoopback, 2, [](Transport& t) {
    std::vector<float> data(4);
    EXPECT_THROW(broadcast(t, data, 2), ConfigError);
  });
}

}  // namespace
}  // namespace gradsync::testing
