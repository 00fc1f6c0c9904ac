#include "sync/gradient_engine.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

std::vector<size_t> elementsOf(const std::vector<TensorInfo>& tensors) {
  std::vector<size_t> elements;
  for (const auto& t : tensors) elements.push_back(t.elements);
  return elements;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

GradientEngine::GradientEngine(Transport& transport, const std::vector<TensorInfo>& tensors,
                               const ScheduleSpec& schedule)
    : transport_(transport),
      tensors_(tensors),
      schedule_(schedule),
      layout_(planLayout(elementsOf(tensors), schedule)),
      flat_(layout_.totalElements),
      ready_(tensors.size(), false),
      warnedUnused_(tensors.size(), false) {
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

std::span<float> GradientEngine::slot(int t) {
  return {flat_.data() + layout_.offsetOf[t], tensors_[t].elements};
}

void GradientEngine::markReady(int t) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GS_CHECK(!ready_[t]);
    ready_[t] = true;
    int unit = layout_.unitOf[t];
    if (--waitingIn_[unit] == 0) readyAt_[unit] = SteadyClock::instance().now();
  }
  cv_.notify_all();
}

bool GradientEngine::unitStartable(size_t unit) const {
  return unit < layout_.units.size() && waitingIn_[unit] == 0 &&
         (schedule_.overlapsBackward() || backwardDone_);
}

void GradientEngine::communicate() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (!error_ && unitStartable(nextUnit_)); });
    if (stop_) return;
    const CommUnit& unit = layout_.units[nextUnit_];
    Nanos readyAt = readyAt_[nextUnit_];
    lock.unlock();
    auto start = std::chrono::steady_clock::now();
    Nanos traceStart = SteadyClock::instance().now();
    uint64_t bytesBefore = transport_.bytesSent();
    std::exception_ptr error;
    try {
      allreduce(transport_, {flat_.data() + unit.offset, unit.elements}, ReduceOp::kAverage);
    } catch (...) {
      error = std::current_exception();
    }
    double seconds = secondsSince(start);
    uint64_t bytes = transport_.bytesSent() - bytesBefore;
    if (trace_ != nullptr && trace_->active()) traceUnit(unit, readyAt, traceStart, bytes);
    lock.lock();
    commSeconds_ += seconds;
    bytesSent_ += bytes;
    error_ = error;
    ++nextUnit_;
    ++unitsDone_;
    cv_.notify_all();
  }
}

// Two events on the communication lane: waiting in the queue since the unit was ready, and its
// allreduce (transfer and reduction overlap inside the pipelined ring, so they form one span).
void GradientEngine::traceUnit(const CommUnit& unit, Nanos readyAt, Nanos start, uint64_t bytes) {
  std::string name = tensors_[unit.tensors.front()].name;
  if (unit.tensors.size() > 1) name += fmt::format(" +{} tensors", unit.tensors.size() - 1);
  TraceArgs args;
  args.add("tensors", static_cast<int64_t>(unit.tensors.size()))
      .add("elements", static_cast<int64_t>(unit.elements))
      .add("bytes_sent", static_cast<int64_t>(bytes));
  if (start > readyAt) trace_->complete(kCommLane, "queue", name, readyAt, start, args);
  trace_->complete(kCommLane, "allreduce", name, start, SteadyClock::instance().now(), args);
}

void GradientEngine::finishStep() {
  auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  for (size_t t = 0; t < tensors_.size(); ++t) {
    if (ready_[t]) continue;
    if (!warnedUnused_[t]) {
      GS_LOG(kWarn, "parameter '{}' got no gradient this step; communicating zeros for it",
             tensors_[t].name);
      warnedUnused_[t] = true;
    }
    std::span<float> s = slot(static_cast<int>(t));
    std::fill(s.begin(), s.end(), 0.0f);
    ready_[t] = true;
    int unit = layout_.unitOf[t];
    if (--waitingIn_[unit] == 0) readyAt_[unit] = SteadyClock::instance().now();
  }
  backwardDone_ = true;
  cv_.notify_all();
  // Each collective is bounded by the transport timeout, so this bound is never the one to fire
  // unless the engine itself is broken.
  auto bound = transport_.options().timeout * static_cast<int>(layout_.units.size() + 1);
  bool finished =
      cv_.wait_for(lock, bound, [&] { return error_ || unitsDone_ == layout_.units.size(); });
  if (error_) std::rethrow_exception(error_);
  if (!finished)
    throw InternalError("gradient communication did not finish", {.rank = transport_.rank()});
  lastStep_.commSeconds = commSeconds_;
  lastStep_.exposedSeconds = secondsSince(start);
  lastStep_.bytesSent = bytesSent_;
  resetStep();
}

void GradientEngine::resetStep() {
  std::fill(ready_.begin(), ready_.end(), false);
  waitingIn_.assign(layout_.units.size(), 0);
  readyAt_.assign(layout_.units.size(), Nanos{0});
  for (const CommUnit& unit : layout_.units) {
    waitingIn_[&unit - layout_.units.data()] = unit.tensors.size();
  }
  nextUnit_ = 0;
  unitsDone_ = 0;
  backwardDone_ = false;
  commSeconds_ = 0;
  bytesSent_ = 0;
}

}  // namespace gradsync
