// The sparse-selection codec (sparse_selection.h): k pairs out, k validated pairs in.
#include "compress/sparse_selection.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/check.h"
#include "compress/select.h"
#include "compress/sparse.h"
#include "gradsync/error.h"

namespace gradsync {

double checkedDensity(const MethodArgs& args, const char* method) {
  if (!(args.value > 0 && args.value <= 1)) {
    throw ConfigError(fmt::format("{}:R needs 0 < R <= 1, got {}", method, args.value));
  }
  return args.value;
}

int checkedIterations(const MethodArgs& args, const char* method) {
  constexpr int kMaxIterations = 30;
  const double iterations = args.number("iters", 20);
  if (!(iterations >= 1 && iterations <= kMaxIterations && iterations == std::floor(iterations))) {
    throw ConfigError(fmt::format("{} iters needs an integer 1 <= iters <= {}, got {}", method,
                                  kMaxIterations, iterations));
  }
  return static_cast<int>(iterations);
}

size_t SparseSelectionCodec::encodedBytes(size_t elements) const {
  return sparseBytes(selectionCount(elements, density_));
}

void SparseSelectionCodec::setBudget(size_t k) {
  budget_ = k;
  budgeted_ = true;
}

void SparseSelectionCodec::encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t) {
  const size_t k = budget_ ? std::min(*budget_, x.size()) : selectionCount(x.size(), density_);
  budget_.reset();
  select(x, k, indices_);
  GS_CHECK_EQ(indices_.size(), k);
  encodeSparseGather(x, indices_, out);
}

void SparseSelectionCodec::decodeAdd(std::span<const uint8_t> in, std::span<float> out) const {
  const SparseView view = viewSparse(in, out.size());
  const size_t k = selectionCount(out.size(), density_);
  if (view.count != k && !budgeted_) {
    throw ProtocolError(fmt::format("sparse encoding carries {} pairs, expected {} for {} elements",
                                    view.count, k, out.size()));
  }
  for (size_t i = 1; i < view.count; ++i) {
    if (view.index(i) <= view.index(i - 1)) {
      throw ProtocolError(fmt::format("sparse encoding's indices are not ascending at pair {}", i));
    }
  }
  for (size_t i = 0; i < view.count; ++i) out[view.index(i)] += view.value(i);
}

}  // namespace gradsync
