#include "train_pipeline.h"

#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "gradsync/error.h"
#include "torch/loop/metrics.h"
#include "torch/pipeline/pipeline.h"

namespace gradsync {
namespace {

void printSummary(const TrainOptions& options, int ranks, const TrainResult& result) {
  const StepProfile& p = result.perStep;
  std::printf(
      "gradsync train: %s on %s, pipeline of %d stages (%s), %d rank%s, %lld steps in %.1f s: "
      "test accuracy %.2f%%, %.0f samples/s, step %.1f ms (compute %.1f, waiting for "
      "neighbours %.1f)\n",
      options.model.c_str(), options.dataset.c_str(), options.pipeline.stages,
      options.pipeline.mode.c_str(), ranks, ranks == 1 ? "" : "s",
      static_cast<long long>(result.steps), result.seconds, 100 * result.finalTestAccuracy,
      result.samplesPerSecond, p.stepMs, p.computeMs, p.exposedCommMs);
  if (!result.placement.empty()) {  // pinned: where each rank's thread ended
    std::string cores;
    for (const RankPlacement& r : result.placement)
      cores += fmt::format(" {}:{}", r.rank, fmt::join(r.affinity, ","));
    const int waves = ranks / options.pipeline.stages;
    const std::string placement =
        waves == 1 ? std::string("1 wave, stage j on device j")
                   : fmt::format("{} waves, {} placement", waves, options.pipeline.wavePlacement);
    std::printf("gradsync train: %s; rank:cpus at the end%s\n", placement.c_str(), cores.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

void addPipelineFlags(CLI::App* train, PipelineOptions& o) {
  train->add_option("--pipeline", o.stages, "split the model into S pipeline stages (0: off)")
      ->capture_default_str();
  train->add_option("--pipeline-mode", o.mode, "fill-drain (GPipe) | pb (pipelined backprop)")
      ->capture_default_str();
  train->add_option("--micro-batches", o.microBatches, "fill-drain: micro-batches per step")
      ->capture_default_str();
  train->add_flag("--weight-stash", o.weightStash, "a backward runs on its forward's weights");
  train
      ->add_option("--compensate", o.compensate,
                   "pb's delay compensation: none | sc | lwp | sc+lwp; without --pipeline, "
                   "asgd's and ssp's (sc: the servers', lwp: the workers')")
      ->capture_default_str();
  train->add_flag("--lwp-backward", o.lwpBackward,
                  "lwp: the backward on the predicted weights too");
  train->add_option("--stage-layers", o.stageLayers, "layers per stage by hand, e.g. 3,4,2,2");
  train->add_option("--stage-profile", o.stageProfile,
                    "balance the stages with a `gradsync profile` JSON");
  train->add_option("--reference-batch", o.referenceBatch,
                    "--lr/--momentum are a recipe for this batch, scaled to --batch-size");
  train->add_flag("--pipeline-emulate", o.emulate, "run every stage in this process (one thread)");
  train
      ->add_option("--wave-placement", o.wavePlacement,
                   "--pipeline --waves K: wave w's stage j on device (j + w) mod S (rotated, "
                   "Wavelet) or on device j (same)")
      ->capture_default_str();
  train->add_flag("--pin-devices", o.pinDevices,
                  "pin each stage rank to its device's core (device d: core d mod n); implied by "
                  "--waves K >= 2 with --pipeline");
}

void addPipelineSettings(const PipelineOptions& o, Settings& settings) {
  auto text = [](auto value) { return fmt::format("{}", value); };
  settings.insert(settings.end(), {{"--pipeline", text(o.stages)},
                                   {"--pipeline-mode", o.mode},
                                   {"--micro-batches", text(o.microBatches)},
                                   {"--weight-stash", text(o.weightStash)},
                                   {"--compensate", o.compensate},
                                   {"--lwp-backward", text(o.lwpBackward)},
                                   {"--stage-layers", o.stageLayers},
                                   {"--stage-profile", o.stageProfile},
                                   {"--reference-batch", text(o.referenceBatch)},
                                   {"--wave-placement", o.wavePlacement},
                                   {"--pin-devices", text(o.pinDevices)}});
}

int runPipelineCommand(RankFlags ranks, bool workersGiven, const CommandContext& context,
                       const TrainOptions& options, const Settings& settings) {
  if (options.pipeline.emulate) {
    if (!options.quiet)
      std::printf("pipeline (emulated): %s\n", describePipeline(options, 0).c_str());
    limitComputeThreads(options.threads);
    TrainResult result = emulatePipeline(options);
    if (!options.metricsPath.empty()) writeMetrics(options.metricsPath, options, 1, result);
    printSummary(options, 1, result);
    return 0;
  }
  // Model-parallel Wavelet: the waves are whole pipelines (planPipeline refuses other --workers).
  if (!workersGiven) ranks.workers = options.pipeline.stages * options.waves;
  const std::string plan = describePipeline(options, ranks.workers);  // ConfigError before launch
  return runRanks(ranks, context.env, context.argv, settings, [&](Transport& t) {
    if (t.rank() == 0 && !options.quiet) {
      std::printf("pipeline: %s\n", plan.c_str());
      std::fflush(stdout);  // every rank connected: a supervisor may watch for this line
    }
    TrainResult result = runPipelineTraining(t, options);
    if (t.rank() == 0) {
      if (!options.metricsPath.empty())
        writeMetrics(options.metricsPath, options, t.size(), result);
      printSummary(options, t.size(), result);
    }
    return 0;
  });
}

}  // namespace gradsync
