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

std::vector<size_t> elementsOf(const std::vector<TensorShape>& tensors) {
  std::vector<size_t> elements;
  for (const auto& t : tensors) elements.push_back(t.elements);
  return elements;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// What a dense ring allreduce of `elements` floats makes one rank send: its share of the
// reduce-scatter and of the allgather, (P-1)/P of the buffer each.
uint64_t denseRingBytes(size_t elements, int ranks) {
  return 2 * (static_cast<uint64_t>(ranks) - 1) * elements * sizeof(float) /
         static_cast<uint64_t>(ranks);
}

}  // namespace

GradientEngine::GradientEngine(Transport& transport, const std::vector<TensorShape>& tensors,
                               EngineOptions options)
    : transport_(transport),
      tensors_(tensors),
      options_(std::move(options)),
      plan_(planCompression(options_.compression, tensors, options_.momentum)),
      layout_(planLayout(elementsOf(tensors), options_.schedule, plan_.groups())),
      flat_(layout_.totalElements),
      ready_(tensors.size(), false),
      warnedUnused_(tensors.size(), false) {
  size_t largest = 0;
  for (const CommUnit& unit : layout_.units) {
    std::vector<TensorShape> shapes;
    for (int t : unit.tensors) shapes.push_back(tensors_[t]);
    compressors_.push_back(makeCompressor(plan_.perTensor[unit.tensors[0]], shapes));
    if (compressors_.back()) largest = std::max(largest, unit.elements);
  }
  sent_.resize(largest);
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
         (options_.schedule.overlapsBackward() || backwardDone_);
}

// Runs on the communication thread without the lock: the unit's span is not touched by anyone
// else until the unit is done. Returns whether the unit went compressed.
bool GradientEngine::exchangeUnit(size_t unit, ExchangeStats& stats) {
  const CommUnit& u = layout_.units[unit];
  std::span<float> data{flat_.data() + u.offset, u.elements};
  Compressor* compressor = compressors_[unit].get();
  if (compressor == nullptr || step_ < static_cast<uint64_t>(plan_.warmupSteps)) {
    allreduce(transport_, data, ReduceOp::kAverage);
    return false;
  }
  ExchangeContext context{transport_, {}, step_, options_.seed};
  compressor->exchange(context, data, {sent_.data(), u.elements}, stats);
  return true;
}

void GradientEngine::communicate() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || (!error_ && unitStartable(nextUnit_)); });
    if (stop_) return;
    const size_t unit = nextUnit_;
    Nanos readyAt = readyAt_[unit];
    lock.unlock();
    auto start = std::chrono::steady_clock::now();
    Nanos traceStart = SteadyClock::instance().now();
    uint64_t bytesBefore = transport_.bytesSent();
    ExchangeStats exchange;
    bool compressed = false;
    std::exception_ptr error;
    try {
      compressed = exchangeUnit(unit, exchange);
    } catch (...) {
      error = std::current_exception();
    }
    double seconds = secondsSince(start);
    uint64_t bytes = transport_.bytesSent() - bytesBefore;
    if (trace_ != nullptr && trace_->active())
      traceUnit(unit, readyAt, traceStart, bytes, compressed ? &exchange : nullptr);
    lock.lock();
    stepStats_.commSeconds += seconds;
    stepStats_.bytesSent += bytes;
    stepStats_.denseBytes += denseRingBytes(layout_.units[unit].elements, transport_.size());
    stepStats_.encodeSeconds += exchange.encodeSeconds;
    stepStats_.decodeSeconds += exchange.decodeSeconds;
    error_ = error;
    ++nextUnit_;
    ++unitsDone_;
    cv_.notify_all();
  }
}

// Two events on the communication lane: waiting in the queue since the unit was ready, and its
// exchange (transfer and reduction overlap inside the pipelined ring, so they form one span;
// a compressed exchange also carries its encode and decode times and its method).
void GradientEngine::traceUnit(size_t index, Nanos readyAt, Nanos start, uint64_t bytes,
                               const ExchangeStats* compressed) {
  const CommUnit& unit = layout_.units[index];
  std::string name = tensors_[unit.tensors.front()].name;
  if (unit.tensors.size() > 1) name += fmt::format(" +{} tensors", unit.tensors.size() - 1);
  TraceArgs args;
  args.add("tensors", static_cast<int64_t>(unit.tensors.size()))
      .add("elements", static_cast<int64_t>(unit.elements))
      .add("bytes_sent", static_cast<int64_t>(bytes))
      .add("dense_bytes", static_cast<int64_t>(denseRingBytes(unit.elements, transport_.size())));
  std::string category = "allreduce";
  if (compressed != nullptr) {
    const CompressSpec& spec = plan_.perTensor[unit.tensors.front()];
    category = "compressed";
    args.add("method", spec.toString())
        .add("encode_ms", compressed->encodeSeconds * 1e3)
        .add("decode_ms", compressed->decodeSeconds * 1e3);
  }
  if (start > readyAt) trace_->complete(kCommLane, "queue", name, readyAt, start, args);
  trace_->complete(kCommLane, category, name, start, SteadyClock::instance().now(), args);
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
  lastStep_ = stepStats_;
  lastStep_.exposedSeconds = secondsSince(start);
  ++step_;
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
  stepStats_ = {};
}

}  // namespace gradsync
