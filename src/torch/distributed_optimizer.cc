// DistributedOptimizer (include/gradsync/torch/distributed_optimizer.h) over DistributedModel.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_set>

#include "gradsync/error.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "job/agreement.h"
#include "sync/strategy.h"
#include "torch/distributed_model.h"

namespace gradsync {
namespace {

[[noreturn]] void refuse(const std::string& message, const std::string& hint) {
  throw ConfigError(message, {.operation = "distributed optimizer", .hint = hint});
}

// The engine's update rule (p3, sharded) is torch's SGD with momentum, one lr and momentum for
// every parameter: what it cannot compute exactly is refused rather than approximated.
void checkEngineCanUpdate(torch::optim::Optimizer& optimizer) {
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  if (sgd == nullptr) {
    refuse("p3 and sharded apply the update in the engine, which implements SGD only",
           "use torch::optim::SGD, or schedule fifo, wfbp or fusion (any optimizer)");
  }
  const auto& first =
      static_cast<const torch::optim::SGDOptions&>(sgd->param_groups().front().options());
  for (const auto& group : sgd->param_groups()) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
    if (o.nesterov() || o.dampening() != 0 || o.weight_decay() != 0) {
      refuse(
          "p3 and sharded apply plain SGD with momentum in the engine: this optimizer uses "
          "Nesterov, dampening or weight decay",
          "drop them, or schedule fifo, wfbp or fusion (the optimizer then runs as given)");
    }
    if (o.lr() != first.lr() || o.momentum() != first.momentum()) {
      refuse(
          "p3 and sharded apply one learning rate and momentum to every parameter: the "
          "optimizer's parameter groups differ",
          "use one group, or schedule fifo, wfbp or fusion");
    }
  }
}

EngineOptions engineOptionsFor(torch::optim::Optimizer& optimizer, const SyncOptions& sync) {
  SyncStrategy strategy = SyncStrategy::parse(sync.sync);
  if (strategy.kind != SyncStrategy::Kind::kSsgd && strategy.kind != SyncStrategy::Kind::kSharded) {
    refuse(fmt::format("sync '{}' is not available through DistributedOptimizer yet", sync.sync),
           "use ssgd or sharded here; parameter servers, the delayed strategies and localsgd run "
           "through gradsync train");
  }
  EngineOptions options{.schedule = ScheduleSpec::parse(sync.schedule),
                        .compression = {.spec = sync.compress,
                                        .overrides = sync.compressOverrides,
                                        .minElements = sync.compressMinElements,
                                        .warmupSteps = sync.compressWarmup},
                        .seed = sync.seed,
                        .sharded = strategy.kind == SyncStrategy::Kind::kSharded};
  if (GradientEngine::updatesParameters(options)) {
    checkEngineCanUpdate(optimizer);
    const auto& sgd =
        static_cast<const torch::optim::SGDOptions&>(optimizer.param_groups().front().options());
    options.lr = sgd.lr();
    options.momentum = sgd.momentum();
  }
  return options;
}

// Every rank must synchronize the same parameters with the same options: checked before any
// gradient moves, so that a difference fails at once on every rank, naming it.
void checkSameEverywhere(Transport& transport, const SyncOptions& sync,
                         const std::vector<std::pair<std::string, torch::Tensor>>& parameters) {
  Settings settings{{"schedule", sync.schedule},
                    {"compress", sync.compress},
                    {"compress overrides", fmt::format("{}", sync.compressOverrides)},
                    {"sync", sync.sync},
                    {"seed", std::to_string(sync.seed)},
                    {"number of parameters", std::to_string(parameters.size())}};
  for (size_t i = 0; i < parameters.size(); ++i) {
    settings.emplace_back(
        fmt::format("parameter {}", i),
        fmt::format("{} {}", parameters[i].first, parameters[i].second.sizes().vec()));
  }
  checkSameSettings(transport, settings);
}

void checkOptimizerCoversModule(torch::optim::Optimizer& optimizer,
                                const std::vector<torch::Tensor>& synchronized) {
  std::unordered_set<const void*> known;
  for (const auto& p : synchronized) known.insert(p.unsafeGetTensorImpl());
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      if (known.count(p.unsafeGetTensorImpl()) == 0) {
        refuse(fmt::format("the optimizer updates a tensor of shape {} that is not a parameter "
                           "of the module requiring a gradient",
                           p.sizes().vec()),
               "build the optimizer from module->parameters()");
      }
    }
  }
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           std::shared_ptr<torch::nn::Module> module,
                                           Transport& transport, SyncOptions options)
    : optimizer_(optimizer) {
  std::vector<std::pair<std::string, torch::Tensor>> synchronized;
  for (const auto& item : module->named_parameters()) {
    if (item.value().requires_grad()) synchronized.emplace_back(item.key(), item.value());
  }
  std::vector<torch::Tensor> tensors;
  for (const auto& item : synchronized) tensors.push_back(item.second);
  checkOptimizerCoversModule(optimizer, tensors);
  EngineOptions engine = engineOptionsFor(optimizer, options);
  checkSameEverywhere(transport, options, synchronized);
  model_ = std::make_unique<DistributedModel>(std::move(module), transport, std::move(engine));
  auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer);
  bool sgdMomentum = false;
  for (const auto& group :
       sgd ? sgd->param_groups() : std::vector<torch::optim::OptimizerParamGroup>{}) {
    sgdMomentum |= static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() != 0;
  }
  for (size_t i = 0; i < model_->parameters().size(); ++i) {
    if (model_->absorbsMomentum(i) && sgdMomentum) {
      refuse(fmt::format("'{}' applies momentum itself (momentum correction) and the optimizer "
                         "applies it again",
                         options.compress),
             "give SGD momentum 0 with this compressor, or compress with another method");
    }
  }
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zeroGrad() {
  model_->waitForParameters();
  optimizer_.zero_grad();
}

void DistributedOptimizer::step() {
  if (!model_->updatesParameters()) {
    model_->synchronizeGradients();
    optimizer_.step();
    return;
  }
  model_->endBackward();
}

void DistributedOptimizer::synchronize() {
  if (model_->updatesParameters()) {
    refuse("synchronize() is for gradient mode: with p3 and sharded the engine updates",
           "call step() after backward");
  }
  model_->synchronizeGradients();
}

void DistributedOptimizer::waitFor(const torch::nn::Module& layer) {
  model_->waitForModule(layer);
}

void DistributedOptimizer::waitForParameters() {
  model_->waitForParameters();
}

bool DistributedOptimizer::updatesParameters() const {
  return model_->updatesParameters();
}

uint64_t DistributedOptimizer::bytesSent() const {
  return model_->totals().bytesSent;
}

uint64_t DistributedOptimizer::denseBytes() const {
  return model_->totals().denseBytes;
}

}  // namespace gradsync
