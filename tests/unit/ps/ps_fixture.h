// Shared by the parameter-server tests: a small model, per-rank gradients that do not depend on
// the parameters (so a naive reference can replay any strategy), and a job of worker threads
// with co-located or separate server threads.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/tensor_shape.h"
#include "ps/parameter_server.h"
#include "support/transports.h"
#include "sync/engine.h"

namespace gradsync::testing {

// Sizes 0, 1, a non-divisible matrix cut into row slices, and a larger tensor.
inline const std::vector<TensorShape> kTensors = {
    tensorShape("conv.weight", {7, 3, 3, 3}), tensorShape("conv.bias", {1}),
    tensorShape("empty", {0}), tensorShape("fc.weight", {10, 1001}), tensorShape("fc.bias", {10})};
inline constexpr double kLr = 0.1;
inline constexpr double kMomentum = 0.9;  // the servers' (and references') momentum

inline float gradient(int rank, size_t tensor, size_t i, int step) {
  return std::sin(static_cast<float>(i + 31 * tensor + 7 * rank + 13 * step)) / 4;
}

inline float initial(size_t tensor, size_t i) {
  return std::cos(static_cast<float>(i + 3 * tensor));
}

using Parameters = std::vector<std::vector<float>>;  // by tensor

inline Parameters initialParameters() {
  Parameters p;
  for (size_t t = 0; t < kTensors.size(); ++t) {
    p.emplace_back(kTensors[t].elements);
    for (size_t i = 0; i < kTensors[t].elements; ++i) p[t][i] = initial(t, i);
  }
  return p;
}

inline std::vector<std::span<float>> spansOf(Parameters& p) {
  return {p.begin(), p.end()};
}

inline void expectClose(const Parameters& actual, const Parameters& expected,
                        const std::string& what, double tolerance = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t t = 0; t < actual.size(); ++t) {
    ASSERT_EQ(actual[t].size(), expected[t].size());
    for (size_t i = 0; i < actual[t].size(); ++i) {
      ASSERT_NEAR(actual[t][i], expected[t][i], tolerance * (1 + std::fabs(expected[t][i])))
          << what << ": " << kTensors[t].name << "[" << i << "]";
    }
  }
}

struct Job {
  int workers = 2;
  int servers = 1;
  bool colocated = true;
  TransportKind kind = TransportKind::kLoopback;
  ServerOptions server;
  std::string schedule = "wfbp";
  CompressionConfig compression;  // pushes' compression (default: dense)
  bool predictWeights = false;    // the workers' LWP (asgd, ssp)

  PsPlacement placement() const { return {workers, servers, colocated}; }
  PsOptions options() const {
    return {.placement = placement(), .server = server, .predictWeights = predictWeights};
  }
  // A worker's engine: pushes to the job's servers as `ps` says, with its schedule and
  // compression.
  EngineOptions engine(const PsOptions& ps, uint64_t seed = 0) const;
  EngineOptions engine() const { return engine(options()); }
};

// A worker's engine pushing to servers as `ps` says, the servers applying SGD with kLr.
inline EngineOptions pushing(const std::string& schedule, const PsOptions& ps,
                             const CompressionConfig& compression = {}, uint64_t seed = 0) {
  return {.schedule = ScheduleSpec::parse(schedule),
          .compression = compression,
          .update = UpdateRule::sgd(kLr),
          .seed = seed,
          .servers = ps};
}

inline EngineOptions Job::engine(const PsOptions& ps, uint64_t seed) const {
  return pushing(schedule, ps, compression, seed);
}

// Runs worker(transport) on the workers' threads; separate servers serve until they stop.
inline void runJob(const Job& job, const std::function<void(Transport&)>& worker,
                   TransportOptions transport = {}) {
  PsPlacement placement = job.placement();
  runWithTransports(
      job.kind, placement.worldSize(),
      [&](Transport& t) {
        if (t.rank() < job.workers) return worker(t);
        ParameterServer server(
            t, placement, t.rank() - job.workers,
            servedUnits(kTensors, ScheduleSpec::parse(job.schedule), job.compression), job.server);
        server.wait();
      },
      transport);
}

// One training step as the trainer drives it: the forward waits for each tensor (input layer
// first), then backward produces the gradients (here in `order`), then the step ends.
inline void step(Engine& engine, int rank, int stepIndex, const std::vector<int>& order) {
  for (size_t t = 0; t < kTensors.size(); ++t) engine.waitFor(static_cast<int>(t));
  for (int t : order) {
    std::span<float> slot = engine.slot(t);
    for (size_t i = 0; i < slot.size(); ++i) slot[i] = gradient(rank, t, i, stepIndex);
    engine.markReady(t);
  }
  engine.endBackward();
}

inline std::vector<int> backwardOrder(int rank) {
  return rank % 2 == 0 ? std::vector<int>{4, 3, 2, 1, 0} : std::vector<int>{1, 4, 0, 3, 2};
}

}  // namespace gradsync::testing
