// The doubling allreduces (recursive doubling, halving-doubling) against a naive reference that
// adds in the algorithm's order on one thread (fold, pairs, unfold), with inputs whose float sums
// round: bitwise on every rank, at world sizes 1 to 8 (odd and powers of two) and 64, sizes 0, 1,
// fewer than the ranks, non-divisible and large, over loopback threads, TCP and shared memory. A
// killed peer: multiproc_test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gradsync/collectives.h"
#include "support/sanitized.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

// Mixed signs and magnitudes, unique per (rank, index): sums in different orders differ.
float doublingInput(int rank, size_t i) {
  return std::sin(static_cast<float>(i) * 0.61f + static_cast<float>(rank) * 1.7f) *
         static_cast<float>(1 + (i * 5 + rank * 7) % 13);
}

// The algorithms' additions, written out on whole buffers: ranks p2 + i fold into rank i; rank i
// adds rank i ^ mask's values for mask = 1, 2, ... (recursive doubling) or mask = p2 / 2, ..., 1
// (halving-doubling, whose rank i keeps only the half it goes on reducing, with the same sums;
// its allgather copies); an average scales after the last addition.
std::vector<float> naiveDoubling(int size, size_t count, bool average, bool halving) {
  int p2 = 1;
  while (p2 * 2 <= size) p2 *= 2;
  std::vector<std::vector<float>> v(size, std::vector<float>(count));
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < count; ++i) v[r][i] = doublingInput(r, i);
  }
  for (int r = 0; r + p2 < size; ++r) {
    for (size_t i = 0; i < count; ++i) v[r][i] += v[r + p2][i];
  }
  std::vector<int> masks;
  for (int mask = 1; mask < p2; mask *= 2) masks.push_back(mask);
  if (halving) std::reverse(masks.begin(), masks.end());
  for (int mask : masks) {
    std::vector<std::vector<float>> before = v;
    for (int r = 0; r < p2; ++r) {
      for (size_t i = 0; i < count; ++i) v[r][i] = before[r][i] + before[r ^ mask][i];
    }
  }
  if (average && size > 1) {
    for (float& x : v[0]) x *= 1.0f / static_cast<float>(size);
  }
  return v[0];
}

struct DoublingCase {
  AllreduceAlgorithm algorithm;
  TransportKind kind;
  int size;
  size_t count;
};

std::vector<DoublingCase> doublingCases() {
  std::vector<DoublingCase> all;
  const size_t large = sanitizedSize((1 << 20) + 3, (1 << 14) + 3);
  for (auto algorithm :
       {AllreduceAlgorithm::kRecursiveDoubling, AllreduceAlgorithm::kHalvingDoubling}) {
    for (int size = 1; size <= 8; ++size) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{1003}, large}) {
        all.push_back({algorithm, TransportKind::kLoopback, size, count});
      }
    }
    all.push_back({algorithm, TransportKind::kLoopback, 64, 13});
    for (int size : {3, 4}) {
      all.push_back({algorithm, TransportKind::kTcp, size, 1003});
      all.push_back({algorithm, TransportKind::kShm, size, large});
    }
  }
  return all;
}

class Doubling : public ::testing::TestWithParam<DoublingCase> {};

TEST_P(Doubling, EqualsTheNaiveOrderBitwiseOnEveryRank) {
  const auto [algorithm, kind, size, count] = GetParam();
  const bool halving = algorithm == AllreduceAlgorithm::kHalvingDoubling;
  for (bool average : {false, true}) {
    const std::vector<float> expected = naiveDoubling(size, count, average, halving);
    runWithTransports(kind, size, [&](Transport& t) {
      std::vector<float> data(count);
      for (size_t i = 0; i < count; ++i) data[i] = doublingInput(t.rank(), i);
      allreduce(t, data, average ? ReduceOp::kAverage : ReduceOp::kSum,
                {.tag = 3, .algorithm = algorithm});
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(std::memcmp(&data[i], &expected[i], sizeof(float)), 0)
            << "rank " << t.rank() << (average ? " average" : " sum") << " #" << i << ": "
            << data[i] << " against " << expected[i];
      }
    });
  }
}

std::string doublingCaseName(const ::testing::TestParamInfo<DoublingCase>& info) {
  const bool halving = info.param.algorithm == AllreduceAlgorithm::kHalvingDoubling;
  return std::string(halving ? "halving_" : "recursive_") + kindName(info.param.kind) + "_w" +
         std::to_string(info.param.size) + "_n" + std::to_string(info.param.count);
}

INSTANTIATE_TEST_SUITE_P(All, Doubling, ::testing::ValuesIn(doublingCases()), doublingCaseName);

}  // namespace
}  // namespace gradsync::testing
