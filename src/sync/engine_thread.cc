// The engine's communication threads (engine.h): each takes the next operation from the planner
// as it may start, has the executor carry it out, and accounts for it (statistics, trace,
// results in place). p3 over the ring: rank 0 announces each pick, the others follow them; with
// several threads (concurrent slices) each committed slice runs on one of them.
#include <fmt/format.h>

#include "collectives/ring.h"
#include "common/tags.h"
#include "gradsync/error.h"
#include "sync/engine.h"

namespace gradsync {

void Engine::communicate() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    std::optional<PlannedOp> op;
    try {
      op = nextOp(lock);
    } catch (...) {
      error_ = std::current_exception();
      cv_.notify_all();
      continue;
    }
    if (!op) return;
    const Nanos readyAt = op->kind == PlannedOp::Kind::kAllgather ? Nanos{0} : readyAt_[op->unit];
    busyLocked(+1);
    lock.unlock();
    const Nanos start = options_.clock->now();
    OpOutcome outcome;
    std::exception_ptr error;
    try {
      outcome = executor_->run(*op);
    } catch (...) {
      error = std::current_exception();
    }
    if (trace_ != nullptr && trace_->active() && !error) traceOp(*op, readyAt, start, outcome);
    lock.lock();
    busyLocked(-1);
    if (error) {
      if (!error_) error_ = error;
    } else {
      finishOp(*op, outcome);
    }
    cv_.notify_all();
  }
}

std::optional<PlannedOp> Engine::nextOp(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    std::optional<PlannedOp> op;
    // One thread at a time receives picks: they arrive in order and must be followed in it.
    cv_.wait(lock, [&] {
      return stop_ || (!error_ && ((op = planner_.next()).has_value() ||
                                   (!following_ && planner_.awaitsPick())));
    });
    if (stop_) return std::nullopt;
    if (op) return op;
    following_ = true;
    try {
      followPick(lock);
    } catch (...) {
      following_ = false;
      throw;
    }
    following_ = false;
    cv_.notify_all();  // the pick may let another thread start, or follow the next one
  }
}

// No wait for the sends: a slot is reused only a step later, when every follower has received
// its pick (an operation cannot complete without them). Settling the sends then costs nothing,
// and orders the transport's reads of the slot before this write (causality through the network
// is invisible to the memory model, and to TSan).
void Engine::announce(const PlannedOp& pick) {
  Announcement& slot = announcements_[picks_++ % announcements_.size()];
  settleSends(slot.sends);
  slot.decision = pick.unit | (static_cast<uint64_t>(pick.overtook) << 32);
  for (int peer = 1; peer < transport_.size(); ++peer) {
    slot.sends.push_back(
        transport_.send(peer, tags::kP3Decision, &slot.decision, sizeof slot.decision));
  }
}

// Returns once the transport no longer reads the sends' buffers: done, failed (the operations
// that need them report the failure), or still pending at the timeout, when the transport is
// aborted rather than left reading memory about to change.
void Engine::settleSends(std::vector<WorkPtr>& sends) noexcept {
  for (const WorkPtr& work : sends) {
    try {
      work->wait();
    } catch (const TimeoutError&) {
      transport_.abort(std::current_exception());
    } catch (...) {
    }
  }
  sends.clear();
}

// A follower receives rank 0's next pick; the planner starts it once the unit is ready here.
void Engine::followPick(std::unique_lock<std::mutex>& lock) {
  uint64_t decision = 0;
  lock.unlock();
  std::exception_ptr failure;
  try {
    transport_.recv(0, tags::kP3Decision, &decision, sizeof decision)->wait();
  } catch (const TimeoutError&) {
    // The receive is still posted into `decision`, which this frame is about to release.
    failure = std::current_exception();
    transport_.abort(failure);
  } catch (...) {
    failure = std::current_exception();
  }
  lock.lock();
  if (failure) std::rethrow_exception(failure);
  const size_t unit = decision & 0xffffffffu;
  if (unit >= layout_.units.size()) {
    throw ProtocolError(fmt::format("rank 0 picked unit {} of {}", unit, layout_.units.size()),
                        {.rank = transport_.rank()});
  }
  planner_.follow(unit, decision >> 32);
}

void Engine::finishOp(const PlannedOp& op, const OpOutcome& outcome) {
  totals_.bytesSent += outcome.bytesSent;
  // Sharded's reduce-scatter and allgather together move what one allreduce does.
  if (op.kind != PlannedOp::Kind::kAllgather) {
    totals_.denseBytes += ring::allreduceBytesSent(layout_.units[op.unit].elements, workers_);
  }
  totals_.encodeSeconds += outcome.encodeSeconds;
  totals_.decodeSeconds += outcome.decodeSeconds;
  planner_.done(op);
  if (outcome.unitDone) markDone(op.unit, op.step);
}

// The first tensor's name, with "+N tensors" for a fusion bucket and the element range of a p3
// slice ("fc1.weight[40000:80000]").
std::string Engine::unitName(size_t index) const {
  const CommUnit& unit = layout_.units[index];
  const int first = unit.tensors.front();
  std::string name = tensors_[first].name;
  if (unit.tensors.size() > 1) name += fmt::format(" +{} tensors", unit.tensors.size() - 1);
  if (layout_.unitCount[first] > 1) {
    name += fmt::format("[{}:{}]", unit.tensorOffset, unit.tensorOffset + unit.elements);
  }
  return name;
}

// One or two events on the communication lane: waiting in the queue since the unit was ready,
// and its operation (transfer and reduction overlap inside the pipelined ring, so they form
// one span; a compressed one also carries its encode and decode times and its method).
void Engine::traceOp(const PlannedOp& op, Nanos readyAt, Nanos start, const OpOutcome& outcome) {
  const CommUnit& unit = layout_.units[op.unit];
  const std::string name = unitName(op.unit);
  TraceArgs args;
  args.add("tensors", static_cast<int64_t>(unit.tensors.size()))
      .add("elements", static_cast<int64_t>(unit.elements))
      .add("priority", static_cast<int64_t>(unit.priority))
      .add("step", static_cast<int64_t>(op.step))
      .add("bytes_sent", static_cast<int64_t>(outcome.bytesSent))
      .add("dense_bytes", static_cast<int64_t>(ring::allreduceBytesSent(unit.elements, workers_)));
  if (options_.schedule.prioritized()) args.add("overtook", static_cast<int64_t>(op.overtook));
  if (outcome.server >= 0) args.add("server", static_cast<int64_t>(outcome.server));
  std::string category = toString(op.kind);
  if (!outcome.method.empty()) {
    category = "compressed";
    args.add("method", outcome.method)
        .add("encode_ms", outcome.encodeSeconds * 1e3)
        .add("decode_ms", outcome.decodeSeconds * 1e3);
  }
  if (readyAt.count() > 0 && start > readyAt)
    trace_->complete(kCommLane, "queue", name, readyAt, start, args);
  trace_->complete(kCommLane, category, name, start, options_.clock->now(), args);
}

void Engine::traceSpan(size_t unit, const std::string& name, Nanos start,
                       const std::string& detail) {
  if (trace_ == nullptr || !trace_->active()) return;
  trace_->complete(kCommLane, name, unitName(unit), start, options_.clock->now(),
                   TraceArgs().add("detail", detail));
}

}  // namespace gradsync
