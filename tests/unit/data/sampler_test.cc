#include "data/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr uint64_t kSamplerSeed = 1234;

TEST(EpochPermutation, IsAPermutation) {
  for (size_t n : {0, 1, 2, 7, 1000}) {
    auto perm = epochPermutation(n, kSamplerSeed, 3);
    ASSERT_EQ(perm.size(), n);
    std::sort(perm.begin(), perm.end());
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(perm[i], i);
  }
}

// Fixed values: the permutation must not change across platforms, compilers or refactorings
// (a run resumed elsewhere must see the same data order).
TEST(EpochPermutation, Golden) {
  EXPECT_EQ(epochPermutation(10, 42, 0), (std::vector<size_t>{2, 0, 4, 7, 8, 3, 5, 1, 9, 6}));
  EXPECT_EQ(epochPermutation(10, 42, 1), (std::vector<size_t>{2, 8, 7, 3, 6, 4, 0, 9, 5, 1}));
}

TEST(EpochPermutation, DependsOnSeedAndEpoch) {
  const auto base = epochPermutation(1000, kSamplerSeed, 0);
  EXPECT_EQ(base, epochPermutation(1000, kSamplerSeed, 0));
  EXPECT_NE(base, epochPermutation(1000, kSamplerSeed, 1));
  EXPECT_NE(base, epochPermutation(1000, kSamplerSeed + 1, 0));
  EXPECT_NE(epochPermutation(1000, kSamplerSeed, -1), epochPermutation(1000, kSamplerSeed, 1));
}

// Fisher-Yates with an unbiased draw makes all n! orders equally likely: an off-by-one (e.g.
// drawing from [0, i) instead of [0, i]) would leave some orders impossible.
TEST(EpochPermutation, AllOrdersEquallyLikely) {
  std::map<std::vector<size_t>, int> counts;
  const int epochs = 24000;
  for (int e = 0; e < epochs; ++e) ++counts[epochPermutation(4, kSamplerSeed, e)];
  ASSERT_EQ(counts.size(), 24u);
  for (const auto& [perm, count] : counts) {
    EXPECT_NEAR(count, epochs / 24.0, 150);  // ~5 standard deviations
  }
}

TEST(DistributedSampler, StepsDropTheLastIncompleteBatch) {
  EXPECT_EQ(DistributedSampler(103, 0, 3, 4, kSamplerSeed).stepsPerEpoch(), 8u);
  EXPECT_EQ(DistributedSampler(96, 2, 3, 4, kSamplerSeed).stepsPerEpoch(), 8u);
  EXPECT_EQ(DistributedSampler(12, 1, 3, 4, kSamplerSeed).stepsPerEpoch(), 1u);
  EXPECT_EQ(DistributedSampler(60000, 0, 1, 64, kSamplerSeed).stepsPerEpoch(), 937u);
  // Every rank agrees on the count, whatever its rank.
  for (int r = 0; r < 5; ++r)
    EXPECT_EQ(DistributedSampler(1001, r, 5, 7, kSamplerSeed).stepsPerEpoch(), 28u);
}

TEST(DistributedSampler, ShardsAreDisjointEachEpoch) {
  const size_t n = 211, localBatch = 6;
  for (int world = 1; world <= 5; ++world) {
    for (int64_t epoch : {0, 1, 7}) {
      std::set<size_t> seen;
      size_t total = 0;
      for (int rank = 0; rank < world; ++rank) {
        const DistributedSampler sampler(n, rank, world, localBatch, kSamplerSeed);
        for (size_t step = 0; step < sampler.stepsPerEpoch(); ++step) {
          const auto batch = sampler.batch(epoch, step);
          ASSERT_EQ(batch.size(), localBatch);
          for (size_t index : batch) EXPECT_LT(index, n);
          seen.insert(batch.begin(), batch.end());
          total += batch.size();
        }
      }
      EXPECT_EQ(total, (n / (world * localBatch)) * world * localBatch) << "world " << world;
      EXPECT_EQ(seen.size(), total) << "world " << world << ": an index was given twice";
    }
  }
}

// The core property: W ranks of batch B, interleaved, are one worker of batch W*B.
TEST(DistributedSampler, UnionOverRanksIsTheSingleWorkerBatch) {
  const size_t n = 500, localBatch = 8;
  for (int world = 1; world <= 5; ++world) {
    const DistributedSampler single(n, 0, 1, localBatch * world, kSamplerSeed);
    std::vector<DistributedSampler> ranks;
    ranks.reserve(world);
    for (int r = 0; r < world; ++r) ranks.emplace_back(n, r, world, localBatch, kSamplerSeed);
    ASSERT_EQ(single.stepsPerEpoch(), ranks[0].stepsPerEpoch());
    for (int64_t epoch : {0, 3}) {
      const auto perm = epochPermutation(n, kSamplerSeed, epoch);
      for (size_t step = 0; step < single.stepsPerEpoch(); ++step) {
        const auto global = single.batch(epoch, step);
        // The naive reference: a contiguous slice of the epoch's permutation.
        ASSERT_TRUE(
            std::equal(global.begin(), global.end(), perm.begin() + step * localBatch * world));
        for (int r = 0; r < world; ++r) {
          const auto local = ranks[r].batch(epoch, step);
          for (size_t i = 0; i < localBatch; ++i) {
            ASSERT_EQ(local[i], global[i * world + r])
                << "world " << world << " rank " << r << " step " << step << " i " << i;
          }
        }
      }
    }
  }
}

// A run resumed on another number of workers keeps its global batch (batchWorkers x B): W
// ranks, interleaved, are still the single worker's batch, shares one sample apart at most.
TEST(DistributedSampler, AnotherWorldSizeSharesTheSameGlobalBatch) {
  const size_t n = 500, localBatch = 6;
  for (int batchWorkers : {3, 4}) {
    const DistributedSampler single(n, 0, 1, localBatch * batchWorkers, kSamplerSeed);
    for (int world : {1, 2, 3, 4, 5, 7}) {
      std::vector<DistributedSampler> ranks;
      ranks.reserve(world);
      for (int r = 0; r < world; ++r) {
        ranks.emplace_back(n, r, world, localBatch, kSamplerSeed, batchWorkers);
      }
      ASSERT_EQ(ranks[0].stepsPerEpoch(), single.stepsPerEpoch());
      ASSERT_EQ(ranks[0].globalBatch(), single.globalBatch());
      for (size_t step : {size_t{0}, single.stepsPerEpoch() - 1}) {
        const auto global = single.batch(2, step);
        std::vector<size_t> interleaved(global.size());
        for (int r = 0; r < world; ++r) {
          const auto local = ranks[r].batch(2, step);
          const size_t g = global.size(), w = static_cast<size_t>(world);
          ASSERT_EQ(local.size(), g / w + (static_cast<size_t>(r) < g % w ? 1 : 0));
          for (size_t i = 0; i < local.size(); ++i) interleaved[i * w + r] = local[i];
        }
        EXPECT_EQ(interleaved, global) << "batches " << batchWorkers << " world " << world;
      }
    }
  }
  EXPECT_THROW(DistributedSampler(500, 0, 13, 4, kSamplerSeed, 3), ConfigError);  // 12 < 13
}

TEST(DistributedSampler, DeterministicAcrossInstances) {
  const DistributedSampler a(300, 1, 3, 5, kSamplerSeed), b(300, 1, 3, 5, kSamplerSeed);
  const DistributedSampler other(300, 1, 3, 5, kSamplerSeed + 1);
  EXPECT_EQ(a.batch(2, 4), b.batch(2, 4));
  EXPECT_NE(a.batch(2, 4), other.batch(2, 4));
  EXPECT_NE(a.batch(2, 4), a.batch(3, 4));
  // Out-of-order epochs (the cache holds one) give the same answers.
  const auto first = a.batch(0, 0);
  a.batch(5, 1);
  EXPECT_EQ(a.batch(0, 0), first);
}

TEST(DistributedSampler, ConcurrentCallsAgree) {
  const DistributedSampler sampler(2000, 0, 2, 10, kSamplerSeed);
  std::vector<std::vector<size_t>> expected;
  for (int64_t e = 0; e < 4; ++e) expected.push_back(sampler.batch(e, 3));
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const int64_t e = (t + i) % 4;
        if (sampler.batch(e, 3) != expected[e]) ++mismatches;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(DistributedSampler, ConfigurationErrors) {
  EXPECT_THROW(DistributedSampler(100, 0, 1, 0, kSamplerSeed), ConfigError);
  EXPECT_THROW(DistributedSampler(100, 0, 0, 4, kSamplerSeed), ConfigError);
  EXPECT_THROW(DistributedSampler(100, 0, -2, 4, kSamplerSeed), ConfigError);
  EXPECT_THROW(DistributedSampler(100, -1, 2, 4, kSamplerSeed), ConfigError);
  EXPECT_THROW(DistributedSampler(100, 2, 2, 4, kSamplerSeed), ConfigError);
  EXPECT_THROW(DistributedSampler(11, 0, 3, 4, kSamplerSeed), ConfigError);
  EXPECT_THROW(DistributedSampler(0, 0, 1, 1, kSamplerSeed), ConfigError);
  EXPECT_THROW(DistributedSampler(100, 0, 2, SIZE_MAX / 2 + 1, kSamplerSeed), ConfigError);
  try {
    const DistributedSampler sampler(11, 1, 3, 4, kSamplerSeed);
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("11 samples"), std::string::npos) << what;
    EXPECT_NE(what.find("3 ranks x 4"), std::string::npos) << what;
    EXPECT_NE(what.find("[rank 1]"), std::string::npos) << what;
  }
}

TEST(DistributedSampler, StepOutOfRangeIsABug) {
  const DistributedSampler sampler(100, 0, 2, 5, kSamplerSeed);
  EXPECT_THROW(sampler.batch(0, sampler.stepsPerEpoch()), InternalError);
}

}  // namespace
}  // namespace gradsync
