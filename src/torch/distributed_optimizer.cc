// DistributedOptimizer (include/gradsync/torch/distributed_optimizer.h) over DistributedModel.
#include "gradsync/torch/distributed_optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

#include "common/logging.h"
#include "common/tags.h"
#include "gradsync/error.h"
#include "job/agreement.h"
#include "sync/strategy.h"
#include "torch/distributed_model.h"

namespace gradsync {
namespace {

[[noreturn]] void refuse(const std::string& message, const std::string& hint) {
  throw ConfigError(message, {.operation = "distributed optimizer", .hint = hint});
}

// The optimizer's rule as the engine applies it per slice (p3, sharded): SGD, Adam or AdamW,
// with every option torch has but amsgrad. The engine applies one rule to every parameter, so
// the optimizer's groups must agree. What it cannot compute exactly is refused, never
// approximated.
UpdateRule ruleOfGroup(const torch::optim::Optimizer& optimizer,
                       const torch::optim::OptimizerParamGroup& group) {
  const torch::optim::OptimizerOptions& options = group.options();
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) != nullptr) {
    const auto& o = static_cast<const torch::optim::SGDOptions&>(options);
    return {.kind = UpdateRule::Kind::kSgd,
            .lr = o.lr(),
            .momentum = o.momentum(),
            .dampening = o.dampening(),
            .nesterov = o.nesterov(),
            .weightDecay = o.weight_decay()};
  }
  auto adamLike = [](UpdateRule::Kind kind, const auto& o) {
    if (o.amsgrad()) {
      refuse("p3 and sharded apply the update in the engine, which has no amsgrad",
             "drop amsgrad, or schedule fifo, wfbp or fusion (the optimizer then runs as given)");
    }
    return UpdateRule{.kind = kind,
                      .lr = o.lr(),
                      .beta1 = std::get<0>(o.betas()),
                      .beta2 = std::get<1>(o.betas()),
                      .eps = o.eps(),
                      .weightDecay = o.weight_decay()};
  };
  if (dynamic_cast<const torch::optim::AdamW*>(&optimizer) != nullptr) {
    return adamLike(UpdateRule::Kind::kAdamW,
                    static_cast<const torch::optim::AdamWOptions&>(options));
  }
  if (dynamic_cast<const torch::optim::Adam*>(&optimizer) != nullptr) {
    return adamLike(UpdateRule::Kind::kAdam,
                    static_cast<const torch::optim::AdamOptions&>(options));
  }
  refuse("p3 and sharded apply the update in the engine, which implements SGD, Adam and AdamW",
         "use one of those, or schedule fifo, wfbp or fusion (any optimizer)");
}

bool sameRule(const UpdateRule& a, const UpdateRule& b) {
  return a.kind == b.kind && a.lr == b.lr && a.momentum == b.momentum &&
         a.dampening == b.dampening && a.nesterov == b.nesterov && a.beta1 == b.beta1 &&
         a.beta2 == b.beta2 && a.eps == b.eps && a.weightDecay == b.weightDecay;
}

UpdateRule engineRule(const torch::optim::Optimizer& optimizer) {
  UpdateRule rule = ruleOfGroup(optimizer, optimizer.param_groups().front());
  for (const auto& group : optimizer.param_groups()) {
    if (!sameRule(ruleOfGroup(optimizer, group), rule)) {
      refuse(
          "p3 and sharded apply one rule to every parameter: the optimizer's parameter groups "
          "differ in their options",
          "use one group, or schedule fifo, wfbp or fusion");
    }
  }
  return rule;
}

// The servers apply SGD with momentum (ps/parameter_server.h): the optimizer must be that.
UpdateRule serverRule(const torch::optim::Optimizer& optimizer) {
  const UpdateRule rule = engineRule(optimizer);
  if (rule.kind != UpdateRule::Kind::kSgd || rule.nesterov || rule.dampening != 0 ||
      rule.weightDecay != 0) {
    refuse("parameter servers apply SGD with momentum: not " + rule.describe(),
           "give torch::optim::SGD without Nesterov, dampening or weight decay, or use ring "
           "ssgd (any optimizer) or p3/sharded (SGD, Adam, AdamW)");
  }
  return rule;
}

StrategyKnobs knobsOf(const SyncOptions& sync) {
  return {.ps = sync.parameterServers,
          .warmup = sync.delayWarmup,
          .localLr = sync.localLr,
          .localMomentum = sync.localMomentum,
          .glu = sync.glu,
          .threshold = sync.cdThreshold};
}

// How DistributedModel synchronizes for `sync`: through servers (co-located, one per rank), by
// local SGD, or over the ring (gradient mode, or p3/sharded applying the optimizer's rule).
SyncSetup setupFor(torch::optim::Optimizer& optimizer, const SyncOptions& sync, int workers) {
  const SyncStrategy strategy = SyncStrategy::parse(sync.sync);
  EngineOptions engine{.schedule = ScheduleSpec::parse(sync.schedule),
                       .compression = {.spec = sync.compress,
                                       .overrides = sync.compressOverrides,
                                       .minElements = sync.compressMinElements,
                                       .warmupSteps = sync.compressWarmup},
                       .seed = sync.seed,
                       .sharded = strategy.kind == SyncStrategy::Kind::kSharded};
  checkCompressionApplies(strategy, engine.compression, sync.sync);
  const StrategyKnobs knobs = knobsOf(sync);
  const bool local = strategy.kind == SyncStrategy::Kind::kLocalSgd;
  const bool servers = psOptionsFor(strategy, knobs, workers, 0.1, 0).has_value();
  if (sync.join && (servers || local)) {
    refuse("join works with ring ssgd only", "drop join, or use sync ssgd without servers");
  }
  if (servers) {
    engine.update = serverRule(optimizer);
    engine.servers =
        psOptionsFor(strategy, knobs, workers, engine.update.lr, engine.update.momentum);
    return {.engine = std::move(engine)};
  }
  if (local) return {.engine = std::move(engine), .local = true};
  if (Engine::updatesParameters(engine)) {
    if (sync.join) {
      refuse(
          "join works in gradient mode only: with p3 and sharded the engine updates by the "
          "average over every rank",
          "use schedule fifo, wfbp or fusion with join");
    }
    engine.update = engineRule(optimizer);
  }
  return {.engine = std::move(engine)};
}

void logSetup(const SyncOptions& sync, const SyncSetup& setup) {
  const char* how = setup.engine.servers ? "the parameter servers apply "
                    : setup.local        ? "local steps, models averaged periodically; "
                                         : nullptr;
  if (how == nullptr && !Engine::updatesParameters(setup.engine)) {
    GS_LOG(kInfo, "distributed optimizer: {}, {}, the optimizer steps on the averages", sync.sync,
           sync.schedule);
    return;
  }
  GS_LOG(kInfo, "distributed optimizer: {}, {}, {}{}", sync.sync, sync.schedule,
         how ? how : "the engine applies ", setup.local ? "" : setup.engine.update.describe());
}

// Every rank must synchronize the same parameters with the same options: checked before any
// gradient moves, so that a difference fails at once on every rank, naming it.
void checkSameEverywhere(Transport& transport, const SyncOptions& sync,
                         const std::vector<std::pair<std::string, torch::Tensor>>& parameters) {
  Settings settings{
      {"schedule", sync.schedule},
      {"compress", sync.compress},
      {"compress overrides", fmt::format("{}", sync.compressOverrides)},
      {"sync", sync.sync},
      {"parameter servers", sync.parameterServers ? "on" : "off"},
      {"delayed strategies' knobs", fmt::format("{} {} {} {} {}", sync.delayWarmup, sync.localLr,
                                                sync.localMomentum, sync.glu, sync.cdThreshold)},
      {"seed", std::to_string(sync.seed)},
      {"join", sync.join ? "on" : "off"},
      {"number of parameters", std::to_string(parameters.size())}};
  for (size_t i = 0; i < parameters.size(); ++i) {
    settings.emplace_back(
        fmt::format("parameter {}", i),
        fmt::format("{} {}", parameters[i].first, parameters[i].second.sizes().vec()));
  }
  checkSameSettings(transport, settings);
}

void checkOptimizerCoversModule(
    torch::optim::Optimizer& optimizer,
    const std::vector<std::pair<std::string, torch::Tensor>>& synchronized) {
  std::unordered_set<const void*> known;
  for (const auto& item : synchronized) known.insert(item.second.unsafeGetTensorImpl());
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

// A compressor that applies momentum itself (DGC's momentum correction) beside SGD momentum
// would apply it twice.
void checkMomentumAppliedOnce(const torch::optim::Optimizer& optimizer,
                              const DistributedModel& model, const std::string& compress) {
  if (dynamic_cast<const torch::optim::SGD*>(&optimizer) == nullptr) return;
  const auto& groups = optimizer.param_groups();
  bool momentum = std::any_of(groups.begin(), groups.end(), [](const auto& group) {
    return static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() != 0;
  });
  for (size_t i = 0; momentum && i < model.parameters().size(); ++i) {
    if (model.absorbsMomentum(i)) {
      refuse(fmt::format("'{}' applies momentum itself (momentum correction) and the optimizer "
                         "applies it again",
                         compress),
             "give SGD momentum 0 with this compressor, or compress with another method");
    }
  }
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           std::shared_ptr<torch::nn::Module> module,
                                           Transport& transport, SyncOptions options)
    : optimizer_(optimizer), transport_(transport), joinable_(options.join) {
  std::vector<std::pair<std::string, torch::Tensor>> synchronized;
  for (const auto& item : module->named_parameters()) {
    if (item.value().requires_grad()) synchronized.emplace_back(item.key(), item.value());
  }
  checkOptimizerCoversModule(optimizer, synchronized);
  SyncSetup setup = setupFor(optimizer, options, transport.size());
  logSetup(options, setup);
  checkSameEverywhere(transport, options, synchronized);
  engineLr_ = setup.engine.update.lr;
  if (setup.local) localPeriod_ = SyncStrategy::parse(options.sync).parameter;
  model_ = std::make_unique<DistributedModel>(std::move(module), transport, std::move(setup));
  checkMomentumAppliedOnce(optimizer, *model_, options.compress);
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zeroGrad() {
  model_->waitForParameters();
  optimizer_.zero_grad();
}

void DistributedOptimizer::step() {
  if (localPeriod_ > 0) {  // localsgd: a local step; every H-th, the models' average
    optimizer_.step();
    if (++localSteps_ % localPeriod_ == 0) model_->averageParameters();
    return;
  }
  if (!model_->updatesParameters()) {
    synchronize();
    optimizer_.step();
    return;
  }
  const double lr = optimizer_.param_groups().front().options().get_lr();
  if (lr != engineLr_) {
    refuse(fmt::format("the learning rate changed from {} to {}, and with p3, sharded and "
                       "parameter servers the engine applies the rule it was given",
                       engineLr_, lr),
           "learning-rate schedules need schedule fifo, wfbp or fusion for now");
  }
  model_->endBackward();
}

int DistributedOptimizer::ranksWithData(bool mine) {
  float count = mine ? 1.0f : 0.0f;
  allreduce(transport_, std::span<float>(&count, 1), ReduceOp::kSum, {.tag = tags::kJoin});
  return static_cast<int>(count);
}

void DistributedOptimizer::join() {
  if (!joinable_) {
    refuse("join() needs SyncOptions::join on every rank",
           "set .join = true when building the DistributedOptimizer");
  }
  // Each step of the others: zero gradients in, their average out, and the same optimizer
  // step, so that this rank's model stays theirs.
  for (int withData = ranksWithData(false); withData > 0; withData = ranksWithData(false)) {
    model_->shadowStep(static_cast<float>(transport_.size()) / static_cast<float>(withData));
    optimizer_.step();
  }
}

void DistributedOptimizer::synchronize() {
  if (localPeriod_ > 0) refuse("synchronize() is for gradient mode, not localsgd", "call step()");
  if (model_->updatesParameters()) {
    refuse("synchronize() is for gradient mode: with p3 and sharded the engine updates",
           "call step() after backward");
  }
  // With join, the average is over the ranks that had data (the others sent zeros).
  const float scale =
      joinable_ ? static_cast<float>(transport_.size()) / static_cast<float>(ranksWithData(true))
                : 1.0f;
  model_->synchronizeGradients(scale);
}

void DistributedOptimizer::synchronizeModel() {
  if (localPeriod_ > 0) {
    model_->averageParameters();
  } else {
    model_->pullGlobalModel();
  }
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
