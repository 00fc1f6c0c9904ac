// The parameter server's consistency modes against naive references.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/state_bytes.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "ps_fixture.h"
#include "schedule/schedule.h"

namespace gradsync::testing {
namespace {

// SGD with momentum on the exact average, `steps` times; also returns the velocity.
Parameters syncReference(int workers, int steps, Parameters* velocityOut = nullptr) {
  Parameters p = initialParameters();
  Parameters v = p;
  for (auto& t : v) std::fill(t.begin(), t.end(), 0.0f);
  for (int s = 0; s < steps; ++s) {
    for (size_t t = 0; t < kTensors.size(); ++t) {
      for (size_t i = 0; i < kTensors[t].elements; ++i) {
        double sum = 0;
        for (int r = 0; r < workers; ++r) sum += gradient(r, t, i, s);
        v[t][i] = static_cast<float>(kMomentum * v[t][i] + sum / workers);
        p[t][i] -= static_cast<float>(kLr * v[t][i]);
      }
    }
  }
  if (velocityOut) *velocityOut = v;
  return p;
}

using SyncParam = std::tuple<int, int, bool, std::string, TransportKind>;

class PsSync : public ::testing::TestWithParam<SyncParam> {};

// PS ssgd gives ring-allreduce ssgd's parameters (the same naive reference the ring engine is
// tested against), with 1, 2 and 3 servers, co-located or apart, whole tensors or p3 slices.
TEST_P(PsSync, MatchesSgdOnTheAverage) {
  auto [workers, servers, colocated, schedule, kind] = GetParam();
  Job job{.workers = workers,
          .servers = servers,
          .colocated = colocated,
          .kind = kind,
          .server = {.momentum = kMomentum},
          .schedule = schedule};
  constexpr int kSteps = 4;
  Parameters expectedVelocity;
  Parameters expected = syncReference(workers, kSteps, &expectedVelocity);
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    Engine engine(t, kTensors, pushing(schedule, job.options()), spansOf(p));
    for (int s = 0; s < kSteps; ++s) step(engine, t.rank(), s, backwardOrder(t.rank()));
    engine.drain();
    expectClose(p, expected, "parameters");
    std::vector<float> velocity = engine.optimizerState();
    std::vector<float> flat;
    for (const auto& v : expectedVelocity) flat.insert(flat.end(), v.begin(), v.end());
    ASSERT_EQ(velocity.size(), flat.size());
    for (size_t i = 0; i < flat.size(); ++i) ASSERT_NEAR(velocity[i], flat[i], 1e-5) << i;
    expectClose(p, expected, "parameters after velocity()");
    EXPECT_GT(engine.totals().bytesSent + (t.rank() == 0 && workers == 1), 0u);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Placements, PsSync,
    ::testing::Values(SyncParam{1, 1, true, "wfbp", TransportKind::kLoopback},
                      SyncParam{2, 2, true, "wfbp", TransportKind::kTcp},
                      SyncParam{3, 3, true, "fusion:0.01", TransportKind::kLoopback},
                      SyncParam{3, 1, false, "fifo", TransportKind::kTcp},
                      SyncParam{2, 2, false, "p3:slice=1000,window=1", TransportKind::kLoopback},
                      SyncParam{3, 3, false, "p3:slice=5", TransportKind::kTcp},
                      SyncParam{4, 2, true, "p3", TransportKind::kLoopback}),
    [](const auto& info) {
      const SyncParam& p = info.param;
      std::string name = fmt::format("{}w_{}s_{}_{}_{}", std::get<0>(p), std::get<1>(p),
                                     std::get<2>(p) ? "colocated" : "apart", std::get<3>(p),
                                     kindName(std::get<4>(p)));
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
      return name;
    });

// A synchronous round sums the pushes in worker order, not arrival order: workers that push in
// opposite orders (rank 0 first, then rank 2 first) give bitwise the same parameters. With
// three float addends, a different order rounds differently for many of the 10,000 elements.
TEST(PsSync, SumIsIndependentOfArrivalOrder) {
  Job job{.workers = 3, .servers = 1, .colocated = false, .server = {.momentum = kMomentum}};
  auto runInOrder = [&](bool ascending) {
    Parameters rank0;
    runJob(job, [&](Transport& t) {
      Parameters p = initialParameters();
      Engine engine(t, kTensors, pushing("fifo", job.options()), spansOf(p));
      const int position = ascending ? t.rank() : job.workers - 1 - t.rank();
      for (int s = 0; s < 3; ++s) {
        std::this_thread::sleep_for(std::chrono::milliseconds(40 * position));
        step(engine, t.rank(), s, backwardOrder(t.rank()));
      }
      engine.drain();
      if (t.rank() == 0) rank0 = p;
    });
    return rank0;
  };
  Parameters ascending = runInOrder(true);
  EXPECT_EQ(ascending, runInOrder(false));
  expectClose(ascending, syncReference(job.workers, 3), "parameters");
}

// Without momentum and with gradients that do not depend on the parameters, asynchronous SGD
// ends where synchronous SGD does whatever the order the server applied the pushes in (within
// a step: a barrier keeps every push within 2 (W - 1) updates of its parameters, where no
// push's learning rate is scaled down for staleness).
TEST(PsAsync, AppliesEveryPushOnce) {
  Job job{
      .workers = 3, .servers = 2, .server = {.consistency = ServerOptions::Consistency::kAsync}};
  constexpr int kSteps = 3;
  Parameters expected = initialParameters();
  for (int s = 0; s < kSteps; ++s) {
    for (size_t t = 0; t < kTensors.size(); ++t) {
      for (size_t i = 0; i < kTensors[t].elements; ++i) {
        for (int r = 0; r < job.workers; ++r) {
          expected[t][i] -= static_cast<float>(kLr / job.workers * gradient(r, t, i, s));
        }
      }
    }
  }
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    Engine engine(t, kTensors, pushing("wfbp", job.options()), spansOf(p));
    for (int s = 0; s < kSteps; ++s) {
      step(engine, t.rank(), s, backwardOrder(t.rank()));
      engine.drain();
      barrier(t);
    }
    engine.pullGlobalModel();  // the servers' final parameters
    expectClose(p, expected, "parameters", 1e-4);
  });
}

// The scenario of AStalePushIsTrustedLess, run by both tests below: worker 1 starts once worker
// 0 has made all its kStaleSteps steps, so its first push of every unit is kStaleSteps updates
// stale and its later ones are fresh. Returns each worker's parameters from the servers and its
// engine's totals.
constexpr int kStaleSteps = 4;
struct StaleRun {
  Parameters parameters;
  std::vector<StepStats> totals = std::vector<StepStats>(2);
  std::vector<Parameters> ownModels = std::vector<Parameters>(2);  // before the pull, by worker
  std::vector<float> saved;  // worker 1's own model in its engine state (a checkpoint's)
};
StaleRun runOneWorkerBehind(const Job& job) {
  StaleRun run;
  std::atomic<bool> aheadDone{false};
  std::mutex mutex;
  runJob(job, [&](Transport& t) {
    Parameters p = initialParameters();
    Engine engine(t, kTensors, pushing("wfbp", job.options()), spansOf(p));
    if (t.rank() == 1) {
      while (!aheadDone.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    for (int s = 0; s < kStaleSteps; ++s) {
      step(engine, t.rank(), s, backwardOrder(t.rank()));
      engine.drain();
    }
    if (t.rank() == 0) aheadDone = true;
    barrier(t);
    const Parameters own = p;
    std::vector<uint8_t> state = engine.saveState();
    engine.pullGlobalModel();
    std::lock_guard<std::mutex> lock(mutex);
    run.totals[static_cast<size_t>(t.rank())] = engine.totals();
    run.ownModels[static_cast<size_t>(t.rank())] = own;
    if (t.rank() == 0) run.parameters = p;
    if (t.rank() == 1) {
      StateReader in(state, "worker 1's engine state");
      in.readU64();  // the format
      in.readU64();  // the units
      in.read(run.saved);
    }
  });
  return run;
}

// A worker that falls behind while another runs ahead pushes a gradient of parameters that many
// updates old: its learning rate is scaled by 2 (W - 1) / staleness (here 2 / 4), its later,
// fresh pushes are not.
TEST(PsAsync, AStalePushIsTrustedLess) {
  Job job{
      .workers = 2, .servers = 1, .server = {.consistency = ServerOptions::Consistency::kAsync}};
  Parameters expected = initialParameters();
  for (size_t t = 0; t < kTensors.size(); ++t) {
    for (size_t i = 0; i < kTensors[t].elements; ++i) {
      for (int s = 0; s < kStaleSteps; ++s) {
        const double trust = s == 0 ? 0.5 : 1.0;  // worker 1's first push is 4 updates stale
        expected[t][i] -= static_cast<float>(kLr / 2 * gradient(0, t, i, s));
        expected[t][i] -= static_cast<float>(kLr / 2 * trust * gradient(1, t, i, s));
      }
    }
  }
  expectClose(runOneWorkerBehind(job).parameters, expected, "parameters", 1e-4);
}

// Each reply says how stale the push it answers was (PsStaleness), and the engine sums what it is
// told: worker 1's first push of each unit was kStaleSteps updates stale, every other push fresh.
TEST(PsAsync, RepliesSayHowStaleEachPushWas) {
  Job job{
      .workers = 2, .servers = 1, .server = {.consistency = ServerOptions::Consistency::kAsync}};
  const StaleRun run = runOneWorkerBehind(job);
  const uint64_t units = kTensors.size();
  EXPECT_EQ(run.totals[0].asyncPushes, kStaleSteps * units);
  EXPECT_EQ(run.totals[0].stalenessSum, 0u);
  EXPECT_EQ(run.totals[0].stalenessMax, 0u);
  EXPECT_EQ(run.totals[1].asyncPushes, kStaleSteps * units);
  EXPECT_EQ(run.totals[1].stalenessSum, kStaleSteps * units);
  EXPECT_EQ(run.totals[1].stalenessMax, static_cast<uint64_t>(kStaleSteps));
}

// asgd --compensate sc: each push's update is SC_D with D its measured staleness, on top of the
// asynchronous rule (per-push momentum m_p = max(0, m - (1 - 1/W))^(1/W), learning rate
// lr (1 - m_p) / (W (1 - m)), halved for worker 1's push that is 4 > 2 (W - 1) stale):
//   v <- m_p v + g;  w <- w - lr_p (m_p^D v + (1 - m_p^D) / (1 - m_p) g).
// The reference is computed here in doubles; without SC it would differ (checked).
// The servers' model of runOneWorkerBehind after its first `pushes` pushes of each unit (worker
// 0's kStaleSteps, then worker 1's), under asgd with momentum kMomentum, computed in doubles.
Parameters staleRunReference(bool spike, int pushes = 2 * kStaleSteps) {
  const double workers = 2;
  const double mp = std::pow(std::max(0.0, kMomentum - (1 - 1 / workers)), 1 / workers);
  const double lrPush = kLr * (1 - mp) / (workers * (1 - kMomentum));
  Parameters expected = initialParameters();
  for (size_t t = 0; t < kTensors.size(); ++t) {
    for (size_t i = 0; i < kTensors[t].elements; ++i) {
      double w = expected[t][i], v = 0;
      for (int push = 0; push < pushes; ++push) {
        const int worker = push / kStaleSteps, s = push % kStaleSteps;
        const double delay = worker == 1 && s == 0 ? kStaleSteps : 0;
        const double trust = delay > 2 * (workers - 1) ? 2 * (workers - 1) / delay : 1;
        const double g = gradient(worker, t, i, s);
        const double onVelocity = spike ? std::pow(mp, delay) : 1;
        const double onGradient = spike ? (1 - std::pow(mp, delay)) / (1 - mp) : 0;
        v = mp * v + g;
        w -= lrPush * trust * (onVelocity * v + onGradient * g);
      }
      expected[t][i] = static_cast<float>(w);
    }
  }
  return expected;
}

TEST(PsAsync, SpikeCompensationUsesEachPushsStaleness) {
  Job job{.workers = 2,
          .servers = 1,
          .server = {.consistency = ServerOptions::Consistency::kAsync,
                     .momentum = kMomentum,
                     .spikeCompensation = true}};
  const Parameters withSpike = staleRunReference(true);
  const Parameters without = staleRunReference(false);
  double largestDifference = 0;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    for (size_t i = 0; i < kTensors[t].elements; ++i) {
      largestDifference = std::max(largestDifference,
                                   std::abs(static_cast<double>(withSpike[t][i] - without[t][i])));
    }
  }
  ASSERT_GT(largestDifference, 2e-3);  // 10x the check's tolerance: it tells SC from plain
  expectClose(runOneWorkerBehind(job).parameters, withSpike, "parameters", 1e-4);
}

// asgd --compensate lwp, and sc+lwp, in the scenario above. The fixture's gradients do not depend
// on the parameters, so the servers' model is the one without LWP (and evaluations and
// checkpoints, which pull it, see exactly that), while each worker's own model is the prediction
// from its replies. Worker 1's replies reported staleness 4, 0, 0, 0, one update apart after the
// first: horizon 4, 3.5, 3.0625, 2.6796875; its direction averages the displacements w_k - w_{k-1}
// (w_k: the servers' model after k pushes) with the momentum β: d̄ = (1 - β)(w_6 - w_5) after the
// second reply, then d̄ <- β d̄ + (1 - β)(w_k - w_{k-1}) for k = 7, 8; its model is
// w_8 + 2.6796875 d̄. Worker 0's pushes were all fresh: its model is its last reply, w_4.
TEST(PsAsync, WeightPredictionTrainsOnPredictedWeightsWhileTheServersKeepTheirs) {
  for (bool spike : {false, true}) {
    SCOPED_TRACE(spike ? "sc+lwp" : "lwp");
    Job job{.workers = 2,
            .servers = 1,
            .server = {.consistency = ServerOptions::Consistency::kAsync,
                       .momentum = kMomentum,
                       .spikeCompensation = spike},
            .predictWeights = true};
    const StaleRun run = runOneWorkerBehind(job);
    const Parameters w = staleRunReference(spike);
    std::vector<Parameters> after;  // the servers' model after 5 .. 8 pushes
    for (int pushes = 5; pushes <= 2 * kStaleSteps; ++pushes) {
      after.push_back(staleRunReference(spike, pushes));
    }
    Parameters predicted = w;
    double largestPrediction = 0;
    for (size_t t = 0; t < kTensors.size(); ++t) {
      for (size_t i = 0; i < kTensors[t].elements; ++i) {
        double direction = 0;
        for (size_t k = 1; k < after.size(); ++k) {
          direction =
              kMomentum * direction + (1 - kMomentum) * (after[k][t][i] - after[k - 1][t][i]);
        }
        predicted[t][i] = static_cast<float>(w[t][i] + 2.6796875 * direction);
        largestPrediction =
            std::max(largestPrediction, std::abs(static_cast<double>(predicted[t][i] - w[t][i])));
      }
    }
    ASSERT_GT(largestPrediction, 1e-3);  // 10x the check's tolerance: w_hat is not w
    expectClose(run.parameters, w, "the servers' model (what evaluations see)", 1e-4);
    expectClose(run.ownModels[1], predicted, "worker 1's model between steps", 1e-4);
    expectClose(run.ownModels[0], staleRunReference(spike, kStaleSteps), "worker 0's model", 1e-4);
    std::vector<size_t> elements;
    for (const TensorShape& tensor : kTensors) elements.push_back(tensor.elements);
    const GradientLayout layout = planLayout(elements, ScheduleSpec::parse("wfbp"));
    ASSERT_EQ(run.saved.size(), layout.totalElements);
    const std::vector<float> saved = layoutToTensors(layout, kTensors, run.saved);  // by tensor
    std::vector<float> flat;
    for (const auto& tensor : w) flat.insert(flat.end(), tensor.begin(), tensor.end());
    ASSERT_EQ(saved.size(), flat.size());
    for (size_t i = 0; i < flat.size(); ++i) {
      ASSERT_NEAR(saved[i], flat[i], 1e-4 * (1 + std::fabs(flat[i])))
          << "the checkpoint's own model holds the last reply, not the prediction: " << i;
    }
  }
}

// ssp:S, with one worker slowed down: whenever a worker starts a step, the slowest has ended
// at least (that step - S) steps; and the fast ones do run ahead (the bound is what stops them).
TEST(PsStale, NoWorkerRunsMoreThanSStepsAhead) {
  for (int staleness : {0, 2}) {
    Job job{.workers = 3,
            .servers = 2,
            .server = {.consistency = ServerOptions::Consistency::kStale, .staleness = staleness}};
    constexpr int kSteps = 12;
    std::atomic<int> slowEnded{0};
    std::atomic<int> largestLead{0};
    runJob(job, [&](Transport& t) {
      Parameters p = initialParameters();
      Engine engine(t, kTensors, pushing("wfbp", job.options()), spansOf(p));
      const bool slow = t.rank() == job.workers - 1;
      for (int s = 0; s < kSteps; ++s) {
        for (size_t i = 0; i < kTensors.size(); ++i) engine.waitFor(static_cast<int>(i));
        if (slow) {
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          ++slowEnded;  // before its first push of the step can reach a server
        } else {
          int lead = s - slowEnded.load();
          EXPECT_LE(lead, staleness) << "worker " << t.rank() << " at step " << s;
          int seen = largestLead.load();
          while (lead > seen && !largestLead.compare_exchange_weak(seen, lead)) {
          }
        }
        step(engine, t.rank(), s, backwardOrder(t.rank()));
      }
      engine.drain();
    });
    // The fast workers do run ahead (on a loaded machine perhaps not all the way to S).
    if (staleness > 0) {
      EXPECT_GE(largestLead.load(), 1) << "the fast workers never ran ahead";
    }
  }
}

// A separate server process that disappears fails every worker with an error naming it.
TEST(PsFailure, LostServerIsNamed) {
  Job job{.workers = 2, .servers = 2, .colocated = false, .kind = TransportKind::kTcp};
  TransportOptions transport;
  transport.timeout = std::chrono::milliseconds(5000);
  runWithTransports(
      job.kind, job.placement().worldSize(),
      [&](Transport& t) {
        if (t.rank() == 3) return;  // server 1 leaves at once
        if (t.rank() == 2) {
          ParameterServer server(t, job.placement(), 0,
                                 servedUnits(kTensors, ScheduleSpec::parse("wfbp"), {}),
                                 job.server);
          try {
            server.wait();  // the workers stop it, or it sees them leave
          } catch (const Error&) {
          }
          return;
        }
        Parameters p = initialParameters();
        Engine engine(t, kTensors, pushing("wfbp", job.options()), spansOf(p));
        try {
          for (int s = 0; s < 3; ++s) step(engine, t.rank(), s, backwardOrder(t.rank()));
          engine.drain();
          FAIL() << "expected the lost server to surface";
        } catch (const Error& e) {
          // Which server the worker was talking to when it heard depends on timing; the lost
          // rank, and which ranks are servers, are always named.
          std::string what = e.what();
          EXPECT_NE(what.find("rank 3"), std::string::npos) << what;
          EXPECT_NE(what.find("ranks 2..3 are parameter servers 0..1"), std::string::npos) << what;
        }
      },
      transport);
}

TEST(PsWorker, RefusesMoreColocatedServersThanWorkers) {
  runWithTransports(TransportKind::kLoopback, 2, [&](Transport& t) {
    Parameters p = initialParameters();
    PsOptions options{.placement = {.workers = 2, .servers = 3}};
    EXPECT_THROW(Engine(t, kTensors, pushing("wfbp", options), spansOf(p)), ConfigError);
  });
}

}  // namespace
}  // namespace gradsync::testing
