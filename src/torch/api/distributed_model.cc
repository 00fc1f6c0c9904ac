#include "torch/api/distributed_model.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "torch/api/engine_optimizer_state.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

// Collectives on the training thread use their own tag, apart from the engine's gradient stream.
const CollectiveOptions kStateTag{.tag = tags::kModelState};

}  // namespace

DistributedModel::DistributedModel(std::shared_ptr<torch::nn::Module> module, Transport& transport,
                                   SyncSetup setup)
    : module_(std::move(module)), transport_(transport), clock_(setup.engine.clock) {
  std::vector<TensorShape> tensors;
  std::vector<std::span<float>> storage;
  for (auto& item : module_->named_parameters()) {
    if (!item.value().requires_grad()) continue;  // frozen: nothing to synchronize
    checkParameter(item.key(), item.value());
    parameters_.push_back(item.value());
    tensors.push_back(tensorShape(item.key(), item.value().sizes().vec()));
    storage.push_back(floatSpan(item.value()));
  }
  EngineOptions& options = setup.engine;
  if (setup.local) return;
  servers_ = options.servers.has_value();
  if (!servers_ && transport.size() == 1) {
    // Alone, the average of the gradients is the gradient: no hooks, no copies, no engine.
    if (options.compression.spec != "none" || !options.compression.overrides.empty()) {
      GS_LOG(kWarn, "one worker communicates nothing: --compress has no effect");
    }
    return;
  }
  // Through separate servers the engine's transport spans them too.
  Transport& engineTransport = servers_ && setup.psTransport ? *setup.psTransport : transport;
  const bool updates = Engine::updatesParameters(options);
  options.exchanged = planExchanges(setup);
  engineOptions_ = options;
  tensors_ = tensors;
  engine_ = std::make_unique<Engine>(engineTransport, tensors, std::move(options),
                                     updates ? storage : std::vector<std::span<float>>{});
  updates_ = engine_->updatesParameters();
  attachExchanges(transport);
  passes_ = setup.backwardPasses;
  passesSeen_.assign(parameters_.size(), 0);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    int index = static_cast<int>(i);
    // Fires once per backward, as soon as this parameter's gradient is computed (before it is
    // accumulated into .grad); the hook returns nothing, leaving the gradient unchanged.
    hooks_.push_back(parameters_[i].register_hook(
        [this, index](torch::Tensor grad) { onGradient(index, grad); }));
  }
  if (updates_) hookLayers();
}

std::vector<ExchangedTensor> DistributedModel::planExchanges(const SyncSetup& setup) {
  if (!setup.engine.sharded || setup.fc == FcMode::kReduce) return {};
  auto* model = dynamic_cast<Model*>(module_.get());
  if (model == nullptr) {
    throw ConfigError(
        "sharded:fc=" + std::string(toString(setup.fc)) +
            " reroutes the forward of gradsync's own models' linear layers",
        {.operation = "distributed model", .hint = "use sharded (fc=reduce) with your own module"});
  }
  if (setup.fc == FcMode::kAuto && setup.fcRows == 0) {
    throw ConfigError("sharded:fc=auto needs the rows of a layer's input per rank (the batch)",
                      {.operation = "distributed model", .hint = "set SyncOptions::localBatch"});
  }
  std::unordered_map<const void*, int> indexOf;
  for (size_t i = 0; i < parameters_.size(); ++i)
    indexOf[parameters_[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  std::vector<ExchangedTensor> exchanged;
  for (const LinearLayer& layer : model->linearLayers()) {
    auto weight = indexOf.find(layer.weight.unsafeGetTensorImpl());
    if (weight == indexOf.end()) continue;  // frozen
    const FcShape shape{.rows = setup.fcRows,
                        .in = static_cast<size_t>(layer.weight.size(1)),
                        .out = static_cast<size_t>(layer.weight.size(0))};
    if (!fcUsesExchange(setup.fc, shape, transport_.size())) continue;
    int bias = -1;
    if (layer.bias.defined()) {
      auto found = indexOf.find(layer.bias.unsafeGetTensorImpl());
      if (found == indexOf.end()) continue;  // a frozen bias: leave the layer to the engine
      bias = found->second;
    }
    planned_.push_back({layer, weight->second, bias});
    exchanged.push_back({weight->second, shape.in});
  }
  return exchanged;
}

void DistributedModel::attachExchanges(Transport& transport) {
  auto* model = dynamic_cast<Model*>(module_.get());
  for (size_t l = 0; l < planned_.size(); ++l) {
    const PlannedExchange& p = planned_[l];
    exchanges_.push_back(makeFcExchangeLayer(transport, tags::kFcExchange + 2 * l, *engine_,
                                             p.weight, p.bias, p.layer.weight, p.layer.bias));
    model->setExchange(*p.layer.module, exchanges_.back());
    GS_LOG(kDebug, "sharded: the FC exchange takes linear layer {} x {}", p.layer.weight.size(0),
           p.layer.weight.size(1));
  }
}

StepStats DistributedModel::totals() const {
  StepStats totals = engine_ ? engine_->totals() : averaging_;
  totals += retired_;
  for (const auto& exchange : exchanges_) {
    totals.bytesSent += exchange->bytesSent();
    totals.commSeconds += exchange->waitSeconds();
  }
  return totals;
}

double DistributedModel::waitSeconds() const {
  double waited = waitSeconds_;
  for (const auto& exchange : exchanges_) waited += exchange->waitSeconds();
  return waited;
}

// Runs on the thread running backward; endPasses() on the training thread after backward
// returned, so the counters need no lock.
void DistributedModel::onGradient(int index, const torch::Tensor& grad) {
  torch::Tensor dense = grad.contiguous();
  std::span<float> slot = engine_->slot(index);
  const float* values = dense.data_ptr<float>();
  int& seen = passesSeen_[static_cast<size_t>(index)];
  if (seen == passes_) {
    throw ConfigError(
        fmt::format("parameter {} got a gradient from more than {} backward pass(es) in one step",
                    index, passes_),
        {.rank = transport_.rank(),
         .operation = "backward",
         .hint = "call step() after every backwardPassesPerStep backward passes"});
  }
  if (seen == 0) {
    std::memcpy(slot.data(), values, slot.size_bytes());
  } else {
    for (size_t k = 0; k < slot.size(); ++k) slot[k] += values[k];
  }
  if (++seen == passes_) {
    if (transform_) transform_(static_cast<size_t>(index), slot);
    engine_->markReady(index);
  }
}

void DistributedModel::endPasses() {
  for (size_t i = 0; i < passesSeen_.size(); ++i) {
    const int index = static_cast<int>(i);
    if (passesSeen_[i] == 0 && transform_) {  // unused by this rank: a zero gradient
      std::span<float> slot = engine_->slot(index);
      std::fill(slot.begin(), slot.end(), 0.0f);
      transform_(i, slot);
      engine_->markReady(index);
    } else if (passesSeen_[i] > 0 && passesSeen_[i] < passes_) {
      if (transform_) transform_(i, engine_->slot(index));
      engine_->markReady(index);
    }
    passesSeen_[i] = 0;
  }
}

void DistributedModel::checkParameter(const std::string& name,
                                      const torch::Tensor& parameter) const {
  if (parameter.scalar_type() != torch::kFloat || !parameter.device().is_cpu() ||
      !parameter.is_contiguous()) {
    throw ConfigError(
        fmt::format("parameter {} is {} on {}{}", name, toString(parameter.scalar_type()),
                    parameter.device().str(), parameter.is_contiguous() ? "" : ", not contiguous"),
        {.operation = "distributed model",
         .hint = "gradsync synchronizes contiguous float32 parameters on the CPU"});
  }
}

// Update mode: which parameters each submodule's forward reads, for waitForModule; gradsync's
// own models call it from their pre-forward hook.
void DistributedModel::hookLayers() {
  std::unordered_map<const void*, int> indexOf;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    indexOf[parameters_[i].unsafeGetTensorImpl()] = static_cast<int>(i);
  }
  for (const auto& item : module_->named_modules("", /*include_self=*/false)) {
    LayerWaits& layer = layers_[item.value().get()];
    layer.name = item.key();
    for (const auto& p : item.value()->parameters(/*recurse=*/true)) {
      auto found = indexOf.find(p.unsafeGetTensorImpl());
      if (found != indexOf.end()) layer.parameters.push_back(found->second);
    }
  }
  if (auto* model = dynamic_cast<Model*>(module_.get())) {
    model->setPreForwardHook([this](const torch::nn::Module& layer) { waitForModule(layer); });
  }
}

DistributedModel::~DistributedModel() {
  for (size_t i = 0; i < hooks_.size(); ++i) parameters_[i].remove_hook(hooks_[i]);
  if (auto* model = dynamic_cast<Model*>(module_.get())) {
    for (const PlannedExchange& p : planned_) model->setExchange(*p.layer.module, nullptr);
  }
  if (auto* model = dynamic_cast<Model*>(module_.get()); model && updates_) {
    model->setPreForwardHook({});
  }
}

void DistributedModel::setTrace(TraceRecorder* trace) {
  trace_ = trace;
  if (engine_) engine_->setTrace(trace);
}

void DistributedModel::waitForModule(const torch::nn::Module& layer) {
  auto found = layers_.find(&layer);
  if (found == layers_.end() || found->second.parameters.empty()) return;
  const Nanos start = clock_->now();
  for (int t : found->second.parameters) engine_->waitFor(t);
  const double waited = secondsSince(*clock_, start);
  waitSeconds_ += waited;
  // Only waits long enough to see: a layer whose parameters were ready costs ~1 us.
  if (trace_ != nullptr && trace_->active() && waited > 50e-6) {
    trace_->complete(kMainLane, "communication", "wait parameters", start, clock_->now(),
                     TraceArgs().add("layer", found->second.name));
  }
}

void DistributedModel::broadcastState() {
  torch::NoGradGuard noGrad;
  for (auto& parameter : module_->parameters())
    broadcast(transport_, floatSpan(parameter), 0, kStateTag);
  for (auto& buffer : module_->buffers()) {
    if (buffer.scalar_type() == torch::kFloat)
      broadcast(transport_, floatSpan(buffer), 0, kStateTag);
  }
}

void DistributedModel::synchronizeGradients(float scale) {
  if (!engine_) return;
  endPasses();
  engine_->finishStep();
  torch::NoGradGuard noGrad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::span<float> average = engine_->slot(static_cast<int>(i));
    if (scale != 1.0f) {
      for (float& x : average) x *= scale;
    }
    torch::Tensor view = torch::from_blob(average.data(), parameters_[i].sizes());
    if (parameters_[i].grad().defined()) {
      parameters_[i].mutable_grad().copy_(view);
    } else if (view.count_nonzero().item<int64_t>() > 0) {
      parameters_[i].mutable_grad() = view.clone();
    }
    // Else no rank has used the parameter yet (its gradient is undefined here, and zero on
    // every rank): it keeps no gradient, so the optimizer skips it as it would on one worker.
  }
}

void DistributedModel::shadowStep(float scale) {
  if (!engine_) return;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    std::span<float> slot = engine_->slot(static_cast<int>(i));
    std::fill(slot.begin(), slot.end(), 0.0f);
    engine_->markReady(static_cast<int>(i));
  }
  synchronizeGradients(scale);
}

void DistributedModel::endBackward() {
  endPasses();
  engine_->endBackward();
}

void DistributedModel::waitForParameters() {
  if (!updates_) return;
  const Nanos start = clock_->now();
  engine_->drain();
  waitSeconds_ += secondsSince(*clock_, start);
}

void DistributedModel::averageBuffers() {
  waitForParameters();
  torch::NoGradGuard noGrad;
  for (auto& buffer : module_->buffers()) {
    // running_mean/var are floats; num_batches_tracked (int64) is the same on every rank.
    if (buffer.scalar_type() == torch::kFloat)
      allreduce(transport_, floatSpan(buffer), ReduceOp::kAverage, kStateTag);
  }
}

void DistributedModel::outerStep(OuterOptimizer& outer, Transport& across) {
  const Nanos start = clock_->now();
  averaging_.bytesSent += outer.step(parameters_, across);
  averaging_.commSeconds += secondsSince(*clock_, start);
}

void DistributedModel::afterLocalStep(OuterOptimizer& outer, int64_t step, Transport& across) {
  const Nanos start = clock_->now();
  averaging_.bytesSent += outer.afterLocalStep(step, parameters_, across);
  averaging_.commSeconds += secondsSince(*clock_, start);
}

void DistributedModel::pullGlobalModel() {
  if (!servers_) return;
  waitForParameters();
  barrier(transport_, kStateTag);  // every worker's pushes are applied: one model for all
  engine_->pullGlobalModel();
}

void DistributedModel::keepLocalModel(const std::function<void()>& fn) {
  if (!servers_) return fn();
  waitForParameters();  // this worker's model is complete: no reply still on its way
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> local;
  for (const auto& p : parameters_) local.push_back(p.clone());
  fn();
  for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].copy_(local[i]);
}

std::vector<uint8_t> DistributedModel::engineState() {
  if (!engine_) return {};
  waitForParameters();
  return engine_->saveState();
}

void DistributedModel::loadEngineState(std::span<const uint8_t> state) {
  if (engine_) return engine_->loadState(state);
  if (!state.empty()) {
    throw DataError(
        "the checkpoint holds synchronization state where this run has no engine "
        "(one rank, or localsgd)");
  }
}

void DistributedModel::stateToOptimizer(torch::optim::Optimizer& optimizer) {
  if (!updates_) return;
  waitForParameters();
  if (servers_) barrier(transport_, kStateTag);  // every worker's pushes are in
  const std::vector<float> state = engine_->optimizerState();
  engineStateIntoOptimizer(state, parameters_, static_cast<int64_t>(engine_->optimizerSteps()),
                           optimizer);
}

// A parameter without state (a checkpoint of a run without momentum, or of gradient mode's
// first step) starts from zeros, as torch's optimizers would; Adam's count is the state's own,
// so moments that restart at zero (sharded's in a new elastic round) restart as a fresh Adam's.
void DistributedModel::stateFromOptimizer(torch::optim::Optimizer& optimizer) {
  if (!updates_) return;
  engine_->setOptimizerState(engineStateFromOptimizer(parameters_, optimizer),
                             engineStateSteps(parameters_, optimizer));
}

std::string DistributedModel::whyNotReschedulable() const {
  return engine_ ? Engine::whyNotReschedulable(engineOptions_) : "";
}

void DistributedModel::reschedule(const ScheduleSpec& schedule) {
  if (!engine_) return;
  GS_CHECK(whyNotReschedulable().empty());
  EngineOptions options = engineOptions_;
  options.schedule = schedule;
  GS_CHECK(Engine::updatesParameters(options) == updates_);
  waitForParameters();
  const uint64_t step = engine_->nextStep();
  const std::vector<float> state = updates_ ? engine_->optimizerState() : std::vector<float>{};
  retired_ += engine_->totals();
  engine_.reset();  // its threads end before the next engine's start on the same tags
  std::vector<std::span<float>> storage;
  if (updates_)
    for (torch::Tensor& p : parameters_) storage.push_back(floatSpan(p));
  engine_ = std::make_unique<Engine>(transport_, tensors_, options, storage);
  engineOptions_ = std::move(options);
  engine_->setStep(step);
  if (updates_) engine_->setOptimizerState(state);
  engine_->setTrace(trace_);
}

}  // namespace gradsync
