// p3 with top-k selects k per tensor, not per slice: the engine's parameters after a few steps
// equal a naive replay that takes each rank's exact top-k of the whole tensor (its budgetGradient
// plus its error-feedback residual), averages what was sent and applies SGD; the same replay with a
// top-k per slice ends elsewhere, so the comparison can tell the two apart.
#include <gtest/gtest.h>

#include <cmath>

#include "compress/select.h"
#include "support/transports.h"
#include "sync/engine.h"

namespace gradsync::testing {
namespace {

// One tensor cut into slices of 300 elements (300, 300, 300, 100), one too small to compress.
const std::vector<TensorShape> kBudgetTensors = {tensorShape("w", {1000}), tensorShape("b", {10})};
constexpr size_t kSlice = 300;
constexpr double kDensity = 0.05;
constexpr float kBudgetLr = 0.1f;
constexpr int kBudgetSteps = 4;

// Large in the first third of `w`: a tensor-wide top-k takes nearly all of its k there, while a
// top-k per slice would take 5% of every slice.
float budgetGradient(int rank, size_t tensor, size_t i, int step) {
  const float g = std::sin(static_cast<float>(i * 7 + 31 * tensor + 5 * rank + 13 * step));
  return tensor == 0 && i < 333 ? 10 * g : g;
}

using Parameters = std::vector<std::vector<float>>;

Parameters initial() {
  Parameters p;
  for (const TensorShape& t : kBudgetTensors) p.emplace_back(t.elements, 1.0f);
  return p;
}

// Each rank sends its exact top-k of every `piece` elements of w (corrected by its residual);
// b goes dense. SGD on the average, without momentum.
Parameters replay(int ranks, size_t piece) {
  Parameters p = initial();
  std::vector<std::vector<float>> residual(ranks,
                                           std::vector<float>(kBudgetTensors[0].elements, 0));
  std::vector<uint32_t> selected;
  for (int s = 0; s < kBudgetSteps; ++s) {
    std::vector<float> sum(kBudgetTensors[0].elements, 0.0f);
    for (int r = 0; r < ranks; ++r) {
      for (size_t begin = 0; begin < sum.size(); begin += piece) {
        const size_t n = std::min(piece, sum.size() - begin);
        std::vector<float> corrected(n);
        for (size_t i = 0; i < n; ++i) {
          corrected[i] = budgetGradient(r, 0, begin + i, s) + residual[r][begin + i];
        }
        selectTopKBySort(corrected, selectionCount(n, kDensity), selected);
        for (size_t i = 0; i < n; ++i) residual[r][begin + i] = corrected[i];
        for (uint32_t i : selected) {
          sum[begin + i] += corrected[i];
          residual[r][begin + i] = 0;
        }
      }
    }
    for (size_t i = 0; i < sum.size(); ++i)
      p[0][i] -= kBudgetLr * sum[i] / static_cast<float>(ranks);
    for (size_t i = 0; i < kBudgetTensors[1].elements; ++i) {
      float dense = 0;
      for (int r = 0; r < ranks; ++r) dense += budgetGradient(r, 1, i, s);
      p[1][i] -= kBudgetLr * dense / static_cast<float>(ranks);
    }
  }
  return p;
}

double maxDifference(const Parameters& a, const Parameters& b) {
  double largest = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    for (size_t i = 0; i < a[t].size(); ++i) {
      largest = std::max(largest, std::fabs(double{a[t][i]} - b[t][i]));
    }
  }
  return largest;
}

TEST(SliceBudgets, P3TopKSelectsKPerTensor) {
  for (int ranks : {2, 3}) {
    const Parameters perTensor = replay(ranks, kBudgetTensors[0].elements);
    const Parameters perSlice = replay(ranks, kSlice);
    ASSERT_GT(maxDifference(perTensor, perSlice), 1e-2) << "the case cannot tell them apart";
    EngineOptions options{.schedule = ScheduleSpec::parse("p3:slice=300,window=2"),
                          .compression = {.spec = "topk:0.05", .minElements = 100},
                          .update = UpdateRule::sgd(kBudgetLr)};
    runWithTransports(TransportKind::kLoopback, ranks, [&](Transport& t) {
      Parameters p = initial();
      Engine engine(t, kBudgetTensors, options, {p.begin(), p.end()});
      ASSERT_EQ(engine.layout().units.size(), 5u);  // four slices of w, and b
      for (int s = 0; s < kBudgetSteps; ++s) {
        for (int tensor = 1; tensor >= 0; --tensor) {
          engine.waitFor(tensor);
          std::span<float> slot = engine.slot(tensor);
          for (size_t i = 0; i < slot.size(); ++i) slot[i] = budgetGradient(t.rank(), tensor, i, s);
          engine.markReady(tensor);
        }
        engine.endBackward();
      }
      engine.drain();
      EXPECT_LT(maxDifference(p, perTensor), 1e-5) << ranks << " ranks, rank " << t.rank();
    });
  }
}

}  // namespace
}  // namespace gradsync::testing
