// Every collective against a naive reference computed from the same inputs, for world sizes
// 1..8 (threads over loopback; a subset over TCP) and element counts 0, 1, non-divisible and
// large. Inputs are small integers unique per (rank, index), so sums are exact in float and a
// misplaced element is always caught.
#include <gtest/gtest.h>

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

TEST_P(Collectives, AllreduceSumEqualsNaiveSum) {
  run([&](Transport& t) {
    std::vector<float> data = inputs(t.rank(), count());
    allreduce(t, data, ReduceOp::kSum, options());
    for (size_t i = 0; i < count(); ++i) ASSERT_EQ(data[i], naiveSum(t.size(), i)) << i;
  });
}

TEST_P(Collectives, AllreduceAverage) {
  run([&](Transport& t) {
    std::vector<float> data = inputs(t.rank(), count());
    allreduce(t, data, ReduceOp::kAverage, options());
    for (size_t i = 0; i < count(); ++i) {
      ASSERT_FLOAT_EQ(data[i], naiveSum(t.size(), i) / static_cast<float>(t.size())) << i;
    }
  });
}

TEST_P(Collectives, ReduceScatterOwnBlock) {
  run([&](Transport& t) {
    std::vector<float> data = inputs(t.rank(), count());
    reduceScatter(t, data, ReduceOp::kSum, options());
    Block own = blockOf(count(), t.size(), t.rank());
    for (size_t i = own.begin; i < own.end; ++i) ASSERT_EQ(data[i], naiveSum(t.size(), i)) << i;
  });
}

TEST_P(Collectives, AllgatherCollectsEveryBlock) {
  run([&](Transport& t) {
    std::vector<float> data(count(), -1.0f);
    Block own = blockOf(count(), t.size(), t.rank());
    for (size_t i = own.begin; i < own.end; ++i) data[i] = input(t.rank(), i);
    allgather(t, data, options());
    for (int r = 0; r < t.size(); ++r) {
      Block b = blockOf(count(), t.size(), r);
      for (size_t i = b.begin; i < b.end; ++i) ASSERT_EQ(data[i], input(r, i)) << i;
    }
  });
}

TEST_P(Collectives, AllgathervWithUnequalAndEmptyBlocks) {
  run([&](Transport& t) {
    // Rank r contributes (count * r) % 7919 bytes: unequal, some empty, never aligned.
    std::vector<size_t> counts(t.size());
    for (int r = 0; r < t.size(); ++r) counts[r] = (count() * static_cast<size_t>(r)) % 7919;
    size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    std::vector<uint8_t> data(total, 0);
    size_t offset = std::accumulate(counts.begin(), counts.begin() + t.rank(), size_t{0});
    for (size_t i = 0; i < counts[t.rank()]; ++i)
      data[offset + i] = static_cast<uint8_t>(i + t.rank());
    allgatherv(t, data, counts, options());
    offset = 0;
    for (int r = 0; r < t.size(); ++r) {
      for (size_t i = 0; i < counts[r]; ++i) {
        ASSERT_EQ(data[offset + i], static_cast<uint8_t>(i + r)) << "rank " << r << " byte " << i;
      }
      offset += counts[r];
    }
  });
}

TEST_P(Collectives, BroadcastFromEveryRoot) {
  for (int root = 0; root < GetParam().size; ++root) {
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

// Lengths 0, 1, not a multiple of a float's 4 bytes, and large; from every root.
TEST(CollectivesBytes, BroadcastBytesOfAnyLength) {
  for (int size : {1, 2, 3, 5}) {
    runWithTransports(TransportKind::kLoopback, size, [](Transport& t) {
      for (size_t length : {size_t{0}, size_t{1}, size_t{7}, size_t{1} << 20 | 3}) {
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

TEST(CollectivesErrors, BroadcastRootOutOfRange) {
  runWithTransports(TransportKind::kLoopback, 2, [](Transport& t) {
    std::vector<float> data(4);
    EXPECT_THROW(broadcast(t, data, 2), ConfigError);
  });
}

}  // namespace
}  // namespace gradsync::testing
