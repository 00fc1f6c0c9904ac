#include "torch/api/sync_setup.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.h"
#include "common/logging.h"
#include "gradsync/error.h"
#include "gradsync/topology.h"
#include "ps/parameter_server.h"
#include "ps/served_units.h"
#include "schedule/schedule_tuner.h"
#include "sync/strategy.h"
#include "torch/api/optimizer_kind.h"
#include "torch/api/schedule_tuning.h"

namespace gradsync {

void refuseSyncSetup(const std::string& message, const std::string& hint) {
  throw ConfigError(message, {.operation = "distributed optimizer", .hint = hint});
}

namespace {

// The optimizer's rule as the engine applies it per slice (p3, sharded): SGD, Adam or AdamW,
// with every option torch has but amsgrad. The engine applies one rule to every parameter, so
// the optimizer's groups must agree. What it cannot compute exactly is refused, never
// approximated.
UpdateRule ruleOfGroup(const torch::optim::Optimizer& optimizer,
                       const torch::optim::OptimizerParamGroup& group) {
  const torch::optim::OptimizerOptions& options = group.options();
  if (isSgd(optimizer)) {
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
      refuseSyncSetup(
          "p3 and sharded apply the update in the engine, which has no amsgrad",
          "drop amsgrad, or schedule fifo, wfbp or fusion (the optimizer then runs as given)");
    }
    return UpdateRule{.kind = kind,
                      .lr = o.lr(),
                      .beta1 = std::get<0>(o.betas()),
                      .beta2 = std::get<1>(o.betas()),
                      .eps = o.eps(),
                      .weightDecay = o.weight_decay()};
  };
  if (isAdamW(optimizer)) {
    return adamLike(UpdateRule::Kind::kAdamW,
                    static_cast<const torch::optim::AdamWOptions&>(options));
  }
  if (isAdam(optimizer)) {
    return adamLike(UpdateRule::Kind::kAdam,
                    static_cast<const torch::optim::AdamOptions&>(options));
  }
  refuseSyncSetup(
      "p3 and sharded apply the update in the engine, which implements SGD, Adam and AdamW",
      "use one of those, or schedule fifo, wfbp or fusion (any optimizer)");
}

bool sameRule(const UpdateRule& a, const UpdateRule& b) {
  return a.kind == b.kind && a.lr == b.lr && a.momentum == b.momentum &&
         a.dampening == b.dampening && a.nesterov == b.nesterov && a.beta1 == b.beta1 &&
         a.beta2 == b.beta2 && a.eps == b.eps && a.weightDecay == b.weightDecay;
}

using Absorbs = std::function<bool(const torch::Tensor&)>;

// Whether every parameter of the group has a compressor that applies momentum itself (dgc).
bool absorbing(const torch::optim::OptimizerParamGroup& group, const Absorbs& absorbs) {
  const auto& params = group.params();
  return !params.empty() && std::all_of(params.begin(), params.end(), absorbs);
}

// The group whose options the others must share: the first with a parameter that applies the
// optimizer's momentum normally.
const torch::optim::OptimizerParamGroup& referenceGroup(const torch::optim::Optimizer& optimizer,
                                                        const Absorbs& absorbs) {
  const auto& groups = optimizer.param_groups();
  auto found = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& group) { return !absorbing(group, absorbs); });
  return found != groups.end() ? *found : groups.front();
}

// The one rule the engine applies: the groups' options must agree, except that a group whose
// parameters all apply momentum through their compressor (dgc) has momentum 0 there.
UpdateRule engineRule(const torch::optim::Optimizer& optimizer, const Absorbs& absorbs) {
  const UpdateRule rule = ruleOfGroup(optimizer, referenceGroup(optimizer, absorbs));
  for (const auto& group : optimizer.param_groups()) {
    UpdateRule other = ruleOfGroup(optimizer, group);
    if (absorbing(group, absorbs) && other.momentum == 0) other.momentum = rule.momentum;
    if (!sameRule(other, rule)) {
      refuseSyncSetup(
          "p3, sharded and parameter servers apply one rule to every parameter: the optimizer's "
          "parameter groups differ in their options",
          "use one group (dgc's parameters may have a group of their own with momentum 0), or "
          "schedule fifo, wfbp or fusion");
    }
  }
  return rule;
}

// The momentum a compressor that applies it itself (dgc) uses in gradient mode: SGD's, from
// the group of the parameters that do not.
double compressorMomentum(const torch::optim::Optimizer& optimizer, const Absorbs& absorbs) {
  if (!isSgd(optimizer)) return 0;
  const auto& group = referenceGroup(optimizer, absorbs);
  return static_cast<const torch::optim::SGDOptions&>(group.options()).momentum();
}

// The servers apply SGD with momentum (ps/parameter_server.h): the optimizer must be that.
UpdateRule serverRule(const torch::optim::Optimizer& optimizer, const Absorbs& absorbs) {
  const UpdateRule rule = engineRule(optimizer, absorbs);
  if (rule.kind != UpdateRule::Kind::kSgd || rule.nesterov || rule.dampening != 0 ||
      rule.weightDecay != 0) {
    refuseSyncSetup(
        "parameter servers apply SGD with momentum: not " + rule.describe(),
        "give torch::optim::SGD without Nesterov, dampening or weight decay, or use ring "
        "ssgd (any optimizer) or p3/sharded (SGD, Adam, AdamW)");
  }
  return rule;
}

StrategyKnobs knobsOf(const SyncOptions& sync) {
  return {.ps = sync.parameterServers,
          .servers = sync.servers,
          .warmup = sync.delayWarmup,
          .localLr = sync.localLr,
          .localMomentum = sync.localMomentum,
          .glu = sync.glu,
          .threshold = sync.cdThreshold,
          .compensate = sync.compensate};
}

CompressionConfig compressionOf(const SyncOptions& sync) {
  return {.spec = sync.compress,
          .overrides = sync.compressOverrides,
          .minElements = sync.compressMinElements,
          .warmupSteps = sync.compressWarmup,
          .warmupCodec = sync.compressWarmupCodec,
          .guard = sync.guard};
}

// --schedule auto starts from its search's first candidate (DistributedOptimizer tunes on).
ScheduleSpec scheduleOf(const std::string& text) {
  return isAutoSchedule(text) ? firstCandidate(parseAutoSchedule(text)) : ScheduleSpec::parse(text);
}

EngineOptions engineOptionsOf(const SyncOptions& sync, const SyncStrategy& strategy) {
  return {.schedule = scheduleOf(sync.schedule),
          .compression = compressionOf(sync),
          .seed = sync.seed,
          .sharded = strategy.kind == SyncStrategy::Kind::kSharded,
          .concurrent = static_cast<size_t>(strategy.concurrent)};
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

}  // namespace

SyncSetup setupFor(const torch::optim::Optimizer& optimizer, const SyncOptions& sync, int workers,
                   const Absorbs& absorbs) {
  const SyncStrategy strategy = SyncStrategy::parse(sync.sync);
  EngineOptions engine = engineOptionsOf(sync, strategy);
  engine.compression.adamFamily = isAdamFamily(optimizer);
  checkCompressionApplies(strategy, engine.compression, sync.sync);
  const StrategyKnobs knobs = knobsOf(sync);
  const bool local = strategy.kind == SyncStrategy::Kind::kLocalSgd;
  const bool servers = psOptionsFor(strategy, knobs, workers, 0.1, 0).has_value();
  if (sync.join && (servers || local)) {
    refuseSyncSetup("join works with ring ssgd only",
                    "drop join, or use sync ssgd without servers");
  }
  if (servers && engine.compression.warmupCodec != "none") {
    refuseSyncSetup("the warm-up codec applies to the ring's all-reduces, not to pushes",
                    "drop compress warm-up codec, or use ring ssgd");
  }
  if (servers && sync.compressMomentum) {
    refuseSyncSetup(
        "compressed momentum (1-bit Adam) needs the moments on every worker; the "
        "parameter servers apply SGD",
        "drop parameter servers, or compressed momentum");
  }
  SyncSetup setup;
  if (servers) {
    engine.update = serverRule(optimizer, absorbs);
    engine.servers =
        psOptionsFor(strategy, knobs, workers, engine.update.lr, engine.update.momentum);
  } else if (Engine::updatesParameters(engine) && !local) {
    if (sync.join) {
      refuseSyncSetup(
          "join works in gradient mode only: with p3 and sharded the engine updates by the "
          "average over every rank",
          "use schedule fifo, wfbp or fusion with join");
    }
    engine.update = engineRule(optimizer, absorbs);
    // p3's 1-bit Adam (DistributedOptimizer checked compressWarmup >= 1 and the optimizer).
    if (sync.compressMomentum) {
      engine.update.varianceFrozenAfter = static_cast<uint64_t>(sync.compressWarmup);
    }
  } else {
    engine.update.momentum = compressorMomentum(optimizer, absorbs);
  }
  if (sync.backwardPassesPerStep < 1) {
    refuseSyncSetup(fmt::format("backward passes per step must be at least 1, not {}",
                                sync.backwardPassesPerStep),
                    "1 communicates every backward pass's gradients; N sums N passes first");
  }
  if (local) engine.compression = {};  // diloco compresses pseudo-gradients (OuterOptimizer)
  setup = {.engine = std::move(engine),
           .local = local,
           .fc = strategy.fc,
           .fcRows = static_cast<size_t>(std::max<int64_t>(sync.localBatch, 0)),
           .backwardPasses = sync.backwardPassesPerStep};
  logSetup(sync, setup);
  return setup;
}

// diloco's group=host: this rank's host (the transport's topology) as a transport of its own.
// ConfigError without a topology, or where the hosts have different numbers of ranks (the hosts'
// pseudo-gradients are averaged over every rank, so each host must weigh the same).
std::unique_ptr<Transport> hostGroupOf(Transport& transport) {
  const Topology* topology = transport.topology();
  if (topology == nullptr || !topology->regular()) {
    refuseSyncSetup(
        fmt::format("diloco's group=host needs hosts with the same number of ranks; {}",
                    topology ? "this job has " + topology->describe() : "this transport has none"),
        "launch with --ranks-per-host N (a divisor of --workers), or drop group=host");
  }
  return subsetTransport(transport, topology->localGroup(transport.rank()));
}

// What a host's ranks do every step under group=host: average their gradients densely (the
// compression is the pseudo-gradients', the outer optimizer's).
SyncOptions innerOptionsOf(SyncOptions options) {
  options.sync = "ssgd";
  options.compress = "none";
  options.compressOverrides.clear();
  return options;
}

void validateSync(const SyncOptions& sync, const std::vector<TensorShape>& tensors) {
  const SyncStrategy strategy = SyncStrategy::parse(sync.sync);
  EngineOptions engine = engineOptionsOf(sync, strategy);
  checkCompressionApplies(strategy, engine.compression, sync.sync);
  engine.update = UpdateRule::sgd(0.1, 0.9);  // any rule: it changes no check
  engine.servers = psOptionsFor(strategy, knobsOf(sync), 1, 0.1, 0.9);
  if (isAutoSchedule(sync.schedule)) {  // first: its first candidate's refusals would mislead
    std::string why = Engine::whyNotReschedulable(engine);
    if (strategy.kind == SyncStrategy::Kind::kLocalSgd) why = "localsgd (it averages models)";
    ScheduleTuning::checkRunCanSwitch(why);
  }
  Engine::validate(engine, tensors);
}

bool updatesInEngine(const SyncOptions& sync) {
  const SyncStrategy strategy = SyncStrategy::parse(sync.sync);
  EngineOptions engine = engineOptionsOf(sync, strategy);
  engine.servers = psOptionsFor(strategy, knobsOf(sync), 1, 0.1, 0.9);
  return Engine::updatesParameters(engine);
}

std::vector<bool> absorbsMomentum(const SyncOptions& sync,
                                  const std::vector<TensorShape>& tensors) {
  const CompressionPlan plan = planCompression(compressionOf(sync), tensors, 0.9);
  std::vector<bool> absorbs(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) absorbs[t] = plan.absorbsMomentum(t);
  return absorbs;
}

void serveParameters(Transport& transport, const std::vector<TensorShape>& tensors,
                     const SyncOptions& sync, const torch::optim::Optimizer& optimizer) {
  const int workers = transport.size() - sync.servers;
  // No parameter's compressor applies momentum itself: dgc cannot push to servers.
  const UpdateRule rule = serverRule(optimizer, [](const torch::Tensor&) { return false; });
  std::optional<PsOptions> ps =
      psOptionsFor(SyncStrategy::parse(sync.sync), knobsOf(sync), workers, rule.lr, rule.momentum);
  GS_CHECK(ps.has_value() && transport.rank() >= workers);
  if (isAutoSchedule(sync.schedule)) ScheduleTuning::checkRunCanSwitch("parameter servers");
  std::vector<ServedUnit> units =
      servedUnits(tensors, ScheduleSpec::parse(sync.schedule), compressionOf(sync));
  const int index = transport.rank() - workers;
  GS_LOG(kInfo, "parameter server {} (rank {}) serves {} of {} units for {} workers", index,
         transport.rank(), (units.size() + sync.servers - 1 - index) / sync.servers, units.size(),
         workers);
  ParameterServer server(transport, ps->placement, index, std::move(units), ps->server);
  server.wait();
}

}  // namespace gradsync
