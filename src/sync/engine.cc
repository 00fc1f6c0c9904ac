#include "sync/engine.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "common/tags.h"
#include "compress/registry.h"
#include "gradsync/error.h"
#include "gradsync/hierarchical.h"
#include "ps/served_units.h"
#include "sync/ring_executor.h"

namespace gradsync {
namespace {

void checkExchanged(const EngineOptions& options, const std::vector<TensorShape>& tensors) {
  if (options.exchanged.empty()) return;
  GS_CHECK(options.sharded && !options.servers);
  for (const ExchangedTensor& e : options.exchanged) {
    GS_CHECK(e.tensor >= 0 && static_cast<size_t>(e.tensor) < tensors.size());
    const TensorShape& t = tensors[e.tensor];
    GS_CHECK(t.dims.size() == 2 && e.columns > 0 && t.elements % e.columns == 0);
  }
}

void checkSharded(const EngineOptions& options, const CompressionPlan& plan) {
  if (!options.sharded) return;
  if (options.schedule.prioritized()) {
    throw ConfigError("--sync sharded does not combine with --schedule p3",
                      {.hint = "sharded orders its own traffic (reduce-scatter during backward, "
                               "allgather in forward order); use fifo, wfbp or fusion:MB"});
  }
  if (plan.any()) {
    throw ConfigError(
        "--sync sharded exchanges dense gradients: it does not combine with --compress",
        {.hint = "drop --compress, or use --sync ssgd"});
  }
}

// 1-bit Adam in the engine (UpdateRule::varianceFrozenAfter) turns each gradient into the
// momentum from the moments of every element, which only the ring's update mode over the whole
// model keeps on every rank (sharded keeps its block's and exchanges dense gradients anyway).
void checkMomentumExchange(const EngineOptions& options) {
  const UpdateRule& rule = options.update;
  if (rule.varianceFrozenAfter == 0) return;
  if (rule.kind != UpdateRule::Kind::kAdam && rule.kind != UpdateRule::Kind::kAdamW) {
    throw ConfigError(fmt::format("1-bit Adam (compressed momentum) needs Adam or AdamW, not {}",
                                  rule.describe()),
                      {.hint = "use torch.optim.Adam or AdamW, or drop compressed momentum"});
  }
  if (options.servers || options.sharded || !Engine::updatesParameters(options)) {
    throw ConfigError(
        "1-bit Adam (compressed momentum) in the engine runs with p3 over the ring only",
        {.hint = "use --schedule p3 with --sync ssgd, or wfbp where the optimizer steps"});
  }
}

// Through servers the pushes' plan (which also refuses methods that cannot push); over the ring
// the exchanges' (DGC takes the optimizer's momentum).
CompressionPlan planFor(const EngineOptions& options, const std::vector<TensorShape>& tensors) {
  checkExchanged(options, tensors);
  checkMomentumExchange(options);
  if (options.servers) return planPushes(options.compression, tensors);
  CompressionPlan plan = planCompression(options.compression, tensors, options.update.momentum);
  checkSharded(options, plan);
  return plan;
}

std::vector<size_t> exchangedColumns(const EngineOptions& options, size_t tensors) {
  std::vector<size_t> columns;
  if (options.exchanged.empty()) return columns;
  columns.assign(tensors, 0);
  for (const ExchangedTensor& e : options.exchanged) columns[e.tensor] = e.columns;
  return columns;
}

StepPlanner::Route routeOf(const EngineOptions& options) {
  return options.servers   ? StepPlanner::Route::kServers
         : options.sharded ? StepPlanner::Route::kSharded
                           : StepPlanner::Route::kRing;
}

// p3 without slice= over a link the transport was told (--bandwidth, --latency): that link's
// slice (p3SliceForLink), as simulate and tune take it; P3's 40,000 where the link is unknown,
// and through servers (a slice there is a push and a pull, not a ring).
EngineOptions withLinkSlice(EngineOptions options, const Transport& transport) {
  ScheduleSpec& schedule = options.schedule;
  const TransportOptions& told = transport.options();
  const bool known = told.bandwidthBytesPerSec > 0 || told.latency.count() > 0;
  if (!schedule.prioritized() || schedule.sliceGiven || options.servers || !known) return options;
  const RingLink link = ringLinkOf(transport);
  schedule.sliceElements = p3SliceForLink(transport.size(), link.latencySec, link.bytesPerSec);
  GS_LOG(kInfo, "p3: slices of {} elements for the link told ({} us, {:.3g} B/s)",
         schedule.sliceElements, link.latencySec * 1e6, link.bytesPerSec);
  return options;
}

}  // namespace

StepStats& StepStats::operator+=(const StepStats& other) {
  commSeconds += other.commSeconds;
  bytesSent += other.bytesSent;
  denseBytes += other.denseBytes;
  encodeSeconds += other.encodeSeconds;
  decodeSeconds += other.decodeSeconds;
  asyncPushes += other.asyncPushes;
  stalenessSum += other.stalenessSum;
  stalenessMax = std::max(stalenessMax, other.stalenessMax);
  return *this;
}

void Engine::validate(const EngineOptions& options, const std::vector<TensorShape>& tensors) {
  planFor(options, tensors);
}

Engine::Engine(Transport& transport, const std::vector<TensorShape>& tensors, EngineOptions options,
               std::vector<std::span<float>> parameters)
    : transport_(transport),
      tensors_(tensors),
      options_(withLinkSlice(std::move(options), transport)),
      plan_(planFor(options_, tensors)),
      layout_(planLayout(tensors, options_.schedule,
                         isolateExchanged(plan_.groups(), options_.exchanged, tensors.size()))),
      updates_(updatesParameters(options_)),
      workers_(options_.servers ? options_.servers->placement.workers : transport.size()),
      gradients_(layout_.totalElements),
      planner_(layout_, options_.schedule, routeOf(options_),
               !options_.servers && transport.rank() != 0 ? StepPlanner::Role::kFollower
                                                          : StepPlanner::Role::kLeader,
               [this](const PlannedOp& pick) { announce(pick); }),
      announcements_(layout_.units.size()),
      ready_(tensors.size(), false),
      waitingIn_(layout_.units.size()),
      readyAt_(layout_.units.size(), Nanos{0}),
      doneSteps_(layout_.units.size(), 0),
      warnedUnused_(tensors.size(), false) {
  GS_CHECK(!updates_ || parameters.size() == tensors_.size());
  for (size_t u = 0; u < layout_.units.size(); ++u) waitingIn_[u] = layout_.units[u].tensors.size();
  guard_ = makeGuard();
  if (guard_ && transport.rank() == 0) {
    if (const std::string notice = guard_->startNotice(); !notice.empty()) {
      GS_LOG(kWarn, "{}", notice);
    }
  }
  executor_ = makeExecutor(std::move(parameters));
  for (size_t lane = 0; lane < lanes(); ++lane) {
    threads_.emplace_back([this, rank = transport.rank()] {
      setThreadLogRank(rank);
      communicate();
    });
  }
}

// Every unit runs on its own stream (ring_executor.h), so p3's window of committed slices may
// all be in flight, and sharded:concurrent=N's N operations; everything else runs one operation
// at a time (a fixed order, or pushes whose replies already overlap).
size_t Engine::lanes() const {
  const ScheduleSpec& s = options_.schedule;
  if (options_.sharded) return std::max<size_t>(options_.concurrent, 1);
  return s.prioritized() && s.concurrent && !options_.servers ? std::max<size_t>(s.window, 1) : 1;
}

std::unique_ptr<Executor> Engine::makeExecutor(std::vector<std::span<float>> parameters) {
  if (options_.servers) {
    return std::make_unique<PsWorkerClient>(transport_,
                                            WorkerSetup{.tensors = tensors_,
                                                        .layout = layout_,
                                                        .plan = plan_,
                                                        .gradients = gradients_,
                                                        .parameters = std::move(parameters),
                                                        .lr = options_.update.lr,
                                                        .seed = options_.seed,
                                                        .clock = options_.clock,
                                                        .guard = guard_.get()},
                                            *options_.servers, static_cast<EngineEvents&>(*this));
  }
  return std::make_unique<RingExecutor>(
      transport_, RingSetup{.tensors = tensors_,
                            .layout = layout_,
                            .plan = plan_,
                            .gradients = gradients_,
                            .parameters = std::move(parameters),
                            .updates = updates_,
                            .sharded = options_.sharded,
                            .exchangedColumns = exchangedColumns(options_, tensors_.size()),
                            .rule = options_.update,
                            .seed = options_.seed,
                            .clock = options_.clock,
                            .guard = guard_.get()});
}

std::unique_ptr<CompressionGuard> Engine::makeGuard() const {
  if (!options_.compression.guard || !plan_.any()) return nullptr;
  std::vector<GuardedUnit> units;
  for (const CommUnit& unit : layout_.units) {
    const CompressSpec& spec = plan_.perTensor[unit.tensors.front()];
    GuardedUnit guarded{.compressed = !spec.dense(),
                        .tensors = unit.tensors,
                        .method = spec.dense() ? "" : spec.toString()};
    for (int t : unit.tensors) guarded.names.push_back(tensors_[t].name);
    const double momentum = options_.update.momentum;
    const double decay = spec.errorFeedback ? spec.errorFeedbackDecay : 1;
    if (plan_.absorbsMomentum(unit.tensors.front()) && momentum < 1) {
      guarded.momentumScale = 1 / (1 - momentum);  // DGC's velocity
      guarded.watchAlignment = false;
    } else if (decay > 0 && decay < 1) {
      guarded.momentumScale = 1 / (1 - decay);  // ef_decay: the residual is a momentum
      guarded.watchAlignment = false;
    }
    guarded.failsUnderOptimizer =
        options_.compression.adamFamily && !spec.dense() && failsUnderAdam(spec.method);
    units.push_back(std::move(guarded));
  }
  return std::make_unique<CompressionGuard>(GuardOptions{}, plan_.warmupSteps, std::move(units));
}

void Engine::watchCompression(uint64_t ended) {
  if (!guard_ || !guard_->checksAt(ended)) return;
  const uint64_t sampled = guard_->sampledStep(ended);
  {
    // Done already but in update mode's corner cases (a parameter no layer waits for).
    std::unique_lock<std::mutex> lock(mutex_);
    waitUntil(
        lock,
        [&] {
          return std::all_of(doneSteps_.begin(), doneSteps_.end(),
                             [&](uint64_t s) { return s > sampled; });
        },
        "the step the compression guard measured");
  }
  // Over servers each worker decides for its own pushes and says so; over the ring every rank
  // decides alike and rank 0 says so.
  const bool alone = options_.servers.has_value();
  const std::vector<GuardEvent> events = alone ? guard_->checkAlone(transport_.rank(), ended)
                                               : guard_->check(transport_, tags::kGuard, ended);
  for (const GuardEvent& event : events) {
    if (alone || transport_.rank() == 0) GS_LOG(kWarn, "{}", event.reason);
  }
}

void Engine::reportLoss(double loss) {
  if (guard_) guard_->observeLoss(nextStep(), loss);
}

std::vector<GuardEvent> Engine::guardEvents() const {
  return guard_ ? guard_->events() : std::vector<GuardEvent>{};
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& thread : threads_) thread.join();
  for (Announcement& announcement : announcements_) settleSends(announcement.sends);
  executor_.reset();  // a server client tells the servers it is done; its threads still report
}

std::span<float> Engine::slot(int t) {
  return {gradients_.data() + layout_.offsetOf[t], tensors_[t].elements};
}

void Engine::markUnitReady(size_t unit) {
  readyAt_[unit] = options_.clock->now();
  planner_.unitReady(unit);
}

// fifo marks every unit ready at the end of backward instead (endBackward).
void Engine::markTensorReady(int t) {
  ready_[t] = true;
  if (!options_.schedule.overlapsBackward()) return;
  for (int u = layout_.unitOf[t]; u < layout_.unitOf[t] + layout_.unitCount[t]; ++u) {
    if (--waitingIn_[u] == 0) markUnitReady(u);
  }
}

void Engine::markReady(int t) {
  // Outside the lock, which the communication threads need meanwhile: the step before updated
  // t before this backward's forward read it, and t is not ready yet.
  const UpdateRule& rule = options_.update;
  if (rule.varianceFrozenAfter > 0 && rule.exchangesMomenta(nextStep() + 1)) {
    executor_->gradientToMomentum(t, slot(t));
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GS_CHECK(!ready_[t]);
    markTensorReady(t);
  }
  cv_.notify_all();
}

void Engine::endBackward() {
  uint64_t ended = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    for (size_t t = 0; t < tensors_.size(); ++t) {
      if (ready_[t]) continue;
      if (!warnedUnused_[t]) {
        GS_LOG(kWarn, "parameter '{}' got no gradient this step; communicating zeros for it",
               tensors_[t].name);
        warnedUnused_[t] = true;
      }
      std::span<float> s = slot(static_cast<int>(t));
      std::fill(s.begin(), s.end(), 0.0f);
      if (options_.update.exchangesMomenta(stepsEnded_ + 1)) {
        executor_->gradientToMomentum(static_cast<int>(t), s);
      }
      markTensorReady(static_cast<int>(t));
    }
    if (!options_.schedule.overlapsBackward()) {
      for (size_t u = 0; u < layout_.units.size(); ++u) markUnitReady(u);
    }
    std::fill(ready_.begin(), ready_.end(), false);
    for (size_t u = 0; u < layout_.units.size(); ++u)
      waitingIn_[u] = layout_.units[u].tensors.size();
    ended = ++stepsEnded_;
  }
  cv_.notify_all();
  watchCompression(ended);
}

std::chrono::milliseconds Engine::waitBound() const {
  return transport_.options().timeout * static_cast<int>(planner_.opsPerStep() + 1);
}

template <typename Done>
void Engine::waitUntil(std::unique_lock<std::mutex>& lock, Done done, const std::string& what) {
  const bool finished = cv_.wait_for(lock, waitBound(), [&] { return error_ || done(); });
  if (error_) std::rethrow_exception(error_);
  if (!finished) throw InternalError(what + " never completed", {.rank = transport_.rank()});
}

void Engine::waitFor(int t) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (int u = layout_.unitOf[t]; u < layout_.unitOf[t] + layout_.unitCount[t]; ++u) {
    waitUntil(
        lock, [&] { return doneSteps_[u] >= stepsEnded_; },
        fmt::format("the communication of '{}'", tensors_[t].name));
  }
}

void Engine::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  waitUntil(
      lock,
      [&] {
        return active_ == 0 && std::all_of(doneSteps_.begin(), doneSteps_.end(),
                                           [&](uint64_t s) { return s >= stepsEnded_; });
      },
      "the steps' communication");
}

void Engine::finishStep() {
  endBackward();
  drain();
}

std::string Engine::whyNotReschedulable(const EngineOptions& o) {
  if (o.servers) return "parameter servers";
  if (o.sharded) return "--sync sharded";
  if (o.compression.spec != "none" || !o.compression.overrides.empty())
    return "compression (its state is kept per communication unit)";
  if (updatesParameters(o) && o.update.kind != UpdateRule::Kind::kSgd)
    return "an update rule other than SGD in the engine (only SGD's velocity carries over)";
  return "";
}

uint64_t Engine::nextStep() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stepsEnded_;
}

void Engine::setStep(uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  GS_CHECK(active_ == 0);
  planner_.setStep(step);
  if (stateCounted_) {  // the state keeps its own count of steps taken
    stateOrigin_ += static_cast<int64_t>(step) - static_cast<int64_t>(stepsEnded_);
    executor_->setStateOrigin(stateOrigin_);
  }
  stepsEnded_ = step;
  doneSteps_.assign(layout_.units.size(), step);
}

StepStats Engine::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

void Engine::markDone(size_t unit, uint64_t step) {
  doneSteps_[unit] = std::max(doneSteps_[unit], step + 1);
}

void Engine::unitDone(size_t unit, uint64_t step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    markDone(unit, step);
  }
  cv_.notify_all();
}

// Communication time is the time during which an operation or a reply is in flight.
void Engine::busyLocked(int delta) {
  if (active_ == 0 && delta > 0) busySince_ = options_.clock->now();
  active_ += delta;
  if (delta < 0 && active_ == 0) totals_.commSeconds += secondsSince(*options_.clock, busySince_);
}

void Engine::busy(int delta) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    busyLocked(delta);
  }
  cv_.notify_all();
}

void Engine::pushAnswered(uint64_t staleness) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++totals_.asyncPushes;
  totals_.stalenessSum += staleness;
  totals_.stalenessMax = std::max(totals_.stalenessMax, staleness);
}

void Engine::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace gradsync
