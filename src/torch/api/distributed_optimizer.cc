// DistributedOptimizer (include/gradsync/torch/distributed_optimizer.h) over DistributedModel.
#include "gradsync/torch/distributed_optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <unordered_set>

#include "common/logging.h"
#include "common/state_bytes.h"
#include "common/tags.h"
#include "gradsync/error.h"
#include "job/agreement.h"
#include "sync/strategy.h"
#include "torch/api/archive_bytes.h"
#include "torch/api/compressed_momentum.h"
#include "torch/api/distributed_model.h"
#include "torch/api/optimizer_kind.h"
#include "torch/api/schedule_tuning.h"
#include "torch/api/sync_setup.h"
#include "torch/models/float_span.h"
#include "transport/prefix_transport.h"

namespace gradsync {
namespace {

// localsgd and diloco: the global model is taken before the first local step, the first of
// setStep(), zeroGrad() or step() (after the initial broadcast), once. Cheap once started: no
// copy of the parameter list on the step's path.
void beginOuter(OuterOptimizer* outer, DistributedModel& model) {
  if (outer != nullptr && !outer->started()) outer->begin(model.parameters());
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
      {"parameter servers", fmt::format("{} {}", sync.parameterServers, sync.servers)},
      {"delayed strategies' knobs", fmt::format("{} {} {} {} {}", sync.delayWarmup, sync.localLr,
                                                sync.localMomentum, sync.glu, sync.cdThreshold)},
      {"seed", std::to_string(sync.seed)},
      {"join", sync.join ? "on" : "off"},
      {"guard", sync.guard ? "on" : "off"},
      {"backward passes per step", std::to_string(sync.backwardPassesPerStep)},
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
        refuseSyncSetup(
            fmt::format("the optimizer updates a tensor of shape {} that is not a parameter "
                        "of the module requiring a gradient",
                        p.sizes().vec()),
            "build the optimizer from module->parameters()");
      }
    }
  }
}

using Parameters = std::vector<std::pair<std::string, torch::Tensor>>;

// Whether each parameter's compressor applies momentum itself (dgc), by its tensor.
std::function<bool(const torch::Tensor&)> absorbsOf(const Parameters& parameters,
                                                    const SyncOptions& options) {
  std::vector<TensorShape> shapes;
  for (const auto& [name, tensor] : parameters)
    shapes.push_back(tensorShape(name, tensor.sizes().vec()));
  std::vector<bool> absorbs = absorbsMomentum(options, shapes);
  std::unordered_set<const void*> absorbing;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (absorbs[i]) absorbing.insert(parameters[i].second.unsafeGetTensorImpl());
  }
  return
      [absorbing](const torch::Tensor& p) { return absorbing.count(p.unsafeGetTensorImpl()) > 0; };
}

// A compressor that applies momentum itself (DGC's momentum correction) beside SGD momentum in
// its parameter's group would apply it twice.
void checkMomentumAppliedOnce(const torch::optim::Optimizer& optimizer,
                              const std::function<bool(const torch::Tensor&)>& absorbs,
                              const std::string& compress) {
  if (!isSgd(optimizer)) return;
  for (const auto& group : optimizer.param_groups()) {
    if (static_cast<const torch::optim::SGDOptions&>(group.options()).momentum() == 0) continue;
    for (const auto& p : group.params()) {
      if (!absorbs(p)) continue;
      refuseSyncSetup(
          fmt::format("'{}' applies momentum itself (momentum correction) and the optimizer "
                      "applies it again",
                      compress),
          "put the parameters it compresses (DistributedOptimizer::absorbsMomentum) in an SGD "
          "group with momentum 0, or compress with another method");
    }
  }
}

Transport* workerViewOf(Transport& transport, const SyncOptions& options) {
  if (options.servers <= 0) return nullptr;
  if (options.servers >= transport.size()) {
    refuseSyncSetup(fmt::format("{} ranks cannot hold {} parameter servers and a worker",
                                transport.size(), options.servers),
                    "start more ranks, or fewer servers");
  }
  if (DistributedOptimizer::isServer(transport.rank(), transport.size(), options)) {
    refuseSyncSetup(fmt::format("rank {} is a parameter server (the last {} of {} ranks)",
                                transport.rank(), options.servers, transport.size()),
                    "call DistributedOptimizer::serve on the server ranks");
  }
  return new PrefixTransport(transport, transport.size() - options.servers);
}

std::vector<TensorShape> shapesOf(const torch::nn::Module& module) {
  std::vector<TensorShape> shapes;
  for (const auto& item : module.named_parameters()) {
    if (item.value().requires_grad()) {
      shapes.push_back(tensorShape(item.key(), item.value().sizes().vec()));
    }
  }
  return shapes;
}

// --schedule auto (torch/api/schedule_tuning.h); not with localsgd, which averages models instead.
std::unique_ptr<ScheduleTuning> tuningFor(const SyncOptions& options,
                                          const Parameters& synchronized, Transport& workers) {
  if (SyncStrategy::parse(options.sync).kind == SyncStrategy::Kind::kLocalSgd)
    ScheduleTuning::checkRunCanSwitch("localsgd (it averages models)");
  size_t largest = 1;
  for (const auto& item : synchronized)
    largest = std::max(largest, static_cast<size_t>(item.second.numel()));
  return std::make_unique<ScheduleTuning>(options.schedule, largest, workers);
}

// SyncOptions::compressMomentum: Adam or AdamW, compressed, ssgd (setupFor refuses servers; the
// engine, sharded). Before the engine is built: with p3 its rule runs 1-bit Adam.
void checkCompressedMomentum(const torch::optim::Optimizer& optimizer, const SyncOptions& options) {
  if (CompressSpec::parse(options.compress).dense()) {
    refuseSyncSetup(
        "compressed momentum (1-bit Adam) compresses the momentum, and --compress is "
        "none",
        "choose a compressor, e.g. --compress onebit");
  }
  if (SyncStrategy::parse(options.sync).kind != SyncStrategy::Kind::kSsgd) {
    refuseSyncSetup(fmt::format("compressed momentum (1-bit Adam) is for ssgd (with fifo, wfbp, "
                                "fusion or p3), not sync {}",
                                options.sync),
                    "use --sync ssgd");
  }
  CompressedMomentum::check(optimizer, options.compressWarmup);
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(torch::optim::Optimizer& optimizer,
                                           std::shared_ptr<torch::nn::Module> module,
                                           Transport& transport, SyncOptions options)
    : optimizer_(optimizer),
      workerView_(workerViewOf(transport, options)),
      transport_(workerView_ ? *workerView_ : transport),
      joinable_(options.join) {
  Parameters synchronized;
  for (const auto& item : module->named_parameters()) {
    if (item.value().requires_grad()) synchronized.emplace_back(item.key(), item.value());
  }
  checkOptimizerCoversModule(optimizer, synchronized);
  checkSameEverywhere(transport_, options, synchronized);
  if (isAutoSchedule(options.schedule)) {
    tuning_ = tuningFor(options, synchronized, transport_);
    options.schedule = tuning_->firstSchedule();
    if (transport_.size() == 1) tuning_.reset();  // nothing is communicated: nothing to tune
  }
  schedule_ = options.schedule;
  if (options.compressMomentum) checkCompressedMomentum(optimizer, options);
  const auto absorbs = absorbsOf(synchronized, options);
  SyncSetup setup = setupFor(optimizer, options, transport_.size(), absorbs);
  if (setup.local) {
    const SyncStrategy strategy = SyncStrategy::parse(options.sync);
    localPeriod_ = strategy.parameter;
    outer_ = std::make_unique<OuterOptimizer>(
        strategy.outer, localPeriod_,
        PseudoGradientCompression{.spec = CompressSpec::parse(options.compress),
                                  .minElements = options.compressMinElements,
                                  .seed = options.seed});
    if (strategy.outer.perHost) {
      hostGroup_ = hostGroupOf(transport_);
      setup = setupFor(optimizer, innerOptionsOf(options), hostGroup_->size(), absorbs);
    }
  }
  setup.psTransport = &transport;
  engineLr_ = setup.engine.update.lr;
  model_ = std::make_unique<DistributedModel>(
      std::move(module), hostGroup_ ? *hostGroup_ : transport_, std::move(setup));
  if (tuning_) ScheduleTuning::checkRunCanSwitch(model_->whyNotReschedulable());
  checkMomentumAppliedOnce(optimizer, absorbs, options.compress);
  if (options.compressMomentum && !model_->updatesParameters()) {  // p3: the engine's rule
    momentum_ = std::make_unique<CompressedMomentum>(optimizer, model_->parameters(),
                                                     options.compressWarmup);
    installMomentumTransform();
  }
}

std::string DistributedOptimizer::schedule() const {
  return tuning_ ? tuning_->current() : schedule_;
}

std::string DistributedOptimizer::scheduleTuning() const {
  return tuning_ ? tuning_->summary() : "";
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::zeroGrad() {
  beginOuter(outer_.get(), *model_);
  model_->waitForParameters();
  optimizer_.zero_grad();
}

void DistributedOptimizer::step() {
  if (localPeriod_ > 0) {  // localsgd, diloco: a local step, then the outer work due
    beginOuter(outer_.get(), *model_);
    if (hostGroup_) averageGradients();  // group=host: data-parallel inside the host
    optimizer_.step();
    endLocalStep();
    return;
  }
  if (!model_->updatesParameters()) {
    if (momentum_) return compressedMomentumStep();
    synchronize();
    optimizer_.step();
    return;
  }
  const double lr = optimizer_.param_groups().front().options().get_lr();
  if (lr != engineLr_) {
    refuseSyncSetup(fmt::format("the learning rate changed from {} to {}, and with p3, sharded and "
                                "parameter servers the engine applies the rule it was given",
                                engineLr_, lr),
                    "learning-rate schedules need schedule fifo, wfbp or fusion for now");
  }
  model_->endBackward();
  if (tuning_) tuning_->afterStep(*model_);
}

// Past the warm-up the gradients the engine took are already momenta (the transform installed
// below runs in the backward hooks); alone, without an engine, they are turned here.
void DistributedOptimizer::compressedMomentumStep() {
  if (!momentum_->frozen()) {
    averageGradients();
    optimizer_.step();
    return;
  }
  if (!model_->communicates()) momentum_->gradientsToMomenta();
  averageGradients();
  momentum_->applyUpdate();
}

void DistributedOptimizer::installMomentumTransform() {
  if (!momentum_->frozen()) return;
  model_->setGradientTransform([momentum = momentum_.get()](size_t index, std::span<float> g) {
    momentum->toMomentum(index, g);
  });
}

void DistributedOptimizer::endLocalStep() {
  if (localPeriod_ == 0) {
    refuseSyncSetup("endLocalStep() is for localsgd and diloco", "call step() after backward");
  }
  beginOuter(outer_.get(), *model_);
  model_->afterLocalStep(*outer_, ++localSteps_, transport_);
}

int DistributedOptimizer::ranksWithData(bool mine) {
  float count = mine ? 1.0f : 0.0f;
  allreduce(transport_, std::span<float>(&count, 1), ReduceOp::kSum, {.tag = tags::kJoin});
  return static_cast<int>(count);
}

void DistributedOptimizer::join() {
  if (!joinable_) {
    refuseSyncSetup("join() needs SyncOptions::join on every rank",
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
  if (localPeriod_ > 0 && !hostGroup_) {
    refuseSyncSetup("synchronize() is for gradient mode and diloco's group=host, not localsgd",
                    "call step(), or your optimizer's step() and then endLocalStep()");
  }
  if (model_->updatesParameters()) {
    refuseSyncSetup("synchronize() is for gradient mode: with p3 and sharded the engine updates",
                    "call step() after backward");
  }
  if (exchangesMomenta()) {
    refuseSyncSetup(
        "past its warm-up, compressed momentum (1-bit Adam) averages momenta, not "
        "gradients, and step() applies the update",
        "call step() (exchangesMomenta() says when)");
  }
  averageGradients();
}

bool DistributedOptimizer::exchangesMomenta() const {
  return momentum_ && momentum_->frozen();
}

void DistributedOptimizer::averageGradients() {
  // With join, the average is over the ranks that had data (the others sent zeros).
  const float scale =
      joinable_ ? static_cast<float>(transport_.size()) / static_cast<float>(ranksWithData(true))
                : 1.0f;
  model_->synchronizeGradients(scale);
  if (tuning_) tuning_->afterStep(*model_);
  if (momentum_) {  // the step's exchange is over: the next one may be past the warm-up
    momentum_->endStep();
    installMomentumTransform();
  }
}

void DistributedOptimizer::synchronizeModel() {
  if (localPeriod_ > 0) {
    beginOuter(outer_.get(), *model_);
    model_->outerStep(*outer_, transport_);
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

void DistributedOptimizer::reportLoss(double loss) {
  model_->reportLoss(loss);
}

std::vector<GuardEvent> DistributedOptimizer::guardEvents() const {
  return model_->guardEvents();
}

SyncStats DistributedOptimizer::stats() const {
  const StepStats totals = model_->totals();
  return {.bytesSent = totals.bytesSent,
          .denseBytes = totals.denseBytes,
          .commSeconds = totals.commSeconds,
          .encodeSeconds = totals.encodeSeconds,
          .decodeSeconds = totals.decodeSeconds,
          .waitSeconds = model_->waitSeconds(),
          .asyncPushes = totals.asyncPushes,
          .stalenessSum = totals.stalenessSum,
          .stalenessMax = totals.stalenessMax};
}

void DistributedOptimizer::setTrace(TraceRecorder* trace) {
  model_->setTrace(trace);
}

void DistributedOptimizer::setStep(int64_t step) {
  model_->setStep(static_cast<uint64_t>(step));
  if (momentum_) {
    momentum_->setStep(step);
    installMomentumTransform();
  }
  localSteps_ = step;
  beginOuter(outer_.get(), *model_);
}

// In update mode the optimizer is SGD, Adam or AdamW (sync_setup.cc refuses the rest).
void DistributedOptimizer::withOptimizerState(const std::function<void()>& fn) {
  if (!model_->updatesParameters()) return fn();
  model_->keepLocalModel([&] {
    model_->stateToOptimizer(optimizer_);  // through servers, the parameters become theirs too
    fn();
  });
  // The engine keeps the state (sharded: 1/P of it); a full copy here would undo that.
  optimizer_.state().clear();
}

void DistributedOptimizer::loadOptimizerState() {
  if (!model_->updatesParameters()) return;
  model_->stateFromOptimizer(optimizer_);
  optimizer_.state().clear();
}

void DistributedOptimizer::withGlobalModel(const std::function<void()>& fn) {
  model_->keepLocalModel([&] {
    model_->pullGlobalModel();
    fn();
  });
}

void DistributedOptimizer::averageBuffers() {
  model_->averageBuffers();
}

Transport& DistributedOptimizer::workers() {
  return transport_;
}

std::vector<bool> DistributedOptimizer::absorbsMomentum(const torch::nn::Module& module,
                                                        const SyncOptions& options) {
  return gradsync::absorbsMomentum(options, shapesOf(module));
}

void DistributedOptimizer::serve(const torch::optim::Optimizer& optimizer,
                                 const torch::nn::Module& module, Transport& transport,
                                 const SyncOptions& options) {
  if (!isServer(transport.rank(), transport.size(), options)) {
    refuseSyncSetup(
        fmt::format("rank {} of {} is not one of the last {} ranks, the parameter servers",
                    transport.rank(), transport.size(), options.servers),
        "set SyncOptions::servers, and build a DistributedOptimizer on the other ranks");
  }
  serveParameters(transport, shapesOf(module), options, optimizer);
}

}  // namespace gradsync
