// The compression guardrail on pushes to parameter servers (compress/guard.h, ps/worker_client.h)
// against a naive reference. Each worker decides alone, from its own pushes: the reference
// replays every worker's encodings (the method's own codec, error feedback as the contract says),
// measures the three signals on the first step of each window of 10, counts the windows past a
// threshold per unit and makes a unit dense after 3 in a row; it then sums what every worker
// pushed (encoded, or dense once its guard acted) and applies the servers' SGD with momentum.
//
// The gradients are independent noise per step, as minibatch noise is: randomk:0.01 with error
// feedback then sends sums of many old gradients at random positions, nearly orthogonal to the
// step's gradient (docs/algorithms.md, "The compression guardrail"), which trips the alignment
// signal; fp16 sends the gradient itself and never trips.
#include <gtest/gtest.h>

#include <map>
#include <utility>

#include <fmt/format.h>

#include "common/random.h"
#include "compress/guard.h"
#include "ps_fixture.h"
#include "push_reference.h"

namespace gradsync::testing {
namespace {

constexpr int kGuardSteps = 50;  // five windows: a unit past a threshold from the start trips at 30
const GuardOptions kGuard{};     // the engine's thresholds

// Uniform in [-0.5, 0.5), independent across ranks, tensors, elements and steps.
float noise(int rank, size_t tensor, size_t i, int step) {
  uint64_t h = rng::mixSeed(rng::mixSeed(static_cast<uint64_t>(rank) + 1, tensor), i);
  h = rng::mixSeed(h, static_cast<uint64_t>(step));
  return static_cast<float>(h >> 40) / static_cast<float>(uint64_t{1} << 24) - 0.5f;
}

CompressionConfig compressionOf(const std::string& spec, bool guard = true) {
  return {.spec = spec, .minElements = 100, .guard = guard};
}

using DenseFrom = std::map<size_t, int64_t>;  // unit -> the first step pushed dense

// One worker's units as its guard sees them: the decision of the naive reference.
struct WorkerReference {
  std::vector<std::unique_ptr<Compressor>> methods;  // by unit; null: dense
  std::vector<std::vector<float>> residuals;         // by unit
  std::vector<int> overWindows;                      // by unit
  std::vector<bool> pastInSample;                    // by unit: the window's measured step
  std::vector<bool> sampled;                         // by unit: measured in this window
  DenseFrom denseFrom;
};

struct GuardReference {
  Parameters parameters;
  std::vector<DenseFrom> denseFrom;  // by worker
};

bool pastThreshold(std::span<const float> g, std::span<const float> sent,
                   std::span<const float> residual) {
  const double gradNorm = l2Norm(g), sentNorm = l2Norm(sent);
  const double residualRatio = residual.empty() ? -1 : l2Norm(residual) / gradNorm;
  const double misalignment = 1 - dotProduct(sent, g) / (gradNorm * sentNorm);
  return residualRatio > kGuard.residualRatio || sentNorm / gradNorm > kGuard.sentRatio ||
         misalignment > kGuard.misalignment;
}

// What worker `r` pushes for unit u at step s, updating its reference state.
std::vector<float> push(WorkerReference& w, size_t u, std::vector<float> g, int s, int r,
                        bool guarded) {
  const bool dense = w.denseFrom.count(u) != 0 && s >= w.denseFrom.at(u);
  if (!w.methods[u] || dense) return g;
  std::vector<float>& residual = w.residuals[u];
  std::vector<float> x = g;
  for (size_t i = 0; i < x.size(); ++i) x[i] += residual[i];
  std::vector<float> decoded = decodedPush(*w.methods[u], x, kPushSeed, s, r);
  for (size_t i = 0; i < x.size(); ++i) residual[i] = x[i] - decoded[i];
  if (guarded && s % kGuard.windowSteps == 0) {
    w.sampled[u] = true;
    w.pastInSample[u] = pastThreshold(g, decoded, residual);
  }
  return decoded;
}

// At the end of the window closing after step `ended - 1`: counts and decides, per unit.
void decide(WorkerReference& w, int ended) {
  for (size_t u = 0; u < w.methods.size(); ++u) {
    const bool past = w.sampled[u] && w.pastInSample[u];
    w.overWindows[u] = past ? w.overWindows[u] + 1 : 0;
    if (w.overWindows[u] >= kGuard.windowsToConfirm && w.denseFrom.count(u) == 0)
      w.denseFrom[u] = ended;
    w.sampled[u] = false;
  }
}

// `guarded`: whether workers run the guard. Error feedback is on (randomk's default, checked).
GuardReference reference(const Job& job, int steps, bool guarded) {
  CompressionPlan plan = planCompression(job.compression, kTensors, 0.0);
  GradientLayout layout = planLayout(kTensors, ScheduleSpec::parse(job.schedule), plan.groups());
  std::vector<WorkerReference> workers(job.workers);
  for (WorkerReference& w : workers) {
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const CompressSpec& spec = plan.perTensor[layout.units[u].tensors.front()];
      EXPECT_TRUE(spec.dense() || spec.errorFeedback);
      std::vector<TensorShape> shapes = unitShapes(layout, u, kTensors);
      w.methods.push_back(spec.dense() ? nullptr : findMethod(spec.method).make(spec.args, shapes));
      w.residuals.emplace_back(layout.units[u].elements, 0.0f);
    }
    w.overWindows.assign(layout.units.size(), 0);
    w.pastInSample.assign(layout.units.size(), false);
    w.sampled.assign(layout.units.size(), false);
  }
  std::vector<float> p(layout.totalElements), v(layout.totalElements, 0.0f);
  Parameters initial = initialParameters();
  for (size_t t = 0; t < kTensors.size(); ++t)
    std::copy(initial[t].begin(), initial[t].end(), p.begin() + layout.offsetOf[t]);
  for (int s = 0; s < steps; ++s) {
    for (size_t u = 0; u < layout.units.size(); ++u) {
      const CommUnit& unit = layout.units[u];
      std::vector<float> sum(unit.elements, 0.0f);
      for (int r = 0; r < job.workers; ++r) {
        std::vector<float> g(unit.elements);
        for (int t : unit.tensors) {
          for (size_t i = 0; i < kTensors[t].elements; ++i)
            g[layout.offsetOf[t] - unit.offset + i] = noise(r, t, i, s);
        }
        std::vector<float> pushed = push(workers[r], u, std::move(g), s, r, guarded);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += pushed[i];
      }
      for (size_t i = 0; i < unit.elements; ++i) {
        float& velocity = v[unit.offset + i];
        velocity = static_cast<float>(kMomentum) * velocity +
                   sum[i] * (1.0f / static_cast<float>(job.workers));
        p[unit.offset + i] -= static_cast<float>(kLr) * velocity;
      }
    }
    if (guarded && (s + 1) % kGuard.windowSteps == 0) {
      for (WorkerReference& w : workers) decide(w, s + 1);
    }
  }
  GuardReference out{initial, {}};
  for (size_t t = 0; t < kTensors.size(); ++t)
    std::copy_n(p.begin() + layout.offsetOf[t], kTensors[t].elements, out.parameters[t].begin());
  for (const WorkerReference& w : workers) out.denseFrom.push_back(w.denseFrom);
  return out;
}

// A training step with the noise gradients, as the fixture's step() drives the engine.
void noisyStep(Engine& engine, int rank, int s) {
  for (size_t t = 0; t < kTensors.size(); ++t) engine.waitFor(static_cast<int>(t));
  for (int t : backwardOrder(rank)) {
    std::span<float> slot = engine.slot(t);
    for (size_t i = 0; i < slot.size(); ++i) slot[i] = noise(rank, t, i, s);
    engine.markReady(t);
  }
  engine.endBackward();
}

struct Trained {
  std::vector<Parameters> parameters;           // by worker
  std::vector<std::vector<GuardEvent>> events;  // by worker
};

Trained train(const Job& job, int steps) {
  Trained run{std::vector<Parameters>(job.workers),
              std::vector<std::vector<GuardEvent>>(job.workers)};
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    Engine engine(t, kTensors, job.engine(job.options(), kPushSeed), spansOf(p));
    for (int s = 0; s < steps; ++s) noisyStep(engine, t.rank(), s);
    engine.drain();
    run.parameters[t.rank()] = p;
    run.events[t.rank()] = engine.guardEvents();
  });
  return run;
}

// The unit holding fc.weight (10,010 elements, of which randomk:0.01 sends 100).
size_t fcWeightUnit(const Job& job) {
  CompressionPlan plan = planCompression(job.compression, kTensors, 0.0);
  return planLayout(kTensors, ScheduleSpec::parse(job.schedule), plan.groups()).unitOf[3];
}

struct GuardCase {
  int workers = 2;
  int servers = 1;
  bool colocated = true;
  ServerOptions::Consistency consistency = ServerOptions::Consistency::kSync;

  friend void PrintTo(const GuardCase& c, std::ostream* os) {
    *os << c.workers << " workers, " << c.servers << " servers";
  }
};

class PsGuard : public ::testing::TestWithParam<GuardCase> {
 protected:
  Job job(const std::string& method, bool guard = true) const {
    const GuardCase& c = GetParam();
    return Job{.workers = c.workers,
               .servers = c.servers,
               .colocated = c.colocated,
               .server = {.consistency = c.consistency, .momentum = kMomentum},
               .compression = compressionOf(method, guard)};
  }
  bool synchronous() const { return GetParam().consistency == ServerOptions::Consistency::kSync; }
};

// randomk:0.01's pushes go dense on each worker when that worker's own signals say so (the
// reference's decisions, which depend on nothing but its own gradients), from then on without
// the residual; the servers sum encoded and dense pushes as the reference does.
TEST_P(PsGuard, HarmfulPushesGoDenseOnTheWorkerAndTheServersSumWhatWasPushed) {
  const Job guarded = job("randomk:0.01");
  const GuardReference expected = reference(guarded, kGuardSteps, true);
  const Trained run = train(guarded, kGuardSteps);
  const size_t fc = fcWeightUnit(guarded);
  for (int r = 0; r < guarded.workers; ++r) {
    // The premise: fc.weight trips after 3 windows at the earliest.
    ASSERT_EQ(expected.denseFrom[r].count(fc), 1u) << "worker " << r;
    EXPECT_GE(expected.denseFrom[r].at(fc), 30);
    DenseFrom actual;
    for (const GuardEvent& e : run.events[r]) {
      actual[e.unit] = e.step;
      EXPECT_EQ(e.rank, r);
      EXPECT_EQ(e.method, "randomk:0.01");
      if (e.unit == fc) {
        EXPECT_EQ(e.signal, "alignment") << e.reason;
        EXPECT_LT(e.ratio, 1 - kGuard.misalignment);
        EXPECT_NE(e.reason.find(fmt::format("in rank {}'s pushes", r)), std::string::npos)
            << e.reason;
      }
    }
    EXPECT_EQ(actual, expected.denseFrom[r]) << "worker " << r;
    if (synchronous()) {
      expectClose(run.parameters[r], expected.parameters, fmt::format("worker {}", r),
                  kPushTolerance);
    }
  }
  if (!synchronous()) return;
  // Pushing on compressed (what the guard prevents) must miss the reference, or this test could
  // not tell dense pushes from encoded ones.
  const Parameters unguarded = reference(guarded, kGuardSteps, false).parameters;
  size_t missed = 0;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    for (size_t i = 0; i < kTensors[t].elements; ++i) {
      missed += std::fabs(unguarded[t][i] - expected.parameters[t][i]) >
                kPushTolerance * (1 + std::fabs(expected.parameters[t][i]));
    }
  }
  EXPECT_GT(missed, 0u);
}

// --guard off: no guard, every push encoded as before (the reference without a guard).
TEST_P(PsGuard, OffPushesEveryStepEncoded) {
  const Job off = job("randomk:0.01", false);
  const Parameters expected = reference(off, kGuardSteps, false).parameters;
  const Trained run = train(off, kGuardSteps);
  for (int r = 0; r < off.workers; ++r) {
    EXPECT_TRUE(run.events[r].empty());
    // Asynchronous servers apply pushes in arrival order: no reference to compare with.
    if (synchronous())
      expectClose(run.parameters[r], expected, fmt::format("worker {}", r), kPushTolerance);
  }
}

// A method that works never trips, and a guard that does not act changes no bit.
TEST_P(PsGuard, AHealthyMethodNeverTripsAndChangesNoBit) {
  const Trained on = train(job("fp16"), kGuardSteps);
  const Trained off = train(job("fp16", false), kGuardSteps);
  for (int r = 0; r < GetParam().workers; ++r) {
    EXPECT_TRUE(on.events[r].empty()) << on.events[r].front().reason;
    if (synchronous()) {
      EXPECT_EQ(on.parameters[r], off.parameters[r]) << "worker " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Placements, PsGuard,
    ::testing::Values(GuardCase{}, GuardCase{3, 2, false},
                      GuardCase{2, 1, true, ServerOptions::Consistency::kAsync}),
    [](const auto& info) {
      const GuardCase& c = info.param;
      return fmt::format("{}w_{}s_{}_{}", c.workers, c.servers, c.colocated ? "colocated" : "apart",
                         c.consistency == ServerOptions::Consistency::kSync ? "sync" : "async");
    });

}  // namespace
}  // namespace gradsync::testing
