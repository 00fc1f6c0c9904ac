#include "sim/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>

#include "common/check.h"
#include "compress/two_bit.h"
#include "gradsync/error.h"
#include "ps/protocol.h"
#include "schedule/priority_scheduler.h"
#include "sim/event_queue.h"
#include "sim/unit_costs.h"
#include "sync/gradient_engine.h"
#include "sync/ps_engine.h"

namespace gradsync::sim {
namespace {

// How the strategy moves data, as far as timing goes.
enum class Mode {
  kRing,       // ssgd: allreduce per unit (p3: with the update per unit)
  kSharded,    // reduce-scatter per unit, then allgather per unit in forward order
  kLocalSgd,   // no exchange, but an allreduce of every unit every H steps
  kPsSync,     // push per unit, the next forward waits for each unit's reply (ssgd, asgd, ssp)
  kPsDelayed,  // odsgd / ssdsgd / cdsgd: the local step waits for the previous step's pulls
};

// Which of the step's gradients a unit must have before the next forward may use its layer.
enum class Gate { kAll, kPerLayer, kPreviousStep };

// A FIFO timeline of a shared link: a transfer starts when the link is free.
struct Link {
  double freeAt = 0;
};

class Simulation {
 public:
  explicit Simulation(const SimOptions& options);
  SimResult run();

 private:
  struct Op {
    enum class Kind { kExchange, kReduceScatter, kAllgather, kPush };
    Kind kind = Kind::kExchange;
    size_t unit = 0;
  };

  struct Transfer {
    double start = 0;
    double seconds = 0;
    double bytes = 0;
  };

  // Compute thread.
  void tryCompute();
  void afterBackward();
  void nextStep();
  bool layerParametersReady(size_t layer);
  bool allUnitsDone(int steps) const;
  void computeFor(double seconds, std::function<void()> then);
  void gradientsReady(size_t layer);
  void endBackward();
  // Communication thread.
  void unitReady(size_t unit);
  void pump();
  std::optional<Op> nextOp();
  void startOp(const Op& op);
  double push(size_t unit);  // returns when the push is on the server; schedules the reply
  void unitDone(size_t unit);
  void finishOp(const Op& op);
  double updateSeconds(size_t unit) const;  // the optimizer's share for one unit
  double decisionWait() const;
  std::vector<Op> fixedOrder() const;
  bool exchangesThisStep(int step) const;
  bool sendsGradients() const;
  size_t pushBytes(size_t unit, int step) const;
  bool pullsThisStep(int step) const;

  const SimOptions& o_;
  const ClusterSpec& cluster_;
  const SyncStrategy strategy_;
  Mode mode_ = Mode::kRing;
  Gate gate_ = Gate::kAll;
  std::optional<PsPlacement> placement_;
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
  enum class Phase { kForward, kBackward, kAfterBackward, kAwaitAverage, kDone };
  Phase phase_ = Phase::kForward;
  int step_ = 0;
  size_t layer_ = 0;
  bool computeBusy_ = false;
  std::vector<double> stepStart_;

  // Communication thread state.
  int commStep_ = 0;
  bool commBusy_ = false;
  std::vector<int> readySteps_;  // by unit: steps whose gradient is ready
  std::vector<int> doneSteps_;   // by unit: steps whose result is in the parameters
  std::vector<size_t> unitsDone_;  // by step count n: units whose doneSteps_ >= n
  size_t waitingLayer_ = SIZE_MAX;  // the layer whose parameters the forward waits for,
  int waitingStep_ = -1;            // in this step,
  size_t waitingCursor_ = 0;        // and how many of its units are known done
  std::vector<Op> order_;        // fixed order of every step's operations (not p3)
  size_t nextInOrder_ = 0;
  size_t opsDone_ = 0;
  std::unique_ptr<PriorityScheduler> scheduler_;
  std::deque<std::pair<size_t, double>> committed_;  // p3: picked units, and when
  double pickedAt_ = 0;                               // when the starting op was picked
  std::vector<size_t> stepOrder_;
  std::vector<size_t> lastOrder_;
  std::vector<Transfer> transfers_;
  Link workersOut_, workersIn_;
  std::vector<Link> serverIn_, serverOut_;
};

Mode modeOf(const SyncStrategy& strategy, bool servers) {
  switch (strategy.kind) {
    case SyncStrategy::Kind::kSharded:
      return Mode::kSharded;
    case SyncStrategy::Kind::kLocalSgd:
      return Mode::kLocalSgd;
    case SyncStrategy::Kind::kOdsgd:
    case SyncStrategy::Kind::kSsdsgd:
    case SyncStrategy::Kind::kCdsgd:
      return Mode::kPsDelayed;
    default:
      return servers ? Mode::kPsSync : Mode::kRing;
  }
}

Simulation::Simulation(const SimOptions& options)
    : o_(options),
      cluster_(options.cluster),
      strategy_(SyncStrategy::parse(options.sync)),
      tensors_(options.profile.tensors()) {
  cluster_.validate();
  if (o_.steps < 3) throw ConfigError(fmt::format("--steps must be at least 3, not {}", o_.steps));
  if (auto ps = psOptionsFor(strategy_, o_.strategy, cluster_.workers, 0.1, 0.9))
    placement_ = ps->placement;
  mode_ = modeOf(strategy_, placement_.has_value());
  plan_ = planCompression(o_.compression, tensors_, 0.9);
  if (placement_ && plan_.any())
    throw ConfigError("--compress does not combine with parameter servers",
                      {.hint = "cdsgd has its own 2-bit codec"});
  EngineOptions engine{
      .schedule = o_.schedule, .compression = o_.compression, .sharded = mode_ == Mode::kSharded};
  if (!placement_) GradientEngine::validate(engine, tensors_);
  layout_ = planLayout(tensors_, o_.schedule, plan_.groups());
  costs_ = unitCosts(cluster_, layout_, tensors_, plan_, o_.codecSecondsPerElement);
  gate_ = mode_ == Mode::kPsDelayed ? Gate::kPreviousStep
          : (mode_ == Mode::kPsSync || mode_ == Mode::kSharded || o_.schedule.prioritized())
              ? Gate::kPerLayer
              : Gate::kAll;
  const int period = mode_ == Mode::kLocalSgd ? strategy_.parameter : 1;
  measuredFrom_ = period * ((2 + period - 1) / period);
  lastStep_ = measuredFrom_ + period * std::max(1, (o_.steps - measuredFrom_) / period);
  for (size_t l = 0; l < o_.profile.layers.size(); ++l) {
    firstTensorOf_.push_back(layerOfTensor_.size());
    for (size_t t = 0; t < o_.profile.layers[l].tensors.size(); ++t) layerOfTensor_.push_back(l);
  }
  firstTensorOf_.push_back(layerOfTensor_.size());
  unitsOfLayer_.resize(o_.profile.layers.size());
  for (size_t u = 0; u < layout_.units.size(); ++u)
    for (int t : layout_.units[u].tensors) {
      auto& units = unitsOfLayer_[layerOfTensor_[t]];
      if (units.empty() || units.back() != u) units.push_back(u);
    }
  readySteps_.assign(layout_.units.size(), 0);
  doneSteps_.assign(layout_.units.size(), 0);
  order_ = fixedOrder();
  if (o_.schedule.prioritized()) {
    std::vector<int> priorities;
    for (const CommUnit& unit : layout_.units) priorities.push_back(unit.priority);
    scheduler_ = std::make_unique<PriorityScheduler>(priorities, o_.schedule.window);
  }
  if (placement_) {
    serverIn_.resize(placement_->servers);
    serverOut_.resize(placement_->servers);
  }
}

std::vector<Simulation::Op> Simulation::fixedOrder() const {
  std::vector<Op> order;
  const size_t units = layout_.units.size();
  const Op::Kind kind = placement_                ? Op::Kind::kPush
                        : mode_ == Mode::kSharded ? Op::Kind::kReduceScatter
                                                  : Op::Kind::kExchange;
  for (size_t u = 0; u < units; ++u) order.push_back({kind, u});
  if (mode_ == Mode::kSharded)
    for (size_t u = units; u-- > 0;) order.push_back({Op::Kind::kAllgather, u});
  return order;
}

// ---- compute thread: forward layer by layer (each waiting for its parameters as the gate
// says), backward in reverse, then whatever the strategy does between steps.

void Simulation::computeFor(double seconds, std::function<void()> then) {
  computeBusy_ = true;
  queue_.at(queue_.now() + seconds, [this, then = std::move(then)] {
    computeBusy_ = false;
    then();
    tryCompute();
  });
}

bool Simulation::allUnitsDone(int steps) const {
  return steps == 0 || (steps < static_cast<int>(unitsDone_.size()) &&
                        unitsDone_[steps] == layout_.units.size());
}

// Amortised O(1): results only accumulate, so a unit found done stays done for this wait.
bool Simulation::layerParametersReady(size_t layer) {
  if (gate_ != Gate::kPerLayer) return true;  // the step boundary already waited
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
      return computeFor(layers[layer_].forwardSeconds, [this, &layers] {
        if (++layer_ == layers.size()) phase_ = Phase::kBackward, layer_ = layers.size() - 1;
      });
    case Phase::kBackward:
      return computeFor(layers[layer_].backwardSeconds, [this] {
        gradientsReady(layer_);
        if (layer_ == 0) return endBackward();
        --layer_;
      });
    case Phase::kAfterBackward:
      return afterBackward();
    case Phase::kAwaitAverage:
      if (!allUnitsDone((step_ + 1) / strategy_.parameter)) return;
      nextStep();
      return tryCompute();
    case Phase::kDone:
      return;
  }
}

// What follows backward: wait for the step's results and run the optimizer (fifo, wfbp,
// fusion), go straight on (the next forward waits per layer), wait for the previous step's
// pulls before the local step (delayed), or the local step and every H steps an average.
void Simulation::afterBackward() {
  const double update = o_.profile.updateSeconds;
  switch (gate_) {
    case Gate::kPerLayer:
      nextStep();
      return tryCompute();
    case Gate::kPreviousStep:
      if (!allUnitsDone(step_)) return;
      return computeFor(update, [this] { nextStep(); });
    case Gate::kAll:
      if (mode_ == Mode::kLocalSgd) {
        return computeFor(update, [this] {
          phase_ = Phase::kAwaitAverage;
          if (exchangesThisStep(step_))
            for (size_t u = 0; u < layout_.units.size(); ++u) unitReady(u);
        });
      }
      if (!allUnitsDone(step_ + 1)) return;
      return computeFor(update, [this] { nextStep(); });
  }
}

// Gradients are sent as backward produces them (local SGD sends parameters after its step).
bool Simulation::sendsGradients() const {
  return mode_ != Mode::kLocalSgd;
}

void Simulation::gradientsReady(size_t layer) {
  if (!sendsGradients() || o_.schedule.kind == ScheduleSpec::Kind::kFifo) return;
  for (size_t t = firstTensorOf_[layer]; t < firstTensorOf_[layer + 1]; ++t)
    for (int u = layout_.unitOf[t]; u < layout_.unitOf[t] + layout_.unitCount[t]; ++u)
      if (--tensorsWaiting_[u] == 0) unitReady(u);
}

void Simulation::endBackward() {
  phase_ = Phase::kAfterBackward;
  if (sendsGradients() && o_.schedule.kind == ScheduleSpec::Kind::kFifo)
    for (size_t u = 0; u < layout_.units.size(); ++u) unitReady(u);
}

bool Simulation::exchangesThisStep(int step) const {
  return mode_ != Mode::kLocalSgd || (step + 1) % strategy_.parameter == 0;
}

// ---- communication thread: one operation at a time, every step's in the same fixed order, or
// (p3) in the order the real PriorityScheduler picks with its credit window.

void Simulation::unitReady(size_t unit) {
  if (++readySteps_[unit] == commStep_ + 1 && scheduler_) scheduler_->ready(unit);
  pump();
}

std::optional<Simulation::Op> Simulation::nextOp() {
  const Op::Kind exchange = placement_ ? Op::Kind::kPush : Op::Kind::kExchange;
  if (scheduler_) {
    while (auto pick = scheduler_->next()) committed_.emplace_back(pick->unit, queue_.now());
    if (committed_.empty()) return std::nullopt;
    const auto [unit, pickedAt] = committed_.front();
    committed_.pop_front();
    pickedAt_ = pickedAt;
    return Op{exchange, unit};
  }
  if (nextInOrder_ == order_.size()) return std::nullopt;
  const Op op = order_[nextInOrder_];
  if (op.kind != Op::Kind::kAllgather && readySteps_[op.unit] <= commStep_) return std::nullopt;
  ++nextInOrder_;
  return op;
}

void Simulation::pump() {
  if (commBusy_) return;
  if (std::optional<Op> op = nextOp()) startOp(*op);
}

// p3 on the ring: rank 0 sends each pick to the others, who start the unit's allreduce once it
// arrives (one small message after the pick; hidden when the window picked it early enough).
double Simulation::decisionWait() const {
  if (cluster_.workers == 1) return 0;
  const double arrives = pickedAt_ + transferSeconds(cluster_, 0, 1, sizeof(uint64_t));
  return std::max(0.0, arrives - queue_.now());
}

double Simulation::updateSeconds(size_t unit) const {
  return o_.profile.updateSeconds * static_cast<double>(layout_.units[unit].elements) /
         static_cast<double>(layout_.totalElements);
}

void Simulation::startOp(const Op& op) {
  const CommUnit& unit = layout_.units[op.unit];
  const UnitCost& cost = costs_[op.unit];
  const double p = cluster_.workers;
  double seconds = 0;
  double bytes = static_cast<double>(unit.elements * sizeof(float)) * (p - 1) / p;
  switch (op.kind) {
    case Op::Kind::kExchange:
      seconds = cost.allreduceSeconds + cost.codecSeconds;
      if (scheduler_) seconds += decisionWait() + updateSeconds(op.unit);
      bytes = cost.bytesSent;
      break;
    case Op::Kind::kReduceScatter:  // then SGD on the block this rank owns
      seconds =
          reduceScatterSeconds(cluster_, unit.elements, sizeof(float)) + updateSeconds(op.unit) / p;
      break;
    case Op::Kind::kAllgather:
      seconds = allgatherSeconds(cluster_, unit.elements, sizeof(float));
      break;
    case Op::Kind::kPush:
      bytes = static_cast<double>(pushBytes(op.unit, commStep_));
      seconds = push(op.unit) - queue_.now();
      break;
  }
  if (op.kind != Op::Kind::kAllgather) stepOrder_.push_back(op.unit);
  commBusy_ = true;
  transfers_.push_back({queue_.now(), seconds, bytes});
  queue_.at(queue_.now() + seconds, [this, op] { finishOp(op); });
}

// Every worker pushes the unit to its server at once (workers are alike). A worker's NIC sends
// its host's share (one push per worker on the host) and its communication thread moves on
// when that is out; the push is complete once the server's NIC has taken every remote worker's
// copy, behind the pushes it was already taking. The reply goes back the same way after the
// server's update. Returns when this worker's push is out; the reply completes the unit.
double Simulation::push(size_t unit) {
  const int server = placement_->serverOf(unit);
  const int host = placement_->colocated ? cluster_.hostOf(server) : cluster_.hosts() + server;
  const int g = std::min(cluster_.gpusPerHost, cluster_.workers);
  const int onHost = host < cluster_.hosts() ? std::min(g, cluster_.workers - host * g) : 0;
  const double remote = cluster_.workers - onHost;
  const double bandwidth = remote > 0 ? cluster_.bandwidth : cluster_.localBandwidth;
  const double latency = remote > 0 ? cluster_.latency : cluster_.localLatency;
  const double bytes = static_cast<double>(pushBytes(unit, commStep_));
  const double begin = std::max(queue_.now(), workersOut_.freeAt);
  workersOut_.freeAt = begin + g * bytes / bandwidth;
  serverIn_[server].freeAt =
      std::max(begin, serverIn_[server].freeAt) + std::max(remote, 1.0) * bytes / bandwidth;
  const double pushed = std::max(workersOut_.freeAt, serverIn_[server].freeAt) + latency;
  if (pullsThisStep(commStep_)) {
    const double reply = static_cast<double>(layout_.units[unit].elements * sizeof(float));
    const double applied = std::max(pushed + updateSeconds(unit), serverOut_[server].freeAt);
    serverOut_[server].freeAt = applied + std::max(remote, 1.0) * reply / bandwidth;
    workersIn_.freeAt = std::max(applied, workersIn_.freeAt) + g * reply / bandwidth;
    const double replied = std::max(serverOut_[server].freeAt, workersIn_.freeAt) + latency;
    queue_.at(replied, [this, unit] { unitDone(unit); });
  }
  return workersOut_.freeAt;
}

size_t Simulation::pushBytes(size_t unit, int step) const {
  const size_t elements = layout_.units[unit].elements;
  const bool quantized =
      strategy_.kind == SyncStrategy::Kind::kCdsgd && (step + 1) % strategy_.parameter != 0;
  return quantized ? twoBitBytes(elements) : elements * sizeof(float);
}

bool Simulation::pullsThisStep(int step) const {
  return strategy_.kind != SyncStrategy::Kind::kSsdsgd || (step + 1) % strategy_.parameter == 0;
}

void Simulation::unitDone(size_t unit) {
  const auto done = static_cast<size_t>(++doneSteps_[unit]);
  if (unitsDone_.size() <= done) unitsDone_.resize(done + 1, 0);
  ++unitsDone_[done];
  tryCompute();
}

void Simulation::finishOp(const Op& op) {
  commBusy_ = false;
  if (op.kind == Op::Kind::kExchange || op.kind == Op::Kind::kAllgather) unitDone(op.unit);
  if (op.kind == Op::Kind::kPush && !pullsThisStep(commStep_)) unitDone(op.unit);
  if (scheduler_) scheduler_->completed(op.unit);
  const size_t opsPerStep = scheduler_ ? layout_.units.size() : order_.size();
  if (++opsDone_ == opsPerStep) {
    lastOrder_ = std::move(stepOrder_);
    stepOrder_.clear();
    ++commStep_;
    opsDone_ = 0;
    nextInOrder_ = 0;
    if (scheduler_) {
      scheduler_->reset();
      for (size_t u = 0; u < readySteps_.size(); ++u)
        if (readySteps_[u] > commStep_) scheduler_->ready(u);
    }
  }
  pump();
}

SimResult Simulation::run() {
  tensorsWaiting_.assign(layout_.units.size(), 0);
  queue_.at(0, [this] { tryCompute(); });
  queue_.run();
  if (static_cast<int>(stepStart_.size()) != lastStep_ + 1)
    throw InternalError(fmt::format("the simulation stalled in step {} (phase {}, layer {})", step_,
                                    static_cast<int>(phase_), layer_));
  const double from = stepStart_[measuredFrom_];
  const double to = stepStart_[lastStep_];
  const double steps = lastStep_ - measuredFrom_;
  SimResult result;
  result.stepSeconds = (to - from) / steps;
  for (const Transfer& t : transfers_) {
    if (t.start < from || t.start >= to) continue;
    result.commSeconds += t.seconds / steps;
    result.bytesSentPerStep += t.bytes / steps;
  }
  const ModelProfile& profile = o_.profile;
  const double update = gate_ == Gate::kPerLayer ? 0 : profile.updateSeconds;
  result.computeSeconds = profile.forwardSeconds() + profile.backwardSeconds() + update;
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
  SimResult result = Simulation(options).run();
  SimOptions alone = options;  // the same step on one worker: no communication
  alone.cluster.workers = 1;
  alone.strategy.servers = 0;
  alone.strategy.ps = false;
  if (SyncStrategy::parse(options.sync).needsServers()) alone.sync = "ssgd";
  result.scalingEfficiency = Simulation(alone).run().stepSeconds / result.stepSeconds;
  return result;
}

}  // namespace gradsync::sim
