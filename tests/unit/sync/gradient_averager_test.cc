// GradientAverager (include/gradsync/gradient_averager.h) against the engine it must agree with:
// for every compression method, buckets averaged by the averager hold what the engine's wfbp
// schedule leaves in its slots for the same gradients, seed and steps.
#include "gradsync/gradient_averager.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "compress/registry.h"
#include "gradsync/error.h"
#include "support/transports.h"
#include "sync/engine.h"

namespace gradsync::testing {
namespace {

// A zero-element and a one-element tensor among them; the matrices are compressed (minimum 100
// elements), the vectors stay dense.
const std::vector<GradientShape> kShapes = {{"conv.weight", {16, 3, 5, 5}},
                                            {"conv.bias", {16}},
                                            {"fc.weight", {10, 300}},
                                            {"fc.bias", {10}},
                                            {"scale", {1}},
                                            {"empty", {0, 4}}};
// As DDP buckets them: last layers first, a bucket of several layers.
const std::vector<std::vector<int>> kBuckets = {{5, 4, 3, 2}, {1, 0}};
constexpr int kAveragerSteps = 3;

std::vector<TensorShape> engineShapes() {
  std::vector<TensorShape> shapes;
  for (const GradientShape& s : kShapes) shapes.push_back(tensorShape(s.name, s.dims));
  return shapes;
}

size_t elementsOf(int tensor) {
  size_t n = 1;
  for (int64_t d : kShapes[static_cast<size_t>(tensor)].dims) n *= static_cast<size_t>(d);
  return n;
}

float averagerGradient(int rank, int tensor, size_t i, int step) {
  return static_cast<float>(
      std::sin(1.3 * static_cast<double>(i) + 0.7 * tensor + 2.1 * rank + 0.37 * step));
}

// By step, by tensor: the averages each side computed on one rank.
using Results = std::vector<std::vector<std::vector<float>>>;

Results viaEngine(Transport& t, const std::string& spec, int64_t warmup) {
  EngineOptions options{.schedule = ScheduleSpec::parse("wfbp"),
                        .compression = {.spec = spec, .minElements = 100, .warmupSteps = warmup},
                        .seed = 7};
  options.update.momentum = 0.9;  // dgc's momentum correction
  Engine engine(t, engineShapes(), options);
  Results results;
  for (int step = 0; step < kAveragerSteps; ++step) {
    for (int tensor = static_cast<int>(kShapes.size()) - 1; tensor >= 0; --tensor) {
      std::span<float> slot = engine.slot(tensor);
      for (size_t i = 0; i < slot.size(); ++i)
        slot[i] = averagerGradient(t.rank(), tensor, i, step);
      engine.markReady(tensor);
    }
    engine.finishStep();
    auto& byTensor = results.emplace_back();
    for (size_t tensor = 0; tensor < kShapes.size(); ++tensor) {
      std::span<float> slot = engine.slot(static_cast<int>(tensor));
      byTensor.emplace_back(slot.begin(), slot.end());
    }
  }
  return results;
}

AveragerOptions averagerOptions(const std::string& spec, int64_t warmup) {
  return {.compress = spec,
          .compressMinElements = 100,
          .compressWarmup = warmup,
          .seed = 7,
          .momentum = 0.9};
}

// One step: each bucket filled with this rank's gradients, averaged, split back into tensors.
void averageStep(GradientAverager& averager, int rank, int step,
                 std::vector<std::vector<float>>& byTensor) {
  byTensor.assign(kShapes.size(), {});
  for (const std::vector<int>& indices : kBuckets) {
    std::vector<float> bucket;
    for (int tensor : indices) {
      for (size_t i = 0; i < elementsOf(tensor); ++i)
        bucket.push_back(averagerGradient(rank, tensor, i, step));
    }
    averager.average(indices, bucket, static_cast<uint64_t>(step));
    size_t at = 0;
    for (int tensor : indices) {
      byTensor[static_cast<size_t>(tensor)].assign(
          bucket.begin() + static_cast<std::ptrdiff_t>(at),
          bucket.begin() + static_cast<std::ptrdiff_t>(at + elementsOf(tensor)));
      at += elementsOf(tensor);
    }
  }
}

Results viaAverager(Transport& t, const std::string& spec, int64_t warmup) {
  GradientAverager averager(t, kShapes, averagerOptions(spec, warmup));
  Results results(kAveragerSteps);
  for (int step = 0; step < kAveragerSteps; ++step)
    averageStep(averager, t.rank(), step, results[step]);
  return results;
}

// Compressed tensors: bitwise the engine's (the same compressor, state and seeds). Dense ones
// travel in one allreduce per bucket instead of one per tensor: the ring then adds each element
// in another order, so three ranks may differ in the last bit (two add in one order only).
void expectSame(const Results& engine, const Results& averager, int ranks, const std::string& spec,
                int64_t warmup) {
  for (int step = 0; step < kAveragerSteps; ++step) {
    for (size_t tensor = 0; tensor < kShapes.size(); ++tensor) {
      const auto& e = engine[step][tensor];
      const auto& a = averager[step][tensor];
      ASSERT_EQ(e.size(), a.size());
      const bool dense =
          spec == "none" || elementsOf(static_cast<int>(tensor)) < 100 || step < warmup;
      for (size_t i = 0; i < e.size(); ++i) {
        if (dense && ranks > 2) {
          ASSERT_NEAR(a[i], e[i], 1e-6 * std::max(1.0f, std::fabs(e[i])))
              << spec << " " << kShapes[tensor].name << " step " << step << " element " << i;
        } else {
          ASSERT_EQ(a[i], e[i]) << spec << " " << kShapes[tensor].name << " step " << step
                                << " element " << i << " on " << ranks << " ranks";
        }
      }
    }
  }
}

void compareWithEngine(const std::string& spec, int ranks, int64_t warmup) {
  std::mutex mutex;
  std::map<int, Results> engine, averager;
  runWithTransports(TransportKind::kLoopback, ranks, [&](Transport& t) {
    Results e = viaEngine(t, spec, warmup);
    Results a = viaAverager(t, spec, warmup);
    std::lock_guard<std::mutex> lock(mutex);
    engine[t.rank()] = std::move(e);
    averager[t.rank()] = std::move(a);
  });
  for (int r = 0; r < ranks; ++r) expectSame(engine[r], averager[r], ranks, spec, warmup);
  // Every rank holds the same averages.
  for (int r = 1; r < ranks; ++r) EXPECT_EQ(averager[r], averager[0]) << spec;
}

TEST(GradientAverager, EveryMethodAveragesAsTheEngineDoes) {
  std::vector<std::string> specs = {"none"};
  for (const MethodInfo& method : compressionMethods()) specs.push_back(method.name);
  for (const std::string& spec : specs) {
    for (int ranks : {2, 3}) {
      SCOPED_TRACE(spec + " on " + std::to_string(ranks) + " ranks");
      compareWithEngine(spec, ranks, 0);
    }
  }
}

TEST(GradientAverager, WarmUpStepsAreDense) {
  compareWithEngine("topk:0.05", 2, 2);
  compareWithEngine("powersgd:2", 3, 1);
}

// The naive reference: dense averages are the mean of the ranks' gradients.
TEST(GradientAverager, DenseAveragesAreTheMean) {
  constexpr int kRanks = 3;
  runWithTransports(TransportKind::kTcp, kRanks, [&](Transport& t) {
    GradientAverager averager(t, kShapes);
    std::vector<std::vector<float>> byTensor;
    averageStep(averager, t.rank(), 1, byTensor);
    for (size_t tensor = 0; tensor < kShapes.size(); ++tensor) {
      ASSERT_EQ(byTensor[tensor].size(), elementsOf(static_cast<int>(tensor)));
      for (size_t i = 0; i < byTensor[tensor].size(); ++i) {
        float mean = 0;
        for (int r = 0; r < kRanks; ++r)
          mean += averagerGradient(r, static_cast<int>(tensor), i, 1);
        ASSERT_NEAR(byTensor[tensor][i], mean / kRanks, 1e-6);
      }
    }
    const AveragerStats stats = averager.stats();
    EXPECT_GT(stats.bytesSent, 0u);
    // Per bucket, as a dense ring allreduce of it sends: 2 (P - 1) / P of its bytes.
    EXPECT_EQ(stats.denseBytes, 2u * (kRanks - 1) * 4u * (3000 + 10 + 1) / kRanks +
                                    2u * (kRanks - 1) * 4u * (1200 + 16) / kRanks);
  });
}

// A run stopped after two steps and resumed in a fresh averager from saveState() repeats the
// uninterrupted run bitwise (error feedback's residuals, PowerSGD's Q); without the state the
// third step differs.
TEST(GradientAverager, StateResumesTheRunBitwise) {
  for (const std::string spec : {"topk:0.05", "powersgd:2"}) {
    runWithTransports(TransportKind::kLoopback, 2, [&](Transport& t) {
      GradientAverager whole(t, kShapes, averagerOptions(spec, 0));
      GradientAverager first(t, kShapes, averagerOptions(spec, 0));
      std::vector<std::vector<float>> expected, resumed, fresh;
      for (int step = 0; step < 2; ++step) {
        averageStep(whole, t.rank(), step, expected);
        averageStep(first, t.rank(), step, resumed);
      }
      averageStep(whole, t.rank(), 2, expected);
      GradientAverager second(t, kShapes, averagerOptions(spec, 0));
      second.loadState(first.saveState());
      averageStep(second, t.rank(), 2, resumed);
      EXPECT_EQ(resumed, expected) << spec;
      GradientAverager stateless(t, kShapes, averagerOptions(spec, 0));
      averageStep(stateless, t.rank(), 2, fresh);
      EXPECT_NE(fresh, expected) << spec;
    });
  }
}

TEST(GradientAverager, RefusesBadInputWithTheReason) {
  runWithTransports(TransportKind::kLoopback, 1, [&](Transport& t) {
    try {
      GradientAverager averager(t, kShapes, {.compress = "topk:2"});
      FAIL() << "topk:2 was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("topk"), std::string::npos) << e.what();
    }
    try {
      GradientAverager averager(t, kShapes, {.compress = "zip"});
      FAIL() << "zip was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("powersgd"), std::string::npos) << e.what();
    }
    GradientAverager averager(t, kShapes, {.compress = "topk:0.1", .compressMinElements = 100});
    EXPECT_EQ(averager.method(0), "topk:0.1");
    EXPECT_EQ(averager.method(1), "none");
    std::vector<float> tooShort(15);
    std::vector<int> indices = {1};
    EXPECT_THROW(averager.average(indices, tooShort, 0), ConfigError);
    indices = {9};
    EXPECT_THROW(averager.average(indices, tooShort, 0), ConfigError);
    GradientAverager other(t, {{"w", {4}}});
    EXPECT_THROW(averager.loadState(other.saveState()), DataError);
  });
}

}  // namespace
}  // namespace gradsync::testing
