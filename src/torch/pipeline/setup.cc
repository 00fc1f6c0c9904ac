#include "torch/pipeline/setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>
#include <unordered_map>

#include "common/check.h"
#include "gradsync/error.h"
#include "optim/delay_compensation.h"
#include "pipeline/balance.h"
#include "pipeline/device_pinning.h"
#include "sim/model_profile.h"
#include "sync/strategy.h"
#include "torch/api/sync_setup.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

// Costs from `gradsync profile`'s JSON: each chain layer's forward + backward seconds.
std::vector<double> profiledCosts(const std::vector<PipelineLayer>& layers, const std::string& path,
                                  const std::string& model) {
  const ModelProfile profile = loadModelProfile(path);
  std::unordered_map<std::string, double> seconds;
  for (const LayerProfile& layer : profile.layers) {
    seconds[layer.name] = layer.forwardSeconds + layer.backwardSeconds;
  }
  std::vector<double> costs;
  for (const PipelineLayer& layer : layers) {
    auto found = seconds.find(layer.name);
    if (found == seconds.end()) {
      throw ConfigError(
          fmt::format("--stage-profile {} has no layer '{}' of {}", path, layer.name, model),
          {.hint =
               fmt::format("measure it with gradsync profile --model {} --batch-size B", model)});
    }
    costs.push_back(found->second);
  }
  return costs;
}

std::vector<int> chooseSplit(const TrainOptions& options, Model& model,
                             const std::vector<PipelineLayer>& layers, std::string& how) {
  const PipelineOptions& p = options.pipeline;
  if (!p.stageLayers.empty()) {
    how = "--stage-layers";
    return parseStageLayers(p.stageLayers, layers.size(), p.stages);
  }
  if (!p.stageProfile.empty()) {
    how = "measured profile " + p.stageProfile;
    return balanceStages(profiledCosts(layers, p.stageProfile, options.model), p.stages);
  }
  how = "estimated multiply-accumulates";
  return balanceStages(estimatedLayerCosts(model), p.stages);
}

// Data parallelism inside the pipeline averages each stage's gradient over its replicas through
// DistributedOptimizer's gradient mode; the stage's own rule (with SC/LWP) then applies it.
void checkReplicaSync(const TrainOptions& options) {
  const SyncStrategy strategy = SyncStrategy::parse(options.sync);
  const bool gradientMode = strategy.kind == SyncStrategy::Kind::kSsgd && !options.strategy.ps &&
                            options.strategy.servers == 0 && options.schedule.rfind("p3", 0) != 0;
  if (!gradientMode) {
    throw ConfigError(
        fmt::format("--pipeline with replicas averages each stage's gradients; --sync {} "
                    "--schedule {} updates the parameters itself",
                    options.sync, options.schedule),
        {.hint = "use --sync ssgd (no --ps, no --servers) with --schedule fifo, wfbp or fusion:MB, "
                 "and any compressor"});
  }
}

// Model-parallel Wavelet: --waves K runs K replicas (the waves) of the S stages, pinned to S
// devices; --pin-devices pins replicas without naming them waves (naive model parallelism: one).
void checkWaves(const TrainOptions& options, int ranks) {
  const PipelineOptions& p = options.pipeline;
  parseWavePlacement(p.wavePlacement);
  const int k = options.waves;
  if (k > 1 && options.waveConsistency != "accumulate") {
    throw ConfigError(
        fmt::format("--wave-consistency {} is data-parallel Wavelet's: with --pipeline the waves "
                    "are replicas that average each stage's gradients (accumulate's arithmetic)",
                    options.waveConsistency),
        {.operation = "--waves", .hint = "drop --wave-consistency"});
  }
  if ((k > 1 || p.pinDevices) && p.emulate) {
    throw ConfigError(
        fmt::format("{} does not combine with --pipeline-emulate: the emulator runs one pipeline "
                    "on one thread, with no devices to place stages on",
                    k > 1 ? fmt::format("--waves {}", k) : std::string("--pin-devices")),
        {.hint = "drop --pipeline-emulate to run the stages as ranks"});
  }
  if (k > p.stages) {
    throw ConfigError(
        fmt::format("--waves {} on {} stages: at most one wave per device (waves <= stages)", k,
                    p.stages),
        {.operation = "--waves", .hint = fmt::format("use --waves 2 to {}", p.stages)});
  }
  if (k > 1 && ranks > 0 && ranks != p.stages * k) {
    throw ConfigError(
        fmt::format("--pipeline {} --waves {} runs {} ranks (stages x waves), not --workers {}",
                    p.stages, k, p.stages * k, ranks),
        {.operation = "--waves", .hint = "drop --workers: it is derived from the waves"});
  }
  if (p.pinDevices && ranks > p.stages * p.stages) {
    throw ConfigError(
        fmt::format("--pin-devices places replica r as wave r on {} devices: {} replicas are more "
                    "than one per device",
                    p.stages, ranks / p.stages),
        {.hint = fmt::format("at most --workers {}", p.stages * p.stages)});
  }
}

void checkOptions(const TrainOptions& options, int ranks) {
  const PipelineOptions& p = options.pipeline;
  if (p.stages < 1) throw ConfigError("--pipeline needs at least one stage");
  if (p.microBatches < 1) throw ConfigError("--micro-batches must be at least 1");
  if (options.batchSize % static_cast<size_t>(p.microBatches) != 0) {
    throw ConfigError(fmt::format("--batch-size {} does not split into {} micro-batches",
                                  options.batchSize, p.microBatches),
                      {.hint = "make --batch-size a multiple of --micro-batches"});
  }
  if (parsePipelineMode(p.mode) == PipelineMode::kPipelined && p.microBatches != 1) {
    throw ConfigError("--micro-batches is fill-drain's: pb updates after every micro-batch",
                      {.hint = "with pb, --batch-size is the micro-batch"});
  }
  checkWaves(options, ranks);  // before the general rule: --waves derives --workers
  if (ranks > 0 && ranks % p.stages != 0) {
    throw ConfigError(
        fmt::format("{} workers do not make whole pipelines of {} stages", ranks, p.stages),
        {.hint = "--workers must be stages x replicas"});
  }
  if (!options.checkpointDir.empty() || options.resume) {
    throw ConfigError("--checkpoint-dir and --resume are not supported with --pipeline");
  }
  if (!options.tracePath.empty()) throw ConfigError("--trace is not supported with --pipeline");
  if (p.referenceBatch == 0 && options.momentum >= 1) throw ConfigError("--momentum must be < 1");
}

// Pinned: every rank's core among the calling thread's CPUs (a launched rank's are its parent's).
void placeReplicas(const TrainOptions& options, int ranks, PipelinePlan& plan) {
  plan.wavePlacement = parseWavePlacement(options.pipeline.wavePlacement);
  if (ranks == 0 || (options.waves == 1 && !options.pipeline.pinDevices)) return;
  plan.placement = placeRanks(plan.wavePlacement, plan.shape.stages, plan.replicas, threadCpus());
}

}  // namespace

std::string PipelinePlan::describe() const {
  std::string text = fmt::format(
      "{}, layers per stage {} ({}); micro-batch {}, {} replica{}; "
      "lr {:.4g}, momentum {:.6g}, compensation {}{}",
      shape.describe(), fmt::join(split, ","), balance, microBatch, replicas,
      replicas == 1 ? "" : "s", rule.lr, rule.momentum, rule.compensation.describe(),
      rule.weightStash ? ", weight stash" : "");
  if (rule.compensation.predict && rule.compensation.predictBackward) text += ", lwp-backward";
  if (!placement.empty()) {
    text += fmt::format("; {} wave{} {} on {} devices, pinned (rank:core) {}", replicas,
                        replicas == 1 ? "" : "s", wavePlacementName(wavePlacement), shape.stages,
                        describeCores(placement));
  }
  return text;
}

std::shared_ptr<Model> makePipelineModel(const TrainOptions& options) {
  std::shared_ptr<Model> model = makeModel(options.model);
  initializeParameters(*model, options.seed);
  return model;
}

PipelinePlan planPipeline(const TrainOptions& options, int ranks) {
  checkOptions(options, ranks);
  const PipelineOptions& p = options.pipeline;
  PipelinePlan plan;
  plan.shape = {
      .mode = parsePipelineMode(p.mode), .stages = p.stages, .microBatches = p.microBatches};
  plan.replicas = ranks > 0 ? ranks / p.stages : 1;
  if (plan.replicas > 1) checkReplicaSync(options);
  placeReplicas(options, ranks, plan);
  plan.microBatch = options.batchSize / static_cast<size_t>(p.microBatches);
  std::shared_ptr<Model> model = makePipelineModel(options);
  const std::vector<PipelineLayer> layers = model->pipelineLayers();
  if (layers.empty()) {
    throw ConfigError(fmt::format("--model {} cannot be split into pipeline stages", options.model),
                      {.hint = "use mlp, cnn, cnn-gn, resnet20, vgg11 or vgg11-gn"});
  }
  for (const PipelineLayer& layer : layers) plan.layerNames.push_back(layer.name);
  plan.split = chooseSplit(options, *model, layers, plan.balance);
  SgdRecipe recipe{.batch = options.batchSize, .lr = options.lr, .momentum = options.momentum};
  if (p.referenceBatch > 0) {
    recipe =
        scaleRecipe({.batch = p.referenceBatch, .lr = options.lr, .momentum = options.momentum},
                    options.batchSize);
  }
  plan.rule = {.lr = recipe.lr,
               .momentum = recipe.momentum,
               .compensation = DelayCompensation::parse(p.compensate),
               .weightStash = p.weightStash};
  plan.rule.compensation.predictBackward = p.lwpBackward;
  return plan;
}

std::vector<std::vector<PipelineLayer>> stageLayers(Model& model, const std::vector<int>& split) {
  std::vector<PipelineLayer> layers = model.pipelineLayers();
  GS_CHECK(std::accumulate(split.begin(), split.end(), size_t{0}) == layers.size());
  std::vector<std::vector<PipelineLayer>> stages;
  size_t next = 0;
  for (int count : split) {
    stages.emplace_back(layers.begin() + next, layers.begin() + next + count);
    next += count;
  }
  return stages;
}

std::vector<double> estimatedLayerCosts(Model& model) {
  torch::NoGradGuard noGrad;
  std::vector<double> costs;
  torch::Tensor x = torch::zeros({1, 1, 28, 28});
  for (const PipelineLayer& layer : model.pipelineLayers()) {
    torch::Tensor out = layer.forward(x);
    double cost = static_cast<double>(out.numel());
    if (auto* conv = layer.module->as<torch::nn::Conv2d>()) {
      // The conv's own output (its link may pool after it), times the taps of each output.
      const auto& o = conv->options;
      const double taps = static_cast<double>(o.in_channels() / o.groups() * (*o.kernel_size())[0] *
                                              (*o.kernel_size())[1]);
      cost = static_cast<double>(conv->forward(x).numel()) * taps;
    } else if (auto* linear = layer.module->as<torch::nn::Linear>()) {
      cost *= static_cast<double>(linear->options.in_features());
    }
    costs.push_back(cost);
    x = out;
  }
  return costs;
}

MicroBatches::MicroBatches(const TrainOptions& options, const PipelinePlan& plan, int replica)
    : data_(
          openDataSource(options.dataset, options.dataDir, options.syntheticSamples, options.seed)),
      sampler_(data_->trainSize(), replica, plan.replicas, options.batchSize, options.seed),
      microBatch_(plan.microBatch),
      microBatches_(plan.shape.microBatches) {}

std::vector<size_t> MicroBatches::indices(int64_t first, int64_t micro) const {
  const int64_t step = first + micro / microBatches_;
  const auto perEpoch = static_cast<int64_t>(sampler_.stepsPerEpoch());
  std::vector<size_t> batch = sampler_.batch(step / perEpoch, static_cast<size_t>(step % perEpoch));
  const size_t start = static_cast<size_t>(micro % microBatches_) * microBatch_;
  return {batch.begin() + static_cast<ptrdiff_t>(start),
          batch.begin() + static_cast<ptrdiff_t>(start + microBatch_)};
}

std::pair<torch::Tensor, torch::Tensor> MicroBatches::batch(int64_t first, int64_t micro) const {
  return gatherSamples(*data_, true, indices(first, micro));
}

std::vector<std::vector<size_t>> testBatches(size_t testSize, int replica, int replicas) {
  constexpr size_t kBatch = 500;
  std::vector<std::vector<size_t>> batches;
  std::vector<size_t> batch;
  for (size_t i = static_cast<size_t>(replica); i < testSize; i += static_cast<size_t>(replicas)) {
    batch.push_back(i);
    if (batch.size() == kBatch) batches.push_back(std::move(batch)), batch.clear();
  }
  if (!batch.empty()) batches.push_back(std::move(batch));
  return batches;
}

std::pair<torch::Tensor, torch::Tensor> gatherSamples(const DataSource& data, bool train,
                                                      const std::vector<size_t>& indices) {
  const auto n = static_cast<int64_t>(indices.size());
  torch::Tensor x = torch::empty({n, 1, 28, 28});
  torch::Tensor y = torch::empty({n}, torch::kLong);
  data.batch(train, indices, floatSpan(x), {y.data_ptr<int64_t>(), indices.size()});
  return {x, y};
}

LoopShape pipelineLoopShape(const TrainOptions& options, const MicroBatches& data, bool show) {
  const auto perEpoch = static_cast<int64_t>(data.stepsPerEpoch());
  return {.stepsPerEpoch = perEpoch,
          .totalSteps = options.steps > 0 ? options.steps : perEpoch * options.epochs,
          .globalBatch = data.globalBatch(),
          .evalEvery = options.evalEvery,
          .segmentSteps = perEpoch,
          .show = show && !options.quiet};
}

}  // namespace gradsync
