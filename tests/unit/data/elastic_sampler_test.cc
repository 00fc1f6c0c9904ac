// The elastic sampler against the properties elastic training rests on: whatever the world size
// does within an epoch, every sample is used exactly once and every step has the same samples;
// and at the most workers the batches are DistributedSampler's (checked against it; the last
// step against a fresh permutation sliced by hand).
#include "data/elastic_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "data/sampler.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr uint64_t kElasticSeed = 77;

// Runs one epoch with the world size picked by `worldAt(step)`; returns every index used, in
// the order used, after checking each step's shares.
// The step's samples do not depend on the world size: gathered from every rank (and sorted),
// they are the same at any size.
std::vector<size_t> stepOf(const ElasticSampler& sampler, const EpochPosition& at, int world) {
  std::vector<size_t> all;
  for (int r = 0; r < world; ++r) {
    std::vector<size_t> mine = sampler.batch(at, r, world);
    all.insert(all.end(), mine.begin(), mine.end());
  }
  std::sort(all.begin(), all.end());
  return all;
}

template <typename WorldAt>
std::vector<size_t> runEpoch(const ElasticSampler& sampler, int64_t epoch, WorldAt worldAt) {
  std::vector<size_t> used;
  EpochPosition at{epoch, 0};
  for (int step = 0; at.offset < sampler.datasetSize(); ++step) {
    const int world = worldAt(step);
    const size_t samples = sampler.stepSamples(at);
    size_t sum = 0;
    for (int r = 0; r < world; ++r) {
      std::vector<size_t> mine = sampler.batch(at, r, world);
      EXPECT_GE(mine.size(), sampler.localBatch()) << "step " << step << " rank " << r;
      EXPECT_LE(mine.size(), samples / static_cast<size_t>(world) + 1);
      sum += mine.size();
      used.insert(used.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(sum, samples);
    EXPECT_EQ(stepOf(sampler, at, world), stepOf(sampler, at, 1)) << "step " << step;
    const EpochPosition next = sampler.after(at);
    EXPECT_EQ(next.offset, at.offset + samples);
    at = next;
  }
  EXPECT_EQ(at.offset, sampler.datasetSize());
  return used;
}

void expectEverySampleOnce(std::vector<size_t> used, size_t size) {
  ASSERT_EQ(used.size(), size);
  std::sort(used.begin(), used.end());
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(used[i], i);
}

TEST(ElasticSampler, EverySampleOnceWhateverTheWorldSizeDoes) {
  std::mt19937 random(5);
  for (size_t size : {12, 13, 97, 1000, 60000}) {
    for (size_t batch : {1, 3, 64}) {
      for (int most : {1, 3, 4, 8}) {
        if (batch * static_cast<size_t>(most) > size) continue;
        ElasticSampler sampler(size, batch, most, kElasticSeed);
        std::uniform_int_distribution<int> world(1, most);
        expectEverySampleOnce(runEpoch(sampler, 2, [&](int) { return world(random); }), size);
        expectEverySampleOnce(runEpoch(sampler, 3, [&](int) { return most; }), size);
        // Shrinking and growing again mid-epoch, as a failure and a rejoin do.
        expectEverySampleOnce(
            runEpoch(sampler, 4, [&](int s) { return s < 3 || s > 6 ? most : 1; }), size);
      }
    }
  }
}

// At the most workers the batches are DistributedSampler's, step for step, up to the last one,
// which also takes the samples DistributedSampler drops.
TEST(ElasticSampler, AtTheMostWorkersItIsTheDistributedSampler) {
  const size_t size = 1000, batch = 7;
  for (int world : {1, 2, 3, 5}) {
    ElasticSampler elastic(size, batch, world, kElasticSeed);
    EXPECT_EQ(elastic.globalBatch(), batch * static_cast<size_t>(world));
    EpochPosition at{1, 0};
    const size_t steps = DistributedSampler(size, 0, world, batch, kElasticSeed).stepsPerEpoch();
    for (size_t step = 0; step + 1 < steps; ++step) {
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(elastic.batch(at, r, world),
                  DistributedSampler(size, r, world, batch, kElasticSeed).batch(1, step))
            << "world " << world << " step " << step << " rank " << r;
      }
      at = elastic.after(at);
    }
    // The last step: DistributedSampler's last batch plus the remainder, by the same rule.
    const std::vector<size_t> permutation = epochPermutation(size, kElasticSeed, 1);
    EXPECT_EQ(elastic.stepSamples(at), size - at.offset);
    for (int r = 0; r < world; ++r) {
      std::vector<size_t> expected;
      for (size_t i = at.offset + static_cast<size_t>(r); i < size;
           i += static_cast<size_t>(world)) {
        expected.push_back(permutation[i]);
      }
      EXPECT_EQ(elastic.batch(at, r, world), expected);
    }
  }
}

TEST(ElasticSampler, TheLastStepTakesTheRemainder) {
  ElasticSampler sampler(100, 10, 3, kElasticSeed);  // steps of 30 while >= 30 more would remain
  EXPECT_EQ(sampler.stepSamples({0, 0}), 30u);
  EXPECT_EQ(sampler.stepSamples({0, 30}), 30u);
  EXPECT_EQ(sampler.stepSamples({0, 60}), 40u);  // 10 left after 30: all 40 at once
  EXPECT_EQ(sampler.batch({0, 60}, 0, 3).size(), 14u);
  EXPECT_EQ(sampler.batch({0, 60}, 2, 3).size(), 13u);
  EXPECT_EQ(sampler.batch({0, 60}, 0, 1).size(), 40u);  // one worker takes the whole step
  EXPECT_EQ(sampler.batch({0, 30}, 1, 2).size(), 15u);
  EXPECT_THROW(sampler.stepSamples({0, 100}), InternalError);
  EXPECT_THROW(sampler.batch({0, 0}, 0, 4), InternalError);  // more than the most workers
}

TEST(ElasticSampler, RefusesWhatCannotWork) {
  EXPECT_THROW(ElasticSampler(100, 0, 2, kElasticSeed), ConfigError);
  EXPECT_THROW(ElasticSampler(100, 10, 0, kElasticSeed), ConfigError);
  EXPECT_THROW(ElasticSampler(100, 10, 11, kElasticSeed), ConfigError);
  EXPECT_NO_THROW(ElasticSampler(100, 10, 10, kElasticSeed));
}

}  // namespace
}  // namespace gradsync
