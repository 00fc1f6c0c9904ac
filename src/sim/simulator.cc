#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>

#include "compress/two_bit.h"
#include "gradsync/error.h"
#include "ps/served_units.h"
#include "schedule/step_planner.h"
#include "sim/event_queue.h"
#include "sim/fc_layers.h"
#include "sim/outer_rounds.h"
#include "sim/server_links.h"
#include "sim/unit_costs.h"
#include "sync/engine.h"

namespace gradsync::sim {
namespace {

// What the worker's compute thread does around the engine's operations (sync/engine.h).
enum class Mode {
  kRing,       // ssgd: allreduce per unit (p3: and the unit's update)
  kSharded,    // reduce-scatter per unit, then allgather per unit in forward order
  kPsSync,     // push per unit; the reply is the unit's new parameters (ssgd, asgd, ssp)
  kPsDelayed,  // odsgd, ssdsgd, cdsgd: before a unit's push, the previous pull and the local step
};

class Simulation {
 public:
  explicit Simulation(const SimOptions& options);
  SimResult run();

 private:
  struct Transfer {  // one operation on the communication thread
    double start = 0, seconds = 0, bytes = 0;
  };
  void index();  // layers, tensors and units, each by the others
  // Compute thread.
  void tryCompute();
  void afterBackward();
  void nextStep();
  bool layerParametersReady(size_t layer);
  bool allUnitsDone(int steps) const;
  void computeFor(double seconds, std::function<void()> then);
  void gradientsReady(size_t layer);
  void endBackward();
  // Communication thread: the engine's planner (rank 0's) on simulated time.
  void pump();
  void startOp(const PlannedOp& op);
  double startPush(const PlannedOp& op);  // returns when this worker's push is out
  void unitDone(size_t unit);
  void finishOp(const PlannedOp& op);
  double updateSeconds(size_t unit) const;  // the optimizer's share for one unit
  double decisionWait(size_t unit) const;
  // sharded:fc=: the linear layers whose weights the FC exchange takes (as DistributedModel
  // decides), and its two transfers on the training thread's own streams.
  void planExchanges();
  void sendActivations(size_t layer);
  double gatherErrorsSeconds(size_t layer);
  size_t pushBytes(size_t unit, uint64_t step) const;  // what a push puts on the wire

  const SimOptions& o_;
  const ClusterSpec& cluster_;
  const SyncStrategy strategy_;
  Mode mode_ = Mode::kRing;
  bool perLayer_ = false;        // the next forward waits per layer (not for the whole step)
  std::optional<PsOptions> ps_;  // through parameter servers
  ScheduleSpec schedule_;
  const std::vector<TensorShape> tensors_;
  CompressionPlan plan_;
  GradientLayout layout_;
  std::vector<UnitCost> costs_;
  std::vector<std::vector<size_t>> unitsOfLayer_;  // by layer
  std::vector<size_t> layerOfTensor_;
  std::vector<size_t> firstTensorOf_;   // by layer, and the tensor count at the end
  std::vector<size_t> tensorsWaiting_;  // by unit, this step
  EventQueue queue_;
  int measuredFrom_ = 2;
  int lastStep_ = 0;  // steps [0, lastStep_) run; lastStep_'s start ends the simulation

  // Compute thread state.
  enum class Phase { kForward, kBackward, kAfterBackward, kDone };
  Phase phase_ = Phase::kForward;
  int step_ = 0;
  size_t layer_ = 0;
  bool computeBusy_ = false;
  std::vector<double> stepStart_;

  // Communication thread state.
  std::unique_ptr<StepPlanner> planner_;
  bool commBusy_ = false;
  std::vector<double> pickedAt_;    // ring p3: by unit, when rank 0 picked it this step
  std::vector<int> doneSteps_;      // by unit: steps whose result is in the parameters
  std::vector<size_t> unitsDone_;   // by step count n: units whose doneSteps_ >= n
  size_t waitingLayer_ = SIZE_MAX;  // the layer whose parameters the forward waits for,
  int waitingStep_ = -1;            // in this step,
  size_t waitingCursor_ = 0;        // and how many of its units are known done
  std::vector<size_t> stepOrder_;
  std::vector<size_t> lastOrder_;
  std::vector<Transfer> transfers_;
  std::unique_ptr<ServerLinks> links_;
  std::vector<double> pullAt_;  // delayed: by unit, when its last requested pull arrives
  std::vector<ExchangedTensor> exchanged_;
  std::vector<bool> layerExchanged_;   // by layer
  std::vector<bool> unitExchanged_;    // by unit: no reduce-scatter, its update only
  std::vector<double> activationsAt_;  // by layer: when this step's all-to-all has landed
};

Mode modeOf(const SyncStrategy& strategy, bool servers) {
  if (strategy.kind == SyncStrategy::Kind::kSharded) return Mode::kSharded;
  if (strategy.delayed()) return Mode::kPsDelayed;
  return servers ? Mode::kPsSync : Mode::kRing;
}

Simulation::Simulation(const SimOptions& options)
    : o_(options),
      cluster_(options.cluster),
      strategy_(SyncStrategy::parse(options.sync)),
      schedule_(options.schedule),
      tensors_(options.profile.tensors()) {
  cluster_.validate();
  if (o_.steps < 3) throw ConfigError(fmt::format("--steps must be at least 3, not {}", o_.steps));
  checkCompressionApplies(strategy_, o_.compression, o_.sync);
  ps_ = psOptionsFor(strategy_, o_.strategy, cluster_.workers, kAnyLr, kAnyMomentum);
  // The steady state after the delayed strategies' warm-up (a few hundred ssgd steps) is what
  // the simulation measures.
  if (ps_) ps_->warmupSteps = 0;
  mode_ = modeOf(strategy_, ps_.has_value());
  planExchanges();
  // Through servers a p3 slice is a push and a pull, not a ring: P3's own default there.
  if (!ps_) schedule_ = withLinkSlice(schedule_, cluster_);
  // The engine's checks and compression plan (through servers, the pushes').
  const EngineOptions engine{.schedule = schedule_,
                             .compression = o_.compression,
                             .update = UpdateRule::sgd(kAnyLr, kAnyMomentum),
                             .sharded = mode_ == Mode::kSharded,
                             .exchanged = exchanged_,
                             .servers = ps_};
  Engine::validate(engine, tensors_);
  plan_ = ps_ ? planPushes(o_.compression, tensors_)
              : planCompression(o_.compression, tensors_, kAnyMomentum);
  layout_ = planLayout(tensors_, schedule_,
                       isolateExchanged(plan_.groups(), exchanged_, tensors_.size()));
  costs_ = unitCosts(cluster_, layout_, tensors_, plan_, o_.codecCost);
  perLayer_ = ps_ || mode_ == Mode::kSharded || schedule_.prioritized();
  // Whole periods are measured: ssdsgd pulls and cdsgd sends full precision every K steps.
  const bool periodic = strategy_.parameter > 0 && strategy_.kind != SyncStrategy::Kind::kSsp;
  const int period = periodic ? strategy_.parameter : 1;
  measuredFrom_ = period * ((2 + period - 1) / period);
  lastStep_ = measuredFrom_ + period * std::max(1, (o_.steps - measuredFrom_) / period);
  index();
  const StepPlanner::Route route = ps_                       ? StepPlanner::Route::kServers
                                   : mode_ == Mode::kSharded ? StepPlanner::Route::kSharded
                                                             : StepPlanner::Route::kRing;
  planner_ = std::make_unique<StepPlanner>(
      layout_, schedule_, route, StepPlanner::Role::kLeader,
      [this](const PlannedOp& pick) { pickedAt_[pick.unit] = queue_.now(); });
  if (ps_) links_ = std::make_unique<ServerLinks>(cluster_, ps_->placement);
}

void Simulation::index() {
  for (size_t l = 0; l < o_.profile.layers.size(); ++l) {
    firstTensorOf_.push_back(layerOfTensor_.size());
    for (size_t t = 0; t < o_.profile.layers[l].tensors.size(); ++t) layerOfTensor_.push_back(l);
  }
  firstTensorOf_.push_back(layerOfTensor_.size());
  unitsOfLayer_.resize(o_.profile.layers.size());
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    for (int t : layout_.units[u].tensors) {
      auto& units = unitsOfLayer_[layerOfTensor_[t]];
      if (units.empty() || units.back() != u) units.push_back(u);
    }
  }
  doneSteps_.assign(layout_.units.size(), 0);
  tensorsWaiting_.assign(layout_.units.size(), 0);
  pullAt_.assign(layout_.units.size(), 0);
  pickedAt_.assign(layout_.units.size(), 0);
  unitExchanged_.assign(layout_.units.size(), false);
  for (const ExchangedTensor& e : exchanged_) unitExchanged_[layout_.unitOf[e.tensor]] = true;
  activationsAt_.assign(o_.profile.layers.size(), 0);
}

void Simulation::planExchanges() {
  FcLayers layers = exchangedLayers(o_.profile, strategy_.fc, cluster_.workers);
  const bool exchanges = mode_ == Mode::kSharded && strategy_.fc != FcMode::kReduce;
  layerExchanged_ = exchanges ? layers.byLayer : std::vector<bool>(layers.byLayer.size(), false);
  if (exchanges) exchanged_ = std::move(layers.exchanged);
}

// Forward: each rank sends every other its columns of the layer's input, which backward needs.
void Simulation::sendActivations(size_t layer) {
  const sim::Transfer t = activationsTransfer(cluster_, o_.profile, layer);
  activationsAt_[layer] = queue_.now() + t.seconds;
  transfers_.push_back({queue_.now(), t.seconds, t.bytes});
}

// Backward, on the training thread: the allgather of every rank's output errors (once this
// step's activations have landed).
double Simulation::gatherErrorsSeconds(size_t layer) {
  const sim::Transfer t = errorsTransfer(cluster_, o_.profile, layer);
  const double wait = std::max(0.0, activationsAt_[layer] - queue_.now());
  transfers_.push_back({queue_.now() + wait, t.seconds, t.bytes});
  return wait + t.seconds;
}

// ---- compute thread: forward layer by layer (each waiting for its parameters when the engine
// updates per layer), backward in reverse, then whatever the strategy does between steps.

void Simulation::computeFor(double seconds, std::function<void()> then) {
  computeBusy_ = true;
  queue_.at(queue_.now() + seconds, [this, then = std::move(then)] {
    computeBusy_ = false;
    then();
    tryCompute();
  });
}

bool Simulation::allUnitsDone(int steps) const {
  return steps == 0 ||
         (steps < static_cast<int>(unitsDone_.size()) && unitsDone_[steps] == layout_.units.size());
}

// Amortised O(1): results only accumulate, so a unit found done stays done for this wait.
bool Simulation::layerParametersReady(size_t layer) {
  if (!perLayer_) return true;  // the step boundary already waited
  if (waitingLayer_ != layer || waitingStep_ != step_) {
    waitingLayer_ = layer;
    waitingStep_ = step_;
    waitingCursor_ = 0;
  }
  const std::vector<size_t>& units = unitsOfLayer_[layer];
  while (waitingCursor_ < units.size() && doneSteps_[units[waitingCursor_]] >= step_)
    ++waitingCursor_;
  return waitingCursor_ == units.size();
}

void Simulation::nextStep() {
  ++step_;
  layer_ = 0;
  phase_ = Phase::kForward;
}

void Simulation::tryCompute() {
  if (computeBusy_) return;
  const std::vector<LayerProfile>& layers = o_.profile.layers;
  switch (phase_) {
    case Phase::kForward:
      if (!layerParametersReady(layer_)) return;
      if (layer_ == 0) {
        stepStart_.push_back(queue_.now());
        if (step_ == lastStep_) return void(phase_ = Phase::kDone);
        for (size_t u = 0; u < layout_.units.size(); ++u)
          tensorsWaiting_[u] = layout_.units[u].tensors.size();
      }
      if (layerExchanged_[layer_]) sendActivations(layer_);
      return computeFor(layers[layer_].forwardSeconds, [this, &layers] {
        if (++layer_ == layers.size()) phase_ = Phase::kBackward, layer_ = layers.size() - 1;
      });
    case Phase::kBackward:
      return computeFor(layers[layer_].backwardSeconds, [this] {
        // The FC exchange's errors, on this thread: the layer's gradients wait for them.
        const double exchange = layerExchanged_[layer_] ? gatherErrorsSeconds(layer_) : 0;
        computeFor(exchange, [this] {
          gradientsReady(layer_);
          if (layer_ == 0) return endBackward();
          --layer_;
        });
      });
    case Phase::kAfterBackward:
      return afterBackward();
    case Phase::kDone:
      return;
  }
}

// What follows backward: straight on when the next forward waits per layer; else wait for every
// unit and run the optimizer (fifo, wfbp, fusion).
void Simulation::afterBackward() {
  if (perLayer_) {
    nextStep();
    return tryCompute();
  }
  if (!allUnitsDone(step_ + 1)) return;
  computeFor(o_.profile.updateSeconds, [this] { nextStep(); });
}

// Gradients go as backward makes them (fifo's at the end).
void Simulation::gradientsReady(size_t layer) {
  if (schedule_.kind == ScheduleSpec::Kind::kFifo) return;
  for (size_t t = firstTensorOf_[layer]; t < firstTensorOf_[layer + 1]; ++t)
    for (int u = layout_.unitOf[t]; u < layout_.unitOf[t] + layout_.unitCount[t]; ++u)
      if (--tensorsWaiting_[u] == 0) planner_->unitReady(u);
  pump();
}

void Simulation::endBackward() {
  phase_ = Phase::kAfterBackward;
  if (schedule_.kind == ScheduleSpec::Kind::kFifo)
    for (size_t u = 0; u < layout_.units.size(); ++u) planner_->unitReady(u);
  pump();
}

// ---- communication thread: one operation at a time, in the order the engine's planner gives
// (schedule/step_planner.h): every step's in the same fixed order, or (p3) by the real
// PriorityScheduler, whose picks rank 0 commits as far as its window allows (over the ring) or
// one per push (through servers). Units ready at one instant are all marked before the planner
// picks (as simulatePriorityOrder does): the callers pump once they have marked them all.

void Simulation::pump() {
  if (commBusy_) return;
  if (std::optional<PlannedOp> op = planner_->next()) startOp(*op);
}

// Ring p3: rank 0 sends each pick to the other ranks, who start the unit's allreduce once it has
// arrived (hidden when the window picked it early enough): P - 1 small messages from rank 0,
// the last to a rank on another host when there is one.
double Simulation::decisionWait(size_t unit) const {
  const int p = cluster_.workers;
  if (p == 1) return 0;
  const int farthest = cluster_.hosts() > 1 ? cluster_.gpusPerHost : 1;
  const double message = transferSeconds(cluster_, 0, farthest, sizeof(uint64_t));
  const double arrives =
      pickedAt_[unit] + message + (p - 2) * sizeof(uint64_t) / cluster_.bandwidth;
  return std::max(0.0, arrives - queue_.now());
}

double Simulation::updateSeconds(size_t unit) const {
  return o_.profile.updateSeconds * static_cast<double>(layout_.units[unit].elements) /
         static_cast<double>(layout_.totalElements);
}

void Simulation::startOp(const PlannedOp& op) {
  const CommUnit& unit = layout_.units[op.unit];
  const UnitCost& cost = costs_[op.unit];
  const double p = cluster_.workers;
  double seconds = 0;
  double bytes = static_cast<double>(unit.elements * sizeof(float)) * (p - 1) / p;
  switch (op.kind) {
    case PlannedOp::Kind::kAllreduce:
      seconds = cost.allreduceSeconds + cost.codecSeconds;
      if (schedule_.prioritized()) seconds += decisionWait(op.unit) + updateSeconds(op.unit);
      bytes = cost.bytesSent;
      break;
    case PlannedOp::Kind::kReduceScatter:  // then SGD on the block this rank owns
      seconds = updateSeconds(op.unit) / p;
      if (unitExchanged_[op.unit]) {  // the FC exchange averaged this rank's columns already
        bytes = 0;
      } else {
        seconds += reduceScatterSeconds(cluster_, unit.elements, sizeof(float));
      }
      break;
    case PlannedOp::Kind::kAllgather:
      seconds = allgatherSeconds(cluster_, unit.elements, sizeof(float));
      break;
    case PlannedOp::Kind::kPush:
      bytes = static_cast<double>(pushBytes(op.unit, op.step));
      seconds = startPush(op) - queue_.now();
      break;
  }
  if (op.kind != PlannedOp::Kind::kAllgather) stepOrder_.push_back(op.unit);
  commBusy_ = true;
  transfers_.push_back({queue_.now(), seconds, bytes});
  queue_.at(queue_.now() + seconds, [this, op] { finishOp(op); });
}

// PsWorkerClient::run: a delayed strategy first waits for the unit's last requested pull and
// applies the local step to it (the next forward may then use it); then the push goes out. The
// server updates the unit and replies; for synchronous strategies the reply is the new model.
double Simulation::startPush(const PlannedOp& op) {
  const size_t unit = op.unit;
  const PushPlan plan = planPush(*ps_, op.step);
  double begin = queue_.now();
  if (plan.delayed) {
    begin = std::max(begin, pullAt_[unit]) + updateSeconds(unit);
    queue_.at(begin, [this, unit] { unitDone(unit); });
  }
  const int server = ps_->placement.serverOf(unit);
  const ServerLinks::Push push =
      links_->push(server, begin, static_cast<double>(pushBytes(unit, op.step)));
  if (plan.wantReply) {
    const double reply = static_cast<double>(layout_.units[unit].elements * sizeof(float));
    const double replied = links_->reply(server, push.arrived + updateSeconds(unit), reply);
    if (plan.delayed) {
      pullAt_[unit] = replied;
    } else {
      queue_.at(replied, [this, unit] { unitDone(unit); });
    }
  }
  return push.sent;
}

// A compressor's encoding, cdsgd's 2-bit codes (planPush: except every K-th global step), or
// the dense gradient.
size_t Simulation::pushBytes(size_t unit, uint64_t step) const {
  if (costs_[unit].compressed && step >= static_cast<uint64_t>(plan_.warmupSteps))
    return costs_[unit].wireBytes;
  const size_t elements = layout_.units[unit].elements;
  return planPush(*ps_, step).quantized ? twoBitBytes(elements) : elements * sizeof(float);
}

void Simulation::unitDone(size_t unit) {
  const auto done = static_cast<size_t>(++doneSteps_[unit]);
  if (unitsDone_.size() <= done) unitsDone_.resize(done + 1, 0);
  ++unitsDone_[done];
  tryCompute();
}

void Simulation::finishOp(const PlannedOp& op) {
  commBusy_ = false;
  if (op.kind == PlannedOp::Kind::kAllreduce || op.kind == PlannedOp::Kind::kAllgather)
    unitDone(op.unit);
  planner_->done(op);
  if (planner_->step() != op.step) {  // the step's last operation
    lastOrder_ = std::move(stepOrder_);
    stepOrder_.clear();
  }
  pump();
}

SimResult Simulation::run() {
  queue_.at(0, [this] { tryCompute(); });
  queue_.run();
  if (static_cast<int>(stepStart_.size()) != lastStep_ + 1)
    throw InternalError(fmt::format("the simulation stalled in step {} (phase {}, layer {})", step_,
                                    static_cast<int>(phase_), layer_));
  const double from = stepStart_[measuredFrom_], to = stepStart_[lastStep_];
  const double steps = lastStep_ - measuredFrom_;
  SimResult result;
  result.schedule = schedule_.toString();
  result.stepSeconds = (to - from) / steps;
  for (const Transfer& t : transfers_) {
    if (t.start < from || t.start >= to) continue;
    result.commSeconds += t.seconds / steps;
    result.bytesSentPerStep += t.bytes / steps;
  }
  const ModelProfile& profile = o_.profile;
  result.computeSeconds = profile.forwardSeconds() + profile.backwardSeconds() +
                          (perLayer_ ? 0 : profile.updateSeconds);
  result.exposedCommSeconds = std::max(0.0, result.stepSeconds - result.computeSeconds);
  result.samplesPerSecond =
      static_cast<double>(cluster_.workers * profile.batchSize) / result.stepSeconds;
  result.units = layout_.units.size();
  result.events = queue_.eventsRun();
  result.lastStepOrder = lastOrder_;
  return result;
}

}  // namespace

SimResult simulate(const SimOptions& options) {
  const bool outerRounds = SyncStrategy::parse(options.sync).kind == SyncStrategy::Kind::kLocalSgd;
  SimResult result = outerRounds ? simulateOuterRounds(options) : Simulation(options).run();
  // The same model on one worker, training alone: no communication and no codec.
  SimOptions alone = options;
  alone.cluster.workers = 1;
  alone.strategy = {};
  alone.sync = "ssgd";
  alone.compression = {};
  alone.codecCost = nullptr;
  result.scalingEfficiency = Simulation(alone).run().stepSeconds / result.stepSeconds;
  return result;
}

}  // namespace gradsync::sim
