#include "data/criteo_synthetic.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "common/check.h"
#include "common/random.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kTestStream = uint64_t{1} << 40;  // test samples: a disjoint stream
constexpr int kTeacherDim = 4;
constexpr int kTeacherWidth = 1 + kTeacherDim;  // a row's bias, then its vector
// Planted weights are kept in memory up to this many rows in all (about 160 MB), else recomputed.
constexpr uint64_t kMaxPlantedRows = uint64_t{1} << 23;
// Spreads of the planted model's weights: together a logit spread of about 2 (an AUC near 0.85
// for the planted model itself; a learned model gets less, since rare rows are seen too seldom).
constexpr double kDenseWeight = 0.15;
constexpr double kRowBias = 0.3;
constexpr double kRowVector = 0.35;
// Which features go missing, and how often (Criteo has missing values in most columns).
constexpr double kMissingDense = 0.1;
constexpr double kMissingCategorical = 0.05;

// SplitMix64 as a generator: the k-th output is the mix of seed + k·golden.
class Stream {
 public:
  explicit Stream(uint64_t seed) : state_(seed) {}
  uint64_t bits() {
    const uint64_t r = rng::splitMix64(state_);
    state_ += kGolden;
    return r;
  }
  double uniform() { return static_cast<double>(bits() >> 11) * 0x1.0p-53; }
  double normal() {  // Box-Muller; the first variate is in (0, 1], so the log is finite
    const double u1 = static_cast<double>((bits() >> 11) + 1) * 0x1.0p-53;
    const double u2 = uniform();
    return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  }

 private:
  uint64_t state_;
};

// A normal value that is a pure function of its key.
double normalOf(uint64_t key) {
  Stream stream(key);
  return stream.normal();
}

uint64_t gcd(uint64_t a, uint64_t b) {
  return std::gcd(a, b);
}

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

}  // namespace

CriteoLikeLog::CriteoLikeLog(const CriteoLikeOptions& options, Split split)
    : options_(options),
      split_(split),
      size_(split == Split::kTrain ? options.trainSamples : options.testSamples) {
  if (options.tableRows.empty()) throw ConfigError("a click log needs at least one table");
  if (!(options.clickRate > 0 && options.clickRate < 1)) {
    throw ConfigError(fmt::format("click rate {} is not in (0, 1)", options.clickRate));
  }
  schema_.tableRows = options.tableRows;
  Stream layout(rng::mixSeed(options.seed, 0x7a6c));
  for (size_t t = 0; t < options.tableRows.size(); ++t) {
    const uint64_t rows = options.tableRows[t];
    if (rows == 0) throw ConfigError(fmt::format("table {} has 0 rows", t));
    zipf_.emplace_back(rows, options.zipf);
    // A random permutation of ranks to rows (a * k + c mod rows, a coprime with rows), so that
    // the hot rows are scattered over the table (and over its shards), not its first rows.
    uint64_t a = rows == 1 ? 1 : layout.bits() % rows;
    while (rows > 1 && (a == 0 || gcd(a, rows) != 1)) a = (a + 1) % rows;
    permutation_.push_back(a);
    offset_.push_back(layout.bits() % rows);
  }
  plantTeacher();
  bias_ = calibrateBias();
}

void CriteoLikeLog::plantTeacher() {
  const uint64_t teacher = rng::mixSeed(options_.seed, 0x7eac4e5);
  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    denseWeights_.push_back(kDenseWeight * normalOf(rng::mixSeed(teacher, j)));
  }
  if (schema_.totalRows() > kMaxPlantedRows) return;
  // teacherRow computes while teacher_ is empty, and reads it once it is filled.
  std::vector<std::vector<float>> planted(schema_.tableRows.size());
  for (size_t t = 0; t < planted.size(); ++t) {
    planted[t].resize(schema_.tableRows[t] * kTeacherWidth);
    for (uint64_t r = 0; r < schema_.tableRows[t]; ++r) {
      teacherRow(t, r, planted[t].data() + r * kTeacherWidth);
    }
  }
  teacher_ = std::move(planted);
}

void CriteoLikeLog::teacherRow(size_t table, uint64_t row, float* out) const {
  if (!teacher_.empty()) {
    std::copy_n(teacher_[table].data() + row * kTeacherWidth, kTeacherWidth, out);
    return;
  }
  const uint64_t teacher = rng::mixSeed(options_.seed, 0x7eac4e5);
  const uint64_t key = rng::mixSeed(rng::mixSeed(teacher, 1000 + table), row);
  out[0] = static_cast<float>(kRowBias * normalOf(key));
  for (int c = 1; c <= kTeacherDim; ++c) {
    out[c] = static_cast<float>(kRowVector * normalOf(rng::mixSeed(key, c)));
  }
}

uint64_t CriteoLikeLog::rowOfRank(int table, uint64_t rank) const {
  const auto t = static_cast<size_t>(table);
  const uint64_t rows = schema_.tableRows[t];
  // (a * (rank - 1) + c) mod rows without overflow: 128-bit product.
  const auto product = static_cast<unsigned __int128>(permutation_[t]) * ((rank - 1) % rows);
  return static_cast<uint64_t>((product + offset_[t]) % rows);
}

ClickRecord CriteoLikeLog::draw(uint64_t stream) const {
  Stream rng(rng::mixSeed(options_.seed, stream));
  ClickRecord record;
  record.counts.resize(kCriteoDenseFeatures);
  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    // Log-normal counts with a per-feature location and spread, as Criteo's counts look.
    const double location = 0.5 + 0.25 * j;
    const double spread = 0.6 + 0.05 * j;
    const double z = rng.normal();
    if (rng.uniform() < kMissingDense) continue;
    record.counts[j] = static_cast<int64_t>(std::floor(std::exp(location + spread * z))) - 1;
  }
  const auto tables = static_cast<size_t>(schema_.tables());
  record.hashes.resize(tables);
  auto uniform = [&rng] { return rng.uniform(); };
  for (size_t t = 0; t < tables; ++t) {
    const uint64_t rank = zipf_[t].draw(uniform);
    const bool missing = t % 5 == 4 && rng.uniform() < kMissingCategorical;
    if (!missing) record.hashes[t] = static_cast<uint32_t>(rowOfRank(static_cast<int>(t), rank));
  }
  return record;
}

double CriteoLikeLog::unbiasedLogit(const ClickRecord& record) const {
  double logit = 0;
  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    const int64_t count = std::max<int64_t>(record.counts[j].value_or(0), 0);
    logit += denseWeights_[j] * std::log1p(static_cast<double>(count));
  }
  const auto tables = static_cast<size_t>(schema_.tables());
  std::vector<float> rows(tables * kTeacherWidth);
  for (size_t t = 0; t < tables; ++t) {
    teacherRow(t, record.hashes[t].value_or(0) % schema_.tableRows[t], &rows[t * kTeacherWidth]);
  }
  for (size_t t = 0; t < tables; ++t) {
    const float* here = &rows[t * kTeacherWidth];
    logit += here[0];
    if (tables < 2) continue;
    const float* next = &rows[((t + 1) % tables) * kTeacherWidth];
    double dot = 0;
    for (int c = 1; c <= kTeacherDim; ++c) dot += static_cast<double>(here[c]) * next[c];
    logit += dot;
  }
  return logit;
}

double CriteoLikeLog::teacherLogit(const ClickRecord& record) const {
  return bias_ + unbiasedLogit(record);
}

// The bias that makes the mean click probability over the first 4096 training samples equal
// the click rate (bisection: the mean is increasing in the bias).
double CriteoLikeLog::calibrateBias() const {
  constexpr int kSamples = 4096;
  std::vector<double> logits(kSamples);
  for (int i = 0; i < kSamples; ++i) logits[i] = unbiasedLogit(draw(static_cast<uint64_t>(i)));
  double low = -30, high = 30;
  for (int iteration = 0; iteration < 60; ++iteration) {
    const double mid = (low + high) / 2;
    double mean = 0;
    for (double l : logits) mean += sigmoid(l + mid);
    (mean / kSamples < options_.clickRate ? low : high) = mid;
  }
  return (low + high) / 2;
}

ClickRecord CriteoLikeLog::record(size_t index) const {
  GS_CHECK_LT(index, size_);
  const uint64_t stream = (split_ == Split::kTest ? kTestStream : 0) + index;
  ClickRecord record = draw(stream);
  Stream coin(rng::mixSeed(options_.seed ^ 0x1abe1, stream));
  record.label = coin.uniform() < sigmoid(teacherLogit(record)) ? 1 : 0;
  return record;
}

void CriteoLikeLog::read(size_t first, size_t count, ClickBatch& out) const {
  GS_CHECK_LE(first + count, size_);
  out.resize(schema_, count);
  for (size_t i = 0; i < count; ++i) putRecord(schema_, record(first + i), i, out);
}

}  // namespace gradsync
