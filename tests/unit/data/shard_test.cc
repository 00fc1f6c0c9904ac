// Dataset shards (data/shard_format.h) and the per-rank shard sampler (data/shard_sampler.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "data/shard_format.h"
#include "data/shard_sampler.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

ImageSet pattern(int64_t count, int rows = 3, int cols = 2) {
  ImageSet set{count, rows, cols, {}, {}};
  for (int64_t i = 0; i < count; ++i) {
    set.labels.push_back(static_cast<uint8_t>(i % 10));
    for (size_t p = 0; p < set.imageSize(); ++p)
      set.pixels.push_back(static_cast<uint8_t>(i * 7 + p));
  }
  return set;
}

ShardManifest manifestFor(const ImageSet& set) {
  return {.rows = set.rows, .cols = set.cols, .classes = 10};
}

ShardInfo infoOf(const std::string& name, int64_t samples, const std::vector<uint8_t>& bytes) {
  return {name, samples, bytes.size(), crc32Of(bytes)};
}

TEST(ShardFormat, RoundTripsEveryShardSizeIncludingOne) {
  const ImageSet set = pattern(10);
  for (int64_t first : {0, 3, 9}) {
    const int64_t count = first == 9 ? 1 : 4;
    std::vector<uint8_t> bytes = encodeShard(set, first, count);
    ImageSet back = decodeShard(bytes, infoOf("s", count, bytes), manifestFor(set), "s");
    ASSERT_EQ(back.count, count);
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_EQ(back.labels[i], set.labels[first + i]);
      for (size_t p = 0; p < set.imageSize(); ++p)
        EXPECT_EQ(back.pixels[i * set.imageSize() + p],
                  set.pixels[(first + i) * set.imageSize() + p]);
    }
  }
}

TEST(ShardFormat, ACorruptOrMismatchedShardIsRefusedNamingIt) {
  const ImageSet set = pattern(5);
  std::vector<uint8_t> bytes = encodeShard(set, 0, 5);
  const ShardInfo info = infoOf("train-00007.gss", 5, bytes);
  EXPECT_TRUE(matchesShard(bytes, info));
  std::vector<uint8_t> flipped = bytes;
  flipped[20] ^= 1;
  EXPECT_FALSE(matchesShard(flipped, info));
  try {
    decodeShard(flipped, info, manifestFor(set), "shard train-00007.gss");
    FAIL() << "a flipped bit was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("train-00007.gss"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> truncated(bytes.begin(), bytes.end() - 1);
  EXPECT_THROW(decodeShard(truncated, info, manifestFor(set), "s"), DataError);
  ShardManifest wrongShape = manifestFor(set);
  wrongShape.rows = 28;
  EXPECT_THROW(decodeShard(bytes, info, wrongShape, "s"), DataError);
}

TEST(ShardFormat, ManifestRoundTripsAndRejectsMalformedLines) {
  ShardManifest m{.rows = 28, .cols = 28, .classes = 10};
  m.train = {{"train-00000.gss", 1000, 785016, 0xe0d7cd4a}, {"train-00001.gss", 7, 5504, 0x1}};
  m.test = {{"test-00000.gss", 3, 2364, 0xffffffff}};
  ShardManifest back = parseManifest(formatManifest(m), "m");
  ASSERT_EQ(back.train.size(), 2u);
  EXPECT_EQ(back.train[0].crc32, 0xe0d7cd4au);
  EXPECT_EQ(back.train[1].samples, 7);
  EXPECT_EQ(back.test[0].crc32, 0xffffffffu);
  EXPECT_EQ(back.trainSamples(), 1007);
  EXPECT_EQ(back.testSamples(), 3);
  for (const std::string bad :
       {"", "gradsync-shards 2\n", "gradsync-shards 1\nimages 28 28 10\n",
        "gradsync-shards 1\nimages 28 28 10\ntrain ../etc/passwd 1 1 0\n",
        "gradsync-shards 1\nimages 28 28 10\ntrain a 0 1 0\n", "gradsync-shards 1\ntrain a 1 1 0\n",
        "gradsync-shards 1\nimages 28 28 10\nshard a 1 1 0\n"}) {
    EXPECT_THROW(parseManifest(bad, "m"), DataError) << bad;
  }
}

TEST(ShardFormat, WriteShardsSplitsEverySampleOnceWithAShortLastShard) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gradsync-shards-" + std::to_string(::getpid())))
          .string();
  std::filesystem::remove_all(dir);
  ShardManifest m = writeShards(pattern(10), pattern(3), 10, 4, dir);
  ASSERT_EQ(m.train.size(), 3u);  // 4 + 4 + 2
  EXPECT_EQ(m.train[2].samples, 2);
  ASSERT_EQ(m.test.size(), 1u);
  std::ifstream in(dir + "/manifest.txt");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(formatManifest(parseManifest(text, "m")), formatManifest(m));
  std::ifstream shard(dir + "/" + m.train[2].name, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(shard)), {});
  ImageSet last = decodeShard(bytes, m.train[2], m, "s");
  EXPECT_EQ(last.labels, (std::vector<uint8_t>{8, 9}));
  std::filesystem::remove_all(dir);
}

std::vector<ShardInfo> shards(std::vector<int64_t> sizes) {
  std::vector<ShardInfo> out;
  for (int64_t n : sizes) out.push_back({"s" + std::to_string(out.size()), n, 0, 0});
  return out;
}

TEST(ShardSampler, RanksOwnDisjointShardsThatCoverTheSet) {
  const auto train = shards({5, 5, 5, 5, 5, 5, 5, 3});
  for (int world : {1, 2, 3}) {
    std::set<size_t> seen;
    for (int r = 0; r < world; ++r) {
      ShardPartition p = ShardPartition::of(train, r, world);
      for (size_t s : p.shards) {
        EXPECT_EQ(s % static_cast<size_t>(world), static_cast<size_t>(r));
        EXPECT_TRUE(seen.insert(s).second) << "shard " << s << " owned twice";
      }
    }
    EXPECT_EQ(seen.size(), train.size());
  }
}

TEST(ShardSampler, EachEpochVisitsTheRankSamplesOnceInANewOrderWithEqualStepsEverywhere) {
  const auto train = shards({5, 5, 5, 5, 5, 5, 5, 3});  // rank 1 of 3 owns 5+5+3 = 13, others 15/10
  for (int world : {1, 2, 3}) {
    std::set<size_t> steps;
    for (int r = 0; r < world; ++r) {
      ShardSampler sampler(train, r, world, 2, 7, 2);
      steps.insert(sampler.stepsPerEpoch());
      EXPECT_EQ(sampler.globalBatch(), 2u * static_cast<size_t>(world));
      for (int64_t epoch : {0, 1}) {
        std::vector<size_t> order = sampler.epochOrder(epoch);
        std::vector<size_t> sorted = order;
        std::sort(sorted.begin(), sorted.end());
        std::vector<size_t> all(static_cast<size_t>(sampler.partition().samples));
        std::iota(all.begin(), all.end(), size_t{0});
        EXPECT_EQ(sorted, all) << "rank " << r << " epoch " << epoch;
        for (size_t step = 0; step < sampler.stepsPerEpoch(); ++step) {
          std::vector<size_t> batch = sampler.batch(epoch, step);
          EXPECT_EQ(batch,
                    std::vector<size_t>(order.begin() + step * 2, order.begin() + step * 2 + 2));
        }
      }
      EXPECT_NE(sampler.epochOrder(0), sampler.epochOrder(1));
      EXPECT_EQ(sampler.epochOrder(1), ShardSampler(train, r, world, 2, 7, 2).epochOrder(1));
    }
    EXPECT_EQ(steps.size(), 1u) << "ranks disagree on the steps of an epoch at world " << world;
  }
  EXPECT_EQ(ShardSampler(train, 1, 3, 2, 7).stepsPerEpoch(), 10u / 2);  // the smallest, rank 2's
}

// Streaming: a batch draws from at most the two windows it straddles, in shardOrder's order.
TEST(ShardSampler, BatchesDrawFromTheWindowsInPrefetchOrder) {
  const auto train = shards(std::vector<int64_t>(12, 10));
  ShardSampler sampler(train, 0, 1, 8, 3, 3);
  const ShardPartition& p = sampler.partition();
  const std::vector<size_t> shardOrder = sampler.shardOrder(2);
  std::vector<size_t> rankOf(shardOrder.size());
  for (size_t i = 0; i < shardOrder.size(); ++i) rankOf[shardOrder[i]] = i;
  const std::vector<size_t> order = sampler.epochOrder(2);
  for (size_t i = 0; i < order.size(); ++i) {
    const size_t window = rankOf[p.locate(order[i]).first] / 3;
    EXPECT_EQ(window, i / 30) << "sample " << i << " comes from a later window";
  }
}

TEST(ShardSampler, RefusesMoreRanksThanShardsAndPartitionsSmallerThanABatch) {
  EXPECT_THROW(ShardSampler(shards({5, 5}), 0, 3, 1, 0), ConfigError);
  EXPECT_THROW(ShardSampler(shards({5, 5, 2}), 0, 3, 3, 0), ConfigError);
  EXPECT_THROW(ShardSampler(shards({5}), 0, 1, 0, 0), ConfigError);
}

}  // namespace
}  // namespace gradsync
