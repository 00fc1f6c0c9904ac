#include "sync/gradient_engine.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// The gradient stream (tags.h).
const CollectiveOptions kGradientStream{.tag = tags::kGradients};

// What a dense ring allreduce of `elements` floats makes one rank send: its share of the
// reduce-scatter and of the allgather, (P-1)/P of the buffer each.
uint64_t denseRingBytes(size_t elements, int ranks) {
  return 2 * (static_cast<uint64_t>(ranks) - 1) * elements * sizeof(float) /
         static_cast<uint64_t>(ranks);
}

void checkCombination(const EngineOptions& options, const CompressionPlan& plan) {
  if (!options.sharded) return;
  if (options.schedule.prioritized()) {
    throw ConfigError("--sync sharded does not combine with --schedule p3",
                      {.hint = "sharded orders its own traffic (reduce-scatter during backward, "
                               "allgather in forward order); use fifo, wfbp or fusion:MB"});
  }
  for (const CompressSpec& spec : plan.perTensor) {
    if (!spec.dense()) {
      throw ConfigError(
          "--sync sharded exchanges dense gradients: it does not combine with "
          "--compress",
          {.hint = "drop --compress, or use --sync ssgd"});
    }
  }
}

}  // namespace

void GradientEngine::validate(const EngineOptions& options,
                              const std::vector<TensorShape>& tensors) {
  checkCombination(options, planCompression(options.compression, tensors, options.update.momentum));
}

GradientEngine::GradientEngine(Transport& transport, const std::vector<TensorShape>& tensors,
                               EngineOptions options, std::vector<std::span<float>> parameters)
    : transport_(transport),
      tensors_(tensors),
      options_(std::move(options)),
      plan_(planCompression(options_.compression, tensors, options_.update.momentum)),
      layout_(planLayout(tensors, options_.schedule, plan_.groups())),
      updates_(updatesParameters(options_)),
      parameters_(std::move(parameters)),
      flat_(layout_.totalElements),
      order_(fixedOrder()),
      ready_(tensors.size(), false),
      opsLeftOf_(tensors.size(), 0),
      updatedSteps_(tensors.size(), 0),
      warnedUnused_(tensors.size(), false) {
  checkCombination(options_, plan_);
  GS_CHECK(!updates_ || parameters_.size() == tensors_.size());
  size_t largest = 0;
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const CommUnit& unit = layout_.units[u];
    std::vector<TensorShape> shapes = unitShapes(layout_, u, tensors_);
    compressors_.push_back(makeCompressor(plan_.perTensor[unit.tensors[0]], shapes));
    if (compressors_.back()) largest = std::max(largest, unit.elements);
  }
  sent_.resize(largest);
  if (updates_) {
    for (const CommUnit& unit : layout_.units) {
      velocityAt_.push_back(options_.sharded ? velocity_.size() : unit.offset);
      size_t own = options_.sharded
                       ? blockOf(unit.elements, transport.size(), transport.rank()).size()
                       : unit.elements;
      velocity_.resize(velocity_.size() + own, 0.0f);
    }
    if (options_.update.stateSlots() == 2) secondMoment_.assign(velocity_.size(), 0.0f);
  }
  opsPerStep_ = options_.schedule.prioritized() ? layout_.units.size() : order_.size();
  if (options_.schedule.prioritized()) {
    decisions_.assign(layout_.units.size(), 0);
    if (transport.rank() == 0) {
      scheduler_ =
          std::make_unique<PriorityScheduler>(prioritiesOf(layout_), options_.schedule.window);
    }
  }
  resetStep();
  thread_ = std::thread([this, rank = transport.rank()] {
    setThreadLogRank(rank);
    communicate();
  });
}

GradientEngine::~GradientEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

// Allreduce per unit in unit order; sharded: reduce-scatter per unit in unit order (backward's),
// then allgather per unit in reverse (forward's order: the next forward needs those first).
// p3 has no fixed order.
std::vector<GradientEngine::Op> GradientEngine::fixedOrder() const {
  std::vector<Op> order;
  if (options_.schedule.prioritized()) return order;
  const size_t units = layout_.units.size();
  for (size_t u = 0; u < units; ++u) {
    order.push_back({options_.sharded ? Op::Kind::kReduceScatter : Op::Kind::kAllreduce, u});
  }
  if (options_.sharded) {
    for (size_t u = units; u-- > 0;) order.push_back({Op::Kind::kAllgather, u});
  }
  return order;
}

std::span<float> GradientEngine::slot(int t) {
  return {flat_.data() + layout_.offsetOf[t], tensors_[t].elements};
}

void GradientEngine::markUnitReady(size_t unit) {
  readyAt_[unit] = options_.clock->now();
  if (scheduler_) scheduler_->ready(unit);
}

void GradientEngine::markTensorReady(int t) {
  ready_[t] = true;
  stepStarted_ = true;
  for (int u = layout_.unitOf[t]; u < layout_.unitOf[t] + layout_.unitCount[t]; ++u) {
    if (--waitingIn_[u] == 0) markUnitReady(u);
  }
}

void GradientEngine::markReady(int t) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GS_CHECK(!ready_[t]);
    markTensorReady(t);
  }
  cv_.notify_all();
}

bool GradientEngine::opStartable(const Op& op) const {
  if (op.kind == Op::Kind::kAllgather) return true;  // every reduce-scatter came before
  return waitingIn_[op.unit] == 0 && (options_.schedule.overlapsBackward() || backwardDone_);
}

std::optional<GradientEngine::Op> GradientEngine::nextOp(std::unique_lock<std::mutex>& lock) {
  if (options_.schedule.prioritized()) return nextPrioritized(lock);
  cv_.wait(lock, [&] {
    return stop_ || (!error_ && opsStarted_ < order_.size() && opStartable(order_[opsStarted_]));
  });
  if (stop_) return std::nullopt;
  return order_[opsStarted_++];
}

// Rank 0 picks (committing as many units as its window allows, and sending each pick to every
// other rank as it is made); the others receive the picks in order and follow them, each pick
// once the unit is ready here too.
std::optional<GradientEngine::Op> GradientEngine::nextPrioritized(
    std::unique_lock<std::mutex>& lock) {
  if (scheduler_) {
    cv_.wait(lock, [&] {
      if (stop_) return true;
      if (error_) return false;
      while (auto pick = scheduler_->next()) {
        size_t k = opsStarted_ + committed_.size();
        decisions_[k] = pick->unit | (static_cast<uint64_t>(pick->overtook) << 32);
        // No wait needed: the transport keeps the send's Work, and decisions_[k] outlives the
        // send, since a follower receives every pick of a step before the step can complete.
        for (int peer = 1; peer < transport_.size(); ++peer) {
          transport_.send(peer, tags::kP3Decision, &decisions_[k], sizeof(decisions_[k]));
        }
        committed_.push_back({Op::Kind::kAllreduce, pick->unit, pick->overtook});
      }
      return !committed_.empty();
    });
    if (stop_) return std::nullopt;
    Op op = committed_.front();
    committed_.pop_front();
    ++opsStarted_;
    return op;
  }
  cv_.wait(lock, [&] { return stop_ || (!error_ && stepStarted_ && opsStarted_ < opsPerStep_); });
  if (stop_) return std::nullopt;
  uint64_t& decision = decisions_[opsStarted_++];
  lock.unlock();
  std::exception_ptr failure;
  try {
    transport_.recv(0, tags::kP3Decision, &decision, sizeof(decision))->wait();
  } catch (...) {
    failure = std::current_exception();
  }
  lock.lock();
  if (failure) std::rethrow_exception(failure);
  Op op{Op::Kind::kAllreduce, decision & 0xffffffffu, decision >> 32};
  if (op.unit >= layout_.units.size()) {
    throw ProtocolError(fmt::format("rank 0 picked unit {} of {}", op.unit, layout_.units.size()),
                        {.rank = transport_.rank()});
  }
  cv_.wait(lock, [&] { return stop_ || waitingIn_[op.unit] == 0; });
  if (stop_) return std::nullopt;
  return op;
}

bool GradientEngine::exchangeUnit(size_t unit, ExchangeStats& stats) {
  const CommUnit& u = layout_.units[unit];
  std::span<float> data{flat_.data() + u.offset, u.elements};
  Compressor* compressor = compressors_[unit].get();
  if (compressor == nullptr || step_ < static_cast<uint64_t>(plan_.warmupSteps)) {
    allreduce(transport_, data, ReduceOp::kAverage, kGradientStream);
    return false;
  }
  ExchangeContext context{transport_, kGradientStream, step_, options_.seed, options_.clock};
  compressor->exchange(context, data, {sent_.data(), u.elements}, stats);
  return true;
}

bool GradientEngine::execute(const Op& op, ExchangeStats& stats) {
  const CommUnit& unit = layout_.units[op.unit];
  switch (op.kind) {
    case Op::Kind::kAllreduce: {
      bool compressed = exchangeUnit(op.unit, stats);
      if (updates_) update(op.unit, 0, unit.elements, velocityAt_[op.unit]);
      return compressed;
    }
    case Op::Kind::kReduceScatter: {
      reduceScatter(transport_, {flat_.data() + unit.offset, unit.elements}, ReduceOp::kAverage,
                    kGradientStream);
      Block own = blockOf(unit.elements, transport_.size(), transport_.rank());
      update(op.unit, own.begin, own.end, velocityAt_[op.unit]);
      return false;
    }
    case Op::Kind::kAllgather:
      allgatherParameters(op.unit);
      return false;
  }
  return false;
}

void GradientEngine::communicate() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    std::optional<Op> op;
    try {
      op = nextOp(lock);
    } catch (...) {
      error_ = std::current_exception();
      cv_.notify_all();
      continue;
    }
    if (!op) return;
    Nanos readyAt = op->kind == Op::Kind::kAllgather ? Nanos{0} : readyAt_[op->unit];
    lock.unlock();
    const Nanos start = options_.clock->now();
    uint64_t bytesBefore = transport_.bytesSent();
    ExchangeStats exchange;
    bool compressed = false;
    std::exception_ptr error;
    try {
      compressed = execute(*op, exchange);
    } catch (...) {
      error = std::current_exception();
    }
    double seconds = secondsSince(*options_.clock, start);
    uint64_t bytes = transport_.bytesSent() - bytesBefore;
    if (trace_ != nullptr && trace_->active())
      traceOp(*op, readyAt, start, bytes, compressed ? &exchange : nullptr);
    lock.lock();
    stepStats_.commSeconds += seconds;
    stepStats_.bytesSent += bytes;
    if (op->kind != Op::Kind::kAllgather) {  // sharded: the pair moves what one allreduce does
      stepStats_.denseBytes += denseRingBytes(layout_.units[op->unit].elements, transport_.size());
    }
    stepStats_.encodeSeconds += exchange.encodeSeconds;
    stepStats_.decodeSeconds += exchange.decodeSeconds;
    if (error) {
      error_ = error;
    } else {
      finishOp(*op);
    }
    cv_.notify_all();
  }
}

void GradientEngine::finishOp(const Op& op) {
  ++opsDone_;
  if (scheduler_) scheduler_->completed(op.unit);
  if (updates_ && op.kind != Op::Kind::kReduceScatter) {
    for (int t : layout_.units[op.unit].tensors) {
      if (--opsLeftOf_[t] == 0) ++updatedSteps_[t];
    }
  }
  completeStepIfDone();
}

// A step is complete once every operation is done and backward is over (with few ranks, every
// operation can be done before the training thread ends backward).
void GradientEngine::completeStepIfDone() {
  if (opsDone_ < opsPerStep_ || !backwardDone_) return;
  lastStep_ = stepStats_;
  totals_ += stepStats_;
  ++stepsDone_;
  ++step_;
  resetStep();
}

// One or two events on the communication lane: waiting in the queue since the unit was ready,
// and its collective (transfer and reduction overlap inside the pipelined ring, so they form
// one span; a compressed exchange also carries its encode and decode times and its method).
void GradientEngine::traceOp(const Op& op, Nanos readyAt, Nanos start, uint64_t bytes,
                             const ExchangeStats* compressed) {
  const CommUnit& unit = layout_.units[op.unit];
  const int first = unit.tensors.front();
  const std::string name = unitName(op.unit);
  TraceArgs args;
  args.add("tensors", static_cast<int64_t>(unit.tensors.size()))
      .add("elements", static_cast<int64_t>(unit.elements))
      .add("priority", static_cast<int64_t>(unit.priority))
      .add("step", static_cast<int64_t>(step_))
      .add("bytes_sent", static_cast<int64_t>(bytes))
      .add("dense_bytes", static_cast<int64_t>(denseRingBytes(unit.elements, transport_.size())));
  if (options_.schedule.prioritized()) args.add("overtook", static_cast<int64_t>(op.overtook));
  std::string category = op.kind == Op::Kind::kReduceScatter ? "reduce_scatter"
                         : op.kind == Op::Kind::kAllgather   ? "allgather"
                                                             : "allreduce";
  if (compressed != nullptr) {
    const CompressSpec& spec = plan_.perTensor[first];
    category = "compressed";
    args.add("method", spec.toString())
        .add("encode_ms", compressed->encodeSeconds * 1e3)
        .add("decode_ms", compressed->decodeSeconds * 1e3);
  }
  if (readyAt.count() > 0 && start > readyAt)
    trace_->complete(kCommLane, "queue", name, readyAt, start, args);
  trace_->complete(kCommLane, category, name, start, options_.clock->now(), args);
}

// The first tensor's name, with "+N tensors" for a fusion bucket and the element range of a p3
// slice ("fc1.weight[40000:80000]").
std::string GradientEngine::unitName(size_t index) const {
  const CommUnit& unit = layout_.units[index];
  const int first = unit.tensors.front();
  std::string name = tensors_[first].name;
  if (unit.tensors.size() > 1) name += fmt::format(" +{} tensors", unit.tensors.size() - 1);
  if (layout_.unitCount[first] > 1) {
    name += fmt::format("[{}:{}]", unit.tensorOffset, unit.tensorOffset + unit.elements);
  }
  return name;
}

void GradientEngine::zeroUnusedGradients() {
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (ready_[t]) continue;
    if (!warnedUnused_[t]) {
      GS_LOG(kWarn, "parameter '{}' got no gradient this step; communicating zeros for it",
             tensors_[t].name);
      warnedUnused_[t] = true;
    }
    std::span<float> s = slot(static_cast<int>(t));
    std::fill(s.begin(), s.end(), 0.0f);
    markTensorReady(static_cast<int>(t));
  }
}

void GradientEngine::endBackward() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    zeroUnusedGradients();
    backwardDone_ = true;
    stepStarted_ = true;
    ++stepsEnded_;
    completeStepIfDone();
  }
  cv_.notify_all();
}

std::chrono::milliseconds GradientEngine::waitBound() const {
  return transport_.options().timeout * static_cast<int>(opsPerStep_ + 1);
}

void GradientEngine::waitSteps(std::unique_lock<std::mutex>& lock, uint64_t steps) {
  bool finished = cv_.wait_for(lock, waitBound(), [&] { return error_ || stepsDone_ >= steps; });
  if (error_) std::rethrow_exception(error_);
  if (!finished)
    throw InternalError("gradient communication did not finish", {.rank = transport_.rank()});
}

void GradientEngine::finishStep() {
  GS_CHECK(!updates_);
  endBackward();
  std::unique_lock<std::mutex> lock(mutex_);
  waitSteps(lock, stepsEnded_);
}

void GradientEngine::waitParameters(int t) {
  GS_CHECK(updates_);
  std::unique_lock<std::mutex> lock(mutex_);
  if (updatedSteps_[t] >= stepsEnded_ && !error_) return;
  bool done =
      cv_.wait_for(lock, waitBound(), [&] { return error_ || updatedSteps_[t] >= stepsEnded_; });
  if (error_) std::rethrow_exception(error_);
  if (!done) {
    throw InternalError(fmt::format("parameters of '{}' were never updated", tensors_[t].name),
                        {.rank = transport_.rank()});
  }
}

void GradientEngine::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  waitSteps(lock, stepsEnded_);
}

StepStats GradientEngine::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return totals_;
}

void GradientEngine::resetStep() {
  std::fill(ready_.begin(), ready_.end(), false);
  waitingIn_.assign(layout_.units.size(), 0);
  readyAt_.assign(layout_.units.size(), Nanos{0});
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    waitingIn_[u] = layout_.units[u].tensors.size();
  }
  for (size_t t = 0; t < tensors_.size() && updates_; ++t) {
    opsLeftOf_[t] = options_.sharded ? 1 : layout_.unitCount[t];
  }
  if (scheduler_) scheduler_->reset();
  committed_.clear();
  opsStarted_ = 0;
  opsDone_ = 0;
  stepStarted_ = false;
  backwardDone_ = false;
  stepStats_ = {};
}

}  // namespace gradsync
