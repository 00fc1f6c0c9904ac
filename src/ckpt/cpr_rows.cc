#include "ckpt/cpr_rows.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/check.h"
#include "common/random.h"

namespace gradsync {

std::vector<uint64_t> mostUsedRows(std::span<const uint32_t> pending, double fraction) {
  GS_CHECK(fraction > 0 && fraction <= 1);
  const auto budget =
      static_cast<size_t>(std::ceil(fraction * static_cast<double>(pending.size())));
  std::vector<uint64_t> candidates;
  for (uint64_t row = 0; row < pending.size(); ++row) {
    if (pending[row] > 0) candidates.push_back(row);
  }
  if (candidates.size() > budget) {
    // The budget's most used, ties to the lower row: a partial sort, not a full one.
    auto more = [&](uint64_t a, uint64_t b) {
      return pending[a] != pending[b] ? pending[a] > pending[b] : a < b;
    };
    std::nth_element(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(budget),
                     candidates.end(), more);
    candidates.resize(budget);
  }
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

RowSubSample::RowSubSample(double rate, uint64_t seed) : rate_(rate), seed_(seed) {
  GS_CHECK(rate > 0 && rate <= 1);
}

bool RowSubSample::wouldSample(uint64_t row, uint32_t accesses, uint64_t round) const {
  if (accesses == 0) return false;
  const uint64_t bits = rng::mixSeed(rng::mixSeed(seed_, round), row);
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;
  // P(at least one of `accesses` draws at rate p) = 1 − (1 − p)^accesses.
  return u < -std::expm1(static_cast<double>(accesses) * std::log1p(-rate_)) || rate_ == 1;
}

void RowSubSample::record(uint64_t row, uint32_t accesses, uint64_t round) {
  if (wouldSample(row, accesses, round)) rows_.insert(row);
}

std::vector<uint64_t> RowSubSample::take() {
  std::vector<uint64_t> rows(rows_.begin(), rows_.end());
  rows_.clear();
  std::sort(rows.begin(), rows.end());
  return rows;
}

}  // namespace gradsync
