// The engine's overhead per tensor per step: an Engine over the ring on the tensors of a model
// (resnet20 by default, the model with the most tensors), ranks as threads over loopback,
// against the same allreduces called directly in the same order. The difference is what the
// engine adds (slots, readiness, the communication thread's hand-offs, statistics), divided by
// the number of tensors. No compute: every gradient is ready at once, so the figure is the
// engine's cost, not an overlap.
//
//   engine_overhead [--model resnet20] [--workers 2] [--steps 300] [--schedule wfbp]
//
// Prints one JSON object (docs/performance.md, "Engine overhead").
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/rank_threads.h"
#include "gradsync/clock.h"
#include "gradsync/collectives.h"
#include "gradsync/loopback.h"
#include "sync/engine.h"
#include "torch/train/trainer.h"

namespace gradsync {
namespace {

struct Options {
  std::string model = "resnet20";
  int workers = 2;
  int steps = 300;
  std::string schedule = "wfbp";
};

// Milliseconds per step on rank 0, `body(transport, gradients)` being one step.
template <typename Body>
double msPerStep(const Options& options, const std::vector<TensorShape>& tensors, Body body) {
  LoopbackFabric fabric(options.workers);
  double seconds = 0;
  runRankThreads(options.workers, [&](int rank) {
    auto transport = fabric.connect(rank);
    std::vector<std::vector<float>> gradients;
    for (const TensorShape& t : tensors) gradients.emplace_back(t.elements, 1.0f + rank);
    auto step = body(*transport, gradients);
    for (int i = 0; i < options.steps / 10; ++i) step();  // warm-up
    barrier(*transport);
    const SteadyClock& clock = SteadyClock::instance();
    const Nanos start = clock.now();
    for (int i = 0; i < options.steps; ++i) step();
    if (rank == 0) seconds = secondsSince(clock, start);
    return 0;
  });
  return seconds * 1e3 / options.steps;
}

int run(const Options& options) {
  const std::vector<TensorShape> tensors = describeModel(options.model);
  size_t elements = 0;
  for (const TensorShape& t : tensors) elements += t.elements;

  // Backward produces gradients from the last layer to the first: both runs go in that order.
  double direct = msPerStep(options, tensors, [&](Transport& transport, auto& gradients) {
    return [&] {
      for (size_t t = gradients.size(); t-- > 0;) {
        allreduce(transport, gradients[t], ReduceOp::kAverage);
      }
    };
  });
  double engine = msPerStep(options, tensors, [&](Transport& transport, auto& gradients) {
    auto engine = std::make_shared<Engine>(
        transport, tensors, EngineOptions{.schedule = ScheduleSpec::parse(options.schedule)});
    return [engine, &gradients] {
      for (size_t t = gradients.size(); t-- > 0;) {
        std::span<float> slot = engine->slot(static_cast<int>(t));
        std::memcpy(slot.data(), gradients[t].data(), slot.size_bytes());
        engine->markReady(static_cast<int>(t));
      }
      engine->finishStep();
    };
  });
  std::printf(
      "{\"model\": \"%s\", \"tensors\": %zu, \"elements\": %zu, \"workers\": %d, \"schedule\": "
      "\"%s\", \"steps\": %d, \"direct_ms_per_step\": %.3f, \"engine_ms_per_step\": %.3f, "
      "\"overhead_us_per_tensor\": %.2f}\n",
      options.model.c_str(), tensors.size(), elements, options.workers, options.schedule.c_str(),
      options.steps, direct, engine, (engine - direct) * 1e3 / static_cast<double>(tensors.size()));
  return 0;
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  gradsync::Options options;
  CLI::App app("The gradient engine's overhead per tensor per step");
  app.add_option("--model", options.model, "model whose tensors to use")->capture_default_str();
  app.add_option("--workers", options.workers, "ranks (threads)")->capture_default_str();
  app.add_option("--steps", options.steps, "timed steps")->capture_default_str();
  app.add_option("--schedule", options.schedule, "fifo, wfbp or fusion")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return gradsync::run(options);
}
