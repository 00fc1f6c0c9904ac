// OD-SGD, SSD-SGD and CD-SGD against a naive replay of their rules (docs/algorithms.md, "Delayed
// SGD"): the servers' global model, and each worker's local model after its local steps (with
// local momentum seeded from the global models' last displacement at each pull).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "compress/two_bit.h"
#include "ps_fixture.h"
#include "push_reference.h"

namespace gradsync::testing {
namespace {

using Delay = PsOptions::Delay;

struct Outcome {
  std::vector<Parameters> local;  // by worker
  Parameters global, velocity;
};

// What worker r pushes of tensor t at step s (wfbp: a unit is a tensor): its gradient, or what
// the server decodes from its compressed push (with error feedback where the method has it).
class Pushes {
 public:
  Pushes(const CompressionConfig& compression, int workers)
      : compression_(compression),
        plan_(planCompression(compression, kTensors, 0.0)),
        methods_(workers),
        residuals_(workers) {
    for (int r = 0; r < workers; ++r) {
      for (size_t t = 0; t < kTensors.size(); ++t) {
        const CompressSpec& spec = plan_.perTensor[t];
        methods_[r].push_back(
            spec.dense() ? nullptr : findMethod(spec.method).make(spec.args, {&kTensors[t], 1}));
        residuals_[r].emplace_back(kTensors[t].elements, 0.0f);
      }
    }
  }

  std::vector<float> of(int r, size_t t, int s) {
    std::vector<float> x(kTensors[t].elements);
    for (size_t i = 0; i < x.size(); ++i) x[i] = gradient(r, t, i, s);
    if (!methods_[r][t] || s < compression_.warmupSteps) return x;
    std::vector<float>& residual = residuals_[r][t];
    const bool ef = plan_.perTensor[t].errorFeedback;
    for (size_t i = 0; ef && i < x.size(); ++i) x[i] += residual[i];
    std::vector<float> decoded = decodedPush(*methods_[r][t], x, kPushSeed, s, r);
    for (size_t i = 0; ef && i < x.size(); ++i) residual[i] = x[i] - decoded[i];
    return decoded;
  }

 private:
  const CompressionConfig compression_;
  const CompressionPlan plan_;
  std::vector<std::vector<std::unique_ptr<Compressor>>> methods_;  // by worker, tensor
  std::vector<Parameters> residuals_;
};

// Replays `steps` steps of the strategy on plain vectors, one element at a time.
Outcome replay(const PsOptions& o, const CompressionConfig& compression, int steps) {
  Pushes pushes(compression, o.placement.workers);
  const int workers = o.placement.workers;
  const auto k = static_cast<int64_t>(o.delaySteps);
  Parameters global = initialParameters();
  Parameters velocity = global, pulled = global, previous = global;
  for (auto& t : velocity) std::fill(t.begin(), t.end(), 0.0f);
  std::vector<Parameters> local(workers, global), residual(workers, velocity);
  std::vector<Parameters> localVelocity = residual;
  bool fresh = false;
  int span = 1;
  for (int s = 0; s < steps; ++s) {
    const bool delayed = s >= o.warmupSteps;
    const int64_t since = s - o.warmupSteps;
    const bool quantized = delayed && o.delay == Delay::kCompressed && s % k != 0;
    for (size_t t = 0; t < kTensors.size(); ++t) {
      std::vector<std::vector<float>> pushedOf;
      for (int r = 0; r < workers; ++r) pushedOf.push_back(pushes.of(r, t, s));
      for (size_t i = 0; i < kTensors[t].elements; ++i) {
        float sum = 0;
        for (int r = 0; r < workers; ++r) {
          float g = gradient(r, t, i, s);
          float pushed = pushedOf[r][i];
          if (quantized) {
            float x = residual[r][t][i] + g;
            pushed = x >= o.threshold ? o.threshold : x <= -o.threshold ? -o.threshold : 0.0f;
            residual[r][t][i] = x - pushed;
          }
          sum += pushed;
          if (!delayed) continue;
          const auto lr = static_cast<float>(o.localLr);
          const bool several = o.delay == Delay::kSeveralSteps;
          float& w = local[r][t][i];
          float& u = localVelocity[r][t][i];
          if (fresh) u = (previous[t][i] - pulled[t][i]) * (1.0f / (lr * static_cast<float>(span)));
          float base = fresh || !several ? pulled[t][i] : w;
          float glu = several ? static_cast<float>(o.glu) * (previous[t][i] - pulled[t][i]) : 0;
          u = static_cast<float>(o.localMomentum) * u + g;
          w = base - lr * (u + glu);
        }
        float& v = velocity[t][i];
        v = static_cast<float>(kMomentum) * v + sum * (1.0f / static_cast<float>(workers));
        global[t][i] -= static_cast<float>(kLr) * v;
      }
    }
    fresh = false;
    const bool pull = !delayed || o.delay != Delay::kSeveralSteps || since % k == k - 1;
    if (!pull) continue;
    fresh = true;
    span = delayed && o.delay == Delay::kSeveralSteps ? static_cast<int>(k) : 1;
    previous = pulled;
    pulled = global;
    if (!delayed) std::fill(local.begin(), local.end(), global);
  }
  return {local, global, velocity};
}

struct DelayedCase {
  std::string name;
  Delay delay;
  int64_t warmup;
  std::string schedule = "wfbp";
  int servers = 2;
  bool colocated = true;
  float threshold = 0.2f;  // cdsgd
  std::string compress = "none";

  friend void PrintTo(const DelayedCase& c, std::ostream* os) { *os << c.name; }
};

class DelayedSgd : public ::testing::TestWithParam<DelayedCase> {};

TEST_P(DelayedSgd, MatchesTheNaiveReplay) {
  const DelayedCase& c = GetParam();
  constexpr int kSteps = 8;
  Job job{.workers = 2,
          .servers = c.servers,
          .colocated = c.colocated,
          .server = {.momentum = kMomentum},
          .schedule = c.schedule,
          .compression = {.spec = c.compress, .minElements = 100}};
  PsOptions options = job.options();
  options.delay = c.delay;
  options.warmupSteps = c.warmup;
  options.delaySteps = 3;
  options.localLr = 0.05;
  options.localMomentum = 0.9;
  options.glu = 0.5;
  options.threshold = c.threshold;
  Outcome expected = replay(options, job.compression, kSteps);
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    Engine engine(t, kTensors, job.engine(options, kPushSeed), spansOf(p));
    for (int s = 0; s < kSteps; ++s) step(engine, t.rank(), s, backwardOrder(t.rank()));
    engine.drain();
    expectClose(p, expected.local[t.rank()], fmt::format("worker {}'s local model", t.rank()));
    std::vector<float> velocity = engine.optimizerState();
    expectClose(p, expected.global, "the servers' model");
    size_t at = 0;
    for (const auto& v : expected.velocity) {
      for (float x : v) ASSERT_NEAR(velocity[at++], x, 1e-5);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Strategies, DelayedSgd,
    ::testing::Values(
        DelayedCase{"odsgd", Delay::kOneStep, 2},
        DelayedCase{"odsgd_no_warmup", Delay::kOneStep, 0},
        DelayedCase{"odsgd_p3_apart", Delay::kOneStep, 1, "p3:slice=1000", 1, false},
        DelayedCase{"odsgd_topk", Delay::kOneStep, 2, "wfbp", 2, true, 0.2f, "topk:0.05"},
        DelayedCase{"ssdsgd", Delay::kSeveralSteps, 2},
        DelayedCase{"ssdsgd_qsgd", Delay::kSeveralSteps, 1, "wfbp", 1, false, 0.2f, "qsgd:8"},
        DelayedCase{"ssdsgd_fusion", Delay::kSeveralSteps, 1, "fusion:0.01", 1},
        DelayedCase{"cdsgd", Delay::kCompressed, 2},
        DelayedCase{"cdsgd_p3", Delay::kCompressed, 1, "p3:slice=5", 2, false}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace gradsync::testing
