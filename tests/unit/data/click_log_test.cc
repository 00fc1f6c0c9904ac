// Click logs: the Zipf sampler against its exact law, the Criteo-like generator (deterministic,
// skewed, learnable labels) and the Criteo TSV reader (round trip, random access, errors).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <fmt/format.h>

#include "common/random.h"
#include "data/click_metrics.h"
#include "data/criteo_synthetic.h"
#include "data/criteo_tsv.h"
#include "data/zipf.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

std::string scratchFile(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / fmt::format("click-log-{}", ::getpid());
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// Uniform doubles from a seeded generator, for the sampler.
struct Uniforms {
  explicit Uniforms(uint64_t seed) : engine(seed) {}
  double operator()() { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }
  std::mt19937_64 engine;
};

TEST(Zipf, FrequenciesMatchTheExactLaw) {
  for (double s : {0.0, 0.8, 1.0, 1.1, 2.0}) {
    const ZipfDistribution zipf(50, s);
    Uniforms uniforms(7);
    std::vector<int> counts(51, 0);
    constexpr int kDraws = 200'000;
    for (int i = 0; i < kDraws; ++i) {
      uint64_t k = zipf.draw(std::ref(uniforms));
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, 50u);
      ++counts[k];
    }
    for (uint64_t k = 1; k <= 50; ++k) {
      const double expected = zipf.probability(k) * kDraws;
      // 5 standard deviations of a binomial count, plus one for rounding.
      EXPECT_NEAR(counts[k], expected, 5 * std::sqrt(expected) + 1) << "s=" << s << " k=" << k;
    }
  }
}

TEST(Zipf, LargeTablesAndEdges) {
  Uniforms uniforms(3);
  const ZipfDistribution one(1, 1.2);
  EXPECT_EQ(one.draw(std::ref(uniforms)), 1u);
  const ZipfDistribution huge(10'000'000, 1.05);
  int head = 0;
  for (int i = 0; i < 10'000; ++i) {
    uint64_t k = huge.draw(std::ref(uniforms));
    ASSERT_GE(k, 1u);
    ASSERT_LE(k, 10'000'000u);
    head += k <= 100;
  }
  EXPECT_GT(head, 2000);  // the 100 most frequent of 10^7 values take a large share
  EXPECT_NEAR(ZipfDistribution(4, 0).headMass(1), 0.25, 1e-12);
  EXPECT_THROW(ZipfDistribution(0, 1.0), ConfigError);
  EXPECT_THROW(ZipfDistribution(5, -1.0), ConfigError);
}

CriteoLikeOptions smallOptions(double zipf = 1.1) {
  CriteoLikeOptions options;
  options.tableRows = criteoTableRows(5000);
  options.zipf = zipf;
  options.trainSamples = 50'000;
  options.testSamples = 5'000;
  options.seed = 11;
  return options;
}

TEST(CriteoLike, SamplesArePureFunctionsOfSeedAndIndex) {
  const CriteoLikeLog a(smallOptions(), CriteoLikeLog::Split::kTrain);
  const CriteoLikeLog b(smallOptions(), CriteoLikeLog::Split::kTrain);
  const CriteoLikeLog test(smallOptions(), CriteoLikeLog::Split::kTest);
  ClickBatch x, y, z;
  a.read(100, 64, x);
  b.read(100, 64, y);
  test.read(100, 64, z);
  EXPECT_EQ(x.rows, y.rows);
  EXPECT_EQ(x.dense, y.dense);
  EXPECT_EQ(x.labels, y.labels);
  EXPECT_NE(x.rows, z.rows);  // the test split is another stream
  // Any sub-range reads the same samples.
  a.read(130, 5, y);
  EXPECT_TRUE(std::equal(y.rows.begin(), y.rows.end(), x.rows.begin() + 30 * kCriteoTables));
  ASSERT_EQ(x.rows.size(), 64u * kCriteoTables);
  for (size_t i = 0; i < x.rows.size(); ++i) {
    ASSERT_GE(x.rows[i], 0);
    ASSERT_LT(static_cast<uint64_t>(x.rows[i]), a.schema().tableRows[i % kCriteoTables]);
  }
}

TEST(CriteoLike, ClickRateAndLearnableLabels) {
  const CriteoLikeLog log(smallOptions(), CriteoLikeLog::Split::kTrain);
  double clicks = 0;
  std::vector<std::pair<double, int>> scored;
  constexpr int kSamples = 20'000;
  for (int i = 0; i < kSamples; ++i) {
    ClickRecord record = log.record(static_cast<size_t>(i));
    clicks += record.label;
    scored.emplace_back(log.teacherLogit(record), record.label);
  }
  EXPECT_NEAR(clicks / kSamples, 0.25, 0.02);
  // The planted model ranks clicks above non-clicks (its AUC), so labels carry signal.
  std::sort(scored.begin(), scored.end());
  double rankSum = 0, positives = 0;
  for (size_t i = 0; i < scored.size(); ++i) {
    if (scored[i].second) {
      rankSum += static_cast<double>(i + 1);
      ++positives;
    }
  }
  const double negatives = kSamples - positives;
  const double auc = (rankSum - positives * (positives + 1) / 2) / (positives * negatives);
  EXPECT_GT(auc, 0.75);
}

// Share of one table's lookups that go to its 1% most used rows.
double headShare(const CriteoLikeLog& log, int table) {
  std::map<int64_t, int> counts;
  ClickBatch batch;
  log.read(0, 20'000, batch);
  for (size_t i = 0; i < batch.size; ++i) ++counts[batch.rows[i * kCriteoTables + table]];
  std::vector<int> sorted;
  for (auto& [row, count] : counts) sorted.push_back(count);
  std::sort(sorted.rbegin(), sorted.rend());
  const size_t head = log.schema().tableRows[table] / 100;
  double top = 0;
  for (size_t i = 0; i < std::min(head, sorted.size()); ++i) top += sorted[i];
  return top / static_cast<double>(batch.size);
}

TEST(CriteoLike, AccessIsSkewedOrUniformAsAsked) {
  const CriteoLikeLog skewed(smallOptions(1.1), CriteoLikeLog::Split::kTrain);
  const CriteoLikeLog uniform(smallOptions(0.0), CriteoLikeLog::Split::kTrain);
  // Table 2 has 5000 rows here: its 50 most used take about half the lookups under Zipf(1.1)
  // (exactly headMass(50) = 0.53 minus missing values), about 1-2% under uniform access.
  const ZipfDistribution law(5000, 1.1);
  EXPECT_NEAR(headShare(skewed, 2), law.headMass(50), 0.03);
  EXPECT_LT(headShare(uniform, 2), 0.03);
  // The hottest row is not simply row 0: ranks are scattered over the table.
  EXPECT_EQ(skewed.rowOfRank(2, 1), skewed.rowOfRank(2, 5001));
  EXPECT_NE(skewed.rowOfRank(2, 1), skewed.rowOfRank(2, 2));
}

TEST(ClickLog, RecordTransform) {
  ClickSchema schema;
  schema.tableRows = {10, 3};
  ClickRecord record;
  record.label = 1;
  record.counts.assign(kCriteoDenseFeatures, std::nullopt);
  record.counts[0] = 0;
  record.counts[1] = -3;  // negative counts (a few in Criteo's logs) count as 0
  record.counts[2] = 9;
  record.hashes = {std::optional<uint32_t>(0xabcdef12u), std::nullopt};
  ClickBatch batch;
  batch.resize(schema, 1);
  putRecord(schema, record, 0, batch);
  EXPECT_EQ(batch.dense[0], 0.0f);
  EXPECT_EQ(batch.dense[1], 0.0f);
  EXPECT_FLOAT_EQ(batch.dense[2], std::log1p(9.0f));
  EXPECT_EQ(batch.dense[3], 0.0f);  // missing
  EXPECT_EQ(batch.rows[0], static_cast<int64_t>(0xabcdef12u % 10));
  EXPECT_EQ(batch.rows[1], 0);  // missing
  EXPECT_EQ(batch.labels[0], 1.0f);
}

TEST(CriteoTsv, SyntheticLogRoundTripsWithRandomAccess) {
  const CriteoLikeLog log(smallOptions(), CriteoLikeLog::Split::kTrain);
  const std::string path = scratchFile("train.txt");
  constexpr size_t kLines = 2100;  // past two index strides
  writeCriteoTsv(path, log, 500, kLines);
  const CriteoTsvLog tsv(path, log.schema().tableRows);
  ASSERT_EQ(tsv.size(), kLines);
  ClickBatch fromTsv, fromLog;
  for (size_t first : {size_t{0}, size_t{1023}, size_t{2040}, size_t{7}, size_t{1500}}) {
    const size_t count = std::min<size_t>(60, kLines - first);
    tsv.read(first, count, fromTsv);
    log.read(500 + first, count, fromLog);
    EXPECT_EQ(fromTsv.dense, fromLog.dense) << first;
    EXPECT_EQ(fromTsv.rows, fromLog.rows) << first;
    EXPECT_EQ(fromTsv.labels, fromLog.labels) << first;
  }
  EXPECT_EQ(formatCriteoLine(tsv.record(42)), formatCriteoLine(log.record(542)));
}

void expectDataError(const std::string& contents, const std::vector<std::string>& parts) {
  const std::string path = scratchFile("bad.txt");
  {
    std::ofstream out(path);
    out << contents;
  }
  try {
    CriteoTsvLog log(path, criteoTableRows(100));
    ClickBatch batch;
    log.read(0, log.size(), batch);
    FAIL() << "no error for: " << contents;
  } catch (const DataError& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(CriteoTsv, MalformedLinesNameFileLineAndField) {
  const CriteoLikeLog log(smallOptions(), CriteoLikeLog::Split::kTrain);
  const std::string good = formatCriteoLine(log.record(0));
  std::string badCount = good;
  badCount.replace(2, 0, "x");  // I1 gets a letter
  expectDataError(good + "\n" + badCount + "\n", {"bad.txt", "line 2", "I1"});
  expectDataError(good + "\n" + good + "\n1\t2\n",
                  {"line 3", "2 tab-separated fields, expected 40"});
  expectDataError("7" + good.substr(1) + "\n", {"line 1", "label"});
  std::string badHash = good;
  badHash.replace(badHash.rfind('\t') + 1, std::string::npos, "zz");
  expectDataError(badHash + "\n", {"line 1", "C26"});
  EXPECT_THROW(CriteoTsvLog("/nonexistent/train.txt", criteoTableRows(10)), DataError);
}

// The naive reference: every (click, non-click) pair, ties counting half.
double pairwiseAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[i] != 1 || labels[j] != 0) continue;
      pairs += 1;
      wins += scores[i] > scores[j] ? 1 : scores[i] == scores[j] ? 0.5 : 0;
    }
  }
  return pairs > 0 ? wins / pairs : 0.5;
}

TEST(ClickMetrics, AucMatchesEveryPairWithTies) {
  std::mt19937 random(4);
  for (size_t n : {1, 2, 10, 301}) {
    std::vector<float> scores(n), labels(n);
    for (size_t i = 0; i < n; ++i) {
      scores[i] = static_cast<float>(random() % 7);  // many ties
      labels[i] = random() % 3 == 0 ? 1.0f : 0.0f;
    }
    EXPECT_NEAR(rocAuc(scores, labels), pairwiseAuc(scores, labels), 1e-12) << n;
  }
  EXPECT_DOUBLE_EQ(rocAuc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(rocAuc(std::vector<float>{0.1f, 0.9f}, std::vector<float>{1, 0}), 0.0);
}

TEST(ClickMetrics, LogLoss) {
  EXPECT_NEAR(logLoss(std::vector<float>{0.5f, 0.5f}, std::vector<float>{1, 0}), std::log(2.0),
              1e-7);
  EXPECT_NEAR(logLoss(std::vector<float>{0.9f}, std::vector<float>{1}), -std::log(0.9), 1e-6);
  EXPECT_NEAR(logLoss(std::vector<float>{0.0f}, std::vector<float>{1}), -std::log(1e-7), 1e-6);
  EXPECT_EQ(logLoss({}, {}), 0.0);
}

}  // namespace
}  // namespace gradsync
