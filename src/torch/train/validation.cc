// `gradsync train`'s options checked before any work starts (torch/train/trainer.h), for every
// trainer: the pipeline, elastic and recommendation trainers check theirs here too.
#include <string>
#include <utility>

#include <fmt/format.h>

#include "gradsync/error.h"
#include "torch/api/sync_setup.h"
#include "torch/loop/data_source.h"
#include "torch/models/gpt_config.h"
#include "torch/models/models.h"
#include "torch/train/trainer.h"
#include "torch/waves/wavelet_trainer.h"

namespace gradsync {

namespace {

// --data-url and its companions (torch/loop/remote_data_source.h).
void validateDataUrl(const TrainOptions& options) {
  if (options.dataUrl.empty()) return;
  if (!options.dataUrl.starts_with("http://") && !options.dataUrl.starts_with("https://")) {
    throw ConfigError(
        fmt::format("--data-url '{}' is not an http:// or https:// URL", options.dataUrl));
  }
  if (options.dataset != "fashion-mnist") {
    throw ConfigError(
        fmt::format("--data-url serves image shards: it replaces --dataset fashion-mnist, not {}",
                    options.dataset));
  }
  if (options.pipeline.stages > 1 || !options.elastic.empty()) {
    throw ConfigError("--data-url is not supported with --pipeline or --elastic",
                      {.hint = "they read the dataset from --data-dir"});
  }
  if (!(options.cacheMemoryMiB >= 0)) throw ConfigError("--cache-memory must be >= 0 MiB");
}

// Flags that only --pipeline reads are refused without it, rather than silently ignored.
void validatePipelineOnlyFlags(const TrainOptions& options) {
  const PipelineOptions& p = options.pipeline;
  if (p.lwpBackward && (!p.enabled() || p.compensate.find("lwp") == std::string::npos)) {
    throw ConfigError("--lwp-backward needs --pipeline with --compensate lwp or sc+lwp",
                      {.hint = "under asgd and ssp:S, lwp already runs the forward and the "
                               "backward on the predicted weights"});
  }
  if (p.enabled()) return;
  const std::pair<bool, const char*> pipelineOnly[] = {
      {p.weightStash, "--weight-stash"},
      {p.microBatches != 1, "--micro-batches"},
      {!p.stageLayers.empty(), "--stage-layers"},
      {!p.stageProfile.empty(), "--stage-profile"},
      {p.emulate, "--pipeline-emulate"},
      {p.referenceBatch > 0, "--reference-batch"},
      {p.mode != PipelineOptions{}.mode, "--pipeline-mode"},
      {p.pinDevices, "--pin-devices"},
      {p.wavePlacement != PipelineOptions{}.wavePlacement, "--wave-placement"}};
  for (const auto& [given, flag] : pipelineOnly) {
    if (given) throw ConfigError(fmt::format("{} applies to --pipeline S only", flag));
  }
}

// The data-parallel and the elastic trainers alone train gpt and step AdamW, a schedule or
// clipping: the pipeline and Wavelet's waves step FusedSGD at a fixed rate, and the parameter
// servers apply SGD.
const char* otherTrainer(const TrainOptions& options) {
  if (options.pipeline.enabled()) return "--pipeline";
  if (options.waves > 1) return "--waves";
  return nullptr;
}

// --model gpt with --dataset text, and the optimizer's flags.
void validateLanguageModel(const TrainOptions& options) {
  const bool gpt = parseGptModel(options.model).has_value();
  if (gpt != isTextDataset(options.dataset)) {
    throw ConfigError(
        gpt ? fmt::format("--model gpt trains on text, not --dataset {}", options.dataset)
            : fmt::format("--dataset {} is text, for --model gpt, not {}", options.dataset,
                          options.model),
        {.hint = "--model gpt --dataset text (Debian's fortunes) or text:PATH"});
  }
  if (gpt && (emulatesCompute(options) || !options.dataUrl.empty())) {
    throw ConfigError("--model gpt computes on this host from local text",
                      {.hint = "drop --compute emulate:... and --data-url"});
  }
  if (options.optimizer != "sgd" && options.optimizer != "adamw" && options.optimizer != "sign") {
    throw ConfigError(fmt::format("unknown --optimizer '{}'", options.optimizer),
                      {.hint = "choose sgd, adamw or sign"});
  }
  if (options.lrSchedule != "constant" && options.lrSchedule != "cosine") {
    throw ConfigError(fmt::format("unknown --lr-schedule '{}'", options.lrSchedule),
                      {.hint = "choose constant or cosine"});
  }
  if (options.warmupSteps < 0) throw ConfigError("--warmup-steps must be >= 0");
  if (!(options.clipGradNorm >= 0)) throw ConfigError("--clip-grad-norm must be >= 0");
  if (!(options.weightDecay >= 0)) throw ConfigError("--weight-decay must be >= 0");
  const bool torchOptimizer = options.optimizer != "sgd";  // adamw or sign
  const bool stepsItself =
      options.warmupSteps > 0 || options.lrSchedule != "constant" || options.clipGradNorm > 0;
  if (!gpt && !torchOptimizer && !stepsItself) return;
  const std::string what = gpt              ? "--model gpt"
                           : torchOptimizer ? "--optimizer " + options.optimizer
                                            : "a learning-rate schedule or clipping";
  if (const char* other = otherTrainer(options)) {
    throw ConfigError(fmt::format("{} is not supported with {}", what, other),
                      {.hint = "the data-parallel trainer runs it"});
  }
  const SyncStrategy strategy = SyncStrategy::parse(options.sync);
  if (torchOptimizer && (strategy.needsServers() || options.strategy.ps)) {
    throw ConfigError(
        fmt::format("--optimizer {} with --sync {}{}: the parameter servers "
                    "apply SGD",
                    options.optimizer, options.sync, options.strategy.ps ? " --ps" : ""),
        {.hint = "use the ring (ssgd, sharded, localsgd)"});
  }
  if (stepsItself && updatesInEngine(syncOptionsOf(options))) {
    throw ConfigError(
        fmt::format("--warmup-steps, --lr-schedule and --clip-grad-norm need the optimizer to "
                    "step, and with --schedule {} --sync {} the engine applies the update",
                    options.schedule, options.sync),
        {.hint = "--schedule fifo|wfbp|fusion with ssgd, localsgd or diloco, or --warmup-steps 0 "
                 "--lr-schedule constant --clip-grad-norm 0 (--model gpt sets them by default)"});
  }
}

}  // namespace

void validateTrainOptions(const TrainOptions& options) {
  if (!emulatesCompute(options)) {
    makeModel(options.model);  // throws with the valid names
  } else if (!(options.computeScale > 0)) {
    throw ConfigError(
        fmt::format("--compute-scale must be positive, not {}", options.computeScale));
  }
  injectedSlowdownMs(options.injectSlowRank, -1);
  resolveWarmupSteps(options.compression, 0);  // throws for a negative count
  validateSync(syncOptionsOf(options), describeTrainingModel(options));
  if (options.dataset != "fashion-mnist" && options.dataset != "synthetic" &&
      !isTextDataset(options.dataset)) {
    throw ConfigError(fmt::format("unknown dataset '{}'", options.dataset),
                      {.hint = "choose fashion-mnist, synthetic, text or text:PATH"});
  }
  validateLanguageModel(options);
  validateDataUrl(options);
  validatePipelineOnlyFlags(options);
  if (options.batchSize == 0) throw ConfigError("--batch-size must be at least 1");
  if (options.epochs < 1 && options.steps <= 0) throw ConfigError("--epochs must be at least 1");
  if (options.threads < 1) throw ConfigError("--threads must be at least 1");
  if (options.evalEvery < 0) throw ConfigError("--eval-every must be >= 0");
  if (options.lr <= 0) throw ConfigError("--lr must be positive");
  if (options.momentum < 0 || options.momentum >= 1)
    throw ConfigError("--momentum must be in [0, 1)");
  if (options.lars < 0) throw ConfigError("--lars must be >= 0");
  if (options.lars > 0 && options.optimizer != "sgd")
    throw ConfigError("--lars scales SGD's step: it needs --optimizer sgd");
  if (options.lars > 0 && updatesInEngine(syncOptionsOf(options))) {
    throw ConfigError(
        fmt::format("--lars does not apply with --schedule {} --sync {}{}", options.schedule,
                    options.sync, options.strategy.ps ? " --ps" : ""),
        {.hint = "there the engine or the servers apply plain SGD; LARS needs the "
                 "optimizer to step: --schedule fifo|wfbp|fusion with ring ssgd "
                 "or localsgd"});
  }
  validateWaveOptions(options);
}

}  // namespace gradsync
