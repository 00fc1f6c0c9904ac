#include "sync/ps_engine.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "compress/two_bit.h"
#include "gradsync/error.h"

namespace gradsync {
PsEngine::PsEngine(Transport& transport, const std::vector<TensorShape>& tensors,
                   ScheduleSpec schedule, double lr, PsOptions options,
                   std::vector<std::span<float>> parameters)
    : transport_(transport),
      tensors_(tensors),
      schedule_(schedule),
      options_(options),
      plan_(planPushes(options_.compression, tensors)),
      layout_(planLayout(tensors, schedule, plan_.groups())),
      parameters_(std::move(parameters)),
      lr_(lr) {
  const PsPlacement& placement = options_.placement;
  if (placement.servers < 1 || (placement.colocated && placement.servers > placement.workers)) {
    throw ConfigError(fmt::format("{} co-located parameter servers for {} workers",
                                  placement.servers, placement.workers),
                      {.hint = "co-locate at most one server per worker, or run them apart "
                               "(--servers K)"});
  }
  GS_CHECK(transport.size() == placement.worldSize() && transport.rank() < placement.workers);
  for (const CommUnit& unit : layout_.units) {
    if (2 * unit.elements * sizeof(float) > UINT32_MAX) {  // kSetState carries 2 x the unit
      throw ConfigError(
          fmt::format("a unit of {} elements is too large for a parameter server", unit.elements),
          {.hint = "slice the tensors (--schedule p3) or use smaller fusion buckets"});
    }
  }
  if (options_.delay == PsOptions::Delay::kCompressed && plan_.any()) {
    throw ConfigError("--compress does not combine with --sync cdsgd",
                      {.hint = "cdsgd pushes its own 2-bit codes; compress with odsgd or ssdsgd"});
  }
  for (ServedUnit& unit : servedUnits(layout_, plan_, tensors_)) {
    codecs_.push_back(unit.compression.dense()
                          ? nullptr
                          : std::make_unique<PushCodec>(unit.compression, unit.shapes));
  }
  GS_CHECK(parameters_.size() == tensors_.size());
  const size_t total = layout_.totalElements;
  for (auto* buffer :
       {&gradients_, &staged_, &global_, &previous_, &replies_, &residual_, &localVelocity_})
    buffer->assign(total, 0.0f);
  span_.assign(layout_.units.size(), 1);
  ready_.assign(tensors_.size(), false);
  waitingIn_.resize(layout_.units.size());
  for (size_t u = 0; u < layout_.units.size(); ++u) waitingIn_[u] = layout_.units[u].tensors.size();
  stepOf_.assign(layout_.units.size(), 0);
  applied_.assign(layout_.units.size(), 0);
  pendingPull_.assign(layout_.units.size(), 0);
  freshPull_.assign(layout_.units.size(), false);
  expected_.resize(placement.servers);
  if (schedule_.prioritized()) {
    scheduler_ = std::make_unique<PriorityScheduler>(prioritiesOf(layout_), schedule_.window);
  }
  bytesAtStart_ = transport_.bytesSent();
  if (placement.colocated && transport.rank() < placement.servers) {
    server_ =
        std::make_unique<ParameterServer>(transport, placement, transport.rank(),
                                          servedUnits(layout_, plan_, tensors_), options_.server);
  }
  thread_ = std::thread([this] { communicate(); });
  for (int s = 0; s < placement.servers; ++s) receivers_.emplace_back([this, s] { receive(s); });
}

PsEngine::~PsEngine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (auto& receiver : receivers_) receiver.join();
  // Every reachable server learns that this worker is done, even after a failure, so that no
  // server waits for it.
  for (int s = 0; s < options_.placement.servers; ++s) {
    try {
      sendRequest(s, {.request = PsRequest::kStop}, nullptr);
    } catch (const Error& e) {
      if (!error_) GS_LOG(kWarn, "could not stop {}: {}", serverName(s), e.what());
    }
  }
  if (!server_) return;
  try {
    server_->wait();  // the other workers' kStop
  } catch (const Error& e) {
    if (!error_) GS_LOG(kWarn, "{} failed: {}", serverName(transport_.rank()), e.what());
  }
}

std::string PsEngine::serverName(int server) const {
  return fmt::format("parameter server {} (rank {})", server,
                     options_.placement.serverRank(server));
}

std::span<float> PsEngine::slot(int t) {
  return {gradients_.data() + layout_.offsetOf[t], tensors_[t].elements};
}

void PsEngine::markUnitReady(size_t unit) {
  stepOf_[unit] = step_;
  ++pending_;
  if (scheduler_) {
    scheduler_->ready(unit);
  } else {
    queue_.push_back(unit);
  }
}

// fifo queues every unit at the end of backward instead (endBackward).
void PsEngine::markTensorReady(int t) {
  ready_[t] = true;
  if (!schedule_.overlapsBackward()) return;
  for (int u = layout_.unitOf[t]; u < layout_.unitOf[t] + layout_.unitCount[t]; ++u) {
    if (--waitingIn_[u] == 0) markUnitReady(u);
  }
}

void PsEngine::markReady(int t) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GS_CHECK(!ready_[t]);
    markTensorReady(t);
  }
  cv_.notify_all();
}

void PsEngine::finishStep() {
  throw InternalError("PsEngine updates the parameters: end steps with endBackward()");
}

void PsEngine::endBackward() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    rethrowIfFailed();
    for (size_t t = 0; t < tensors_.size(); ++t) {
      if (ready_[t]) continue;
      std::span<float> s = slot(static_cast<int>(t));
      std::fill(s.begin(), s.end(), 0.0f);  // an unused parameter: a zero gradient
      markTensorReady(static_cast<int>(t));
    }
    if (!schedule_.overlapsBackward()) {
      for (size_t u = 0; u < layout_.units.size(); ++u) markUnitReady(u);
    }
    std::fill(ready_.begin(), ready_.end(), false);
    for (size_t u = 0; u < layout_.units.size(); ++u)
      waitingIn_[u] = layout_.units[u].tensors.size();
    ++step_;
  }
  cv_.notify_all();
}

bool PsEngine::delayed(uint64_t step) const {
  return options_.delay != PsOptions::Delay::kNone &&
         step >= static_cast<uint64_t>(options_.warmupSteps);
}

void PsEngine::communicate() {
  try {
    while (true) {
      size_t unit = 0;
      uint64_t step = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        std::optional<PriorityScheduler::Pick> pick;
        cv_.wait(lock, [&] {
          if (stop_ || error_) return true;
          if (scheduler_) return (pick = scheduler_->next()).has_value();
          return !queue_.empty();
        });
        if (stop_ || error_) return;
        if (scheduler_) {
          unit = pick->unit;
        } else {
          unit = queue_.front();
          queue_.pop_front();
        }
        step = stepOf_[unit];
      }
      pushUnit(unit, step);
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

PsEngine::Push PsEngine::planPush(uint64_t step) const {
  Push push;
  push.step = step;
  push.delayed = delayed(step);
  const auto k = static_cast<uint64_t>(options_.delaySteps);
  const auto sinceWarmup = step - static_cast<uint64_t>(std::max<int64_t>(0, options_.warmupSteps));
  // CD-SGD's k-step correction counts global steps, as its reference code does.
  push.quantized = push.delayed && options_.delay == PsOptions::Delay::kCompressed && step % k != 0;
  push.wantReply = !push.delayed || options_.delay != PsOptions::Delay::kSeveralSteps ||
                   sinceWarmup % k == k - 1;
  return push;
}

// The last pull must be in before a delayed local step: it is the step's base. Returns whether
// a reply arrived since the unit's last local step.
bool PsEngine::waitForPull(size_t unit) {
  std::unique_lock<std::mutex> lock(mutex_);
  bool in =
      cv_.wait_for(lock, waitBound(), [&] { return error_ || stop_ || pendingPull_[unit] == 0; });
  rethrowIfFailed();
  if (!in) throw InternalError("a parameter-server reply never came", {.rank = transport_.rank()});
  bool fresh = freshPull_[unit];
  freshPull_[unit] = false;
  return fresh;
}

void PsEngine::pushUnit(size_t unit, uint64_t step) {
  if (!published_) publishState();
  const CommUnit& u = layout_.units[unit];
  const Push push = planPush(step);
  const bool freshPull = push.delayed && waitForPull(unit);
  // Quantized (cdsgd) or encoded (a compressor, after its warm-up): `codes` are sent; else the
  // gradient is staged, since the slot is refilled by the next backward once the unit counts as
  // applied.
  PushCodec* codec = codecs_[unit].get();
  const bool encoded = codec != nullptr && step >= static_cast<uint64_t>(plan_.warmupSteps);
  std::vector<uint8_t> codes;
  uint64_t seed = 0;
  const float* gradient = gradients_.data() + u.offset;
  if (push.quantized) {
    codes = twoBitEncode({gradient, u.elements}, {residual_.data() + u.offset, u.elements},
                         options_.threshold);
  } else if (encoded) {
    const Nanos start = options_.clock->now();
    seed = codec->seedFor(options_.seed, step, transport_.rank());
    codec->encode({gradient, u.elements}, codes, seed);
    const double seconds = secondsSince(*options_.clock, start);
    std::lock_guard<std::mutex> lock(mutex_);
    totals_.encodeSeconds += seconds;
  } else {
    std::memcpy(staged_.data() + u.offset, gradient, u.elements * sizeof(float));
  }
  if (push.delayed) localUpdate(unit, freshPull);
  const int server = options_.placement.serverOf(unit);
  const Nanos start = options_.clock->now();
  recordPush(unit, push, server, start);
  const bool coded = push.quantized || encoded;
  PsHeader header{
      .request = PsRequest::kPush,
      .unit = static_cast<uint32_t>(unit),
      .step = step,
      .lr = static_cast<float>(lr_),
      .threshold = options_.threshold,
      .flags = (push.wantReply ? kWantReply : 0u) | (push.quantized ? kQuantized : 0u) |
               (encoded ? kEncoded : 0u),
      .payloadBytes = static_cast<uint32_t>(coded ? codes.size() : u.elements * sizeof(float)),
      .seed = seed};
  sendRequest(server, header,
              coded ? static_cast<const void*>(codes.data()) : staged_.data() + u.offset);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    busy(-1);
    --pending_;
    // p3's credit counts pushes on the wire, not replies: a synchronous server answers only once
    // every worker pushed, and workers pick in different orders, so waiting for replies could
    // leave each worker waiting for units the others have not committed.
    if (scheduler_) scheduler_->completed(unit);
    if (!push.wantReply) traceUnit(unit, step, server, start);
  }
  cv_.notify_all();
}

void PsEngine::recordPush(size_t unit, const Push& push, int server, Nanos start) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (push.delayed) applied_[unit] = push.step + 1;
    if (push.wantReply) {
      expected_[server].push_back({unit, push.step, !push.delayed, start});
      if (push.delayed) ++pendingPull_[unit];
      ++awaiting_;
      busy(+1);
    }
    busy(+1);  // the send
    const size_t elements = layout_.units[unit].elements;
    const size_t ring = 2 * (options_.placement.workers - 1) * elements * sizeof(float);
    totals_.denseBytes += ring / options_.placement.workers;
  }
  cv_.notify_all();
}

void PsEngine::sendRequest(int server, PsHeader header, const void* payload) {
  const int rank = options_.placement.serverRank(server);
  try {
    std::lock_guard<std::mutex> lock(sendMutex_);  // a header and its payload go together
    WorkPtr head = transport_.send(rank, tags::kPsRequest, &header, sizeof header);
    WorkPtr body;
    if (header.payloadBytes > 0)
      body = transport_.send(rank, tags::kPsPayload, payload, header.payloadBytes);
    head->wait();
    if (body) body->wait();
  } catch (const Error& e) {
    rethrowNamingServer(server, e);
  }
}

void PsEngine::rethrowNamingServer(int server, const Error& e) const {
  // A failed exchange fails the run; and a send or receive that did not complete still holds its
  // buffer (a header on the stack, say) until the transport is aborted (transport.h).
  transport_.abort(std::current_exception());
  // The failure may have started elsewhere (another server, a worker): say who is who.
  const PsPlacement& p = options_.placement;
  std::string roles = p.servers == 1
                          ? fmt::format("rank {} is the parameter server", p.serverRank(0))
                          : fmt::format("ranks {}..{} are parameter servers 0..{}", p.serverRank(0),
                                        p.serverRank(p.servers - 1), p.servers - 1);
  std::string hint = e.context().hint.empty() ? roles : e.context().hint + " (" + roles + ")";
  ErrorContext context{.rank = transport_.rank(),
                       .peer = p.serverRank(server),
                       .operation = "parameter-server push/pull",
                       .hint = hint};
  std::string what = fmt::format("{}: {}", serverName(server), e.detail());
  if (dynamic_cast<const PeerLostError*>(&e)) throw PeerLostError(what, context);
  if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(what, context);
  throw;
}

void PsEngine::receive(int server) {
  try {
    while (true) {
      Expected e;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || error_ || !expected_[server].empty(); });
        if (error_ || expected_[server].empty()) return;
        e = expected_[server].front();
        expected_[server].pop_front();
      }
      const CommUnit& u = layout_.units[e.unit];
      try {
        transport_
            .recv(options_.placement.serverRank(server), psReplyTag(e.unit),
                  replies_.data() + u.offset, u.elements * sizeof(float))
            ->wait();
      } catch (const Error& error) {
        rethrowNamingServer(server, error);
      }
      arrived(e, server);
    }
  } catch (...) {
    fail(std::current_exception());
  }
}

// A reply is in replies_: warm-up and plain strategies take it as their parameters; the delayed
// ones keep it aside as the next local step's base.
void PsEngine::arrived(const Expected& e, int server) {
  const CommUnit& u = layout_.units[e.unit];
  auto at = static_cast<std::ptrdiff_t>(u.offset);
  auto n = static_cast<std::ptrdiff_t>(u.elements);
  if (e.toParameters) copyToParameters(e.unit, replies_);
  std::copy_n(global_.begin() + at, n, previous_.begin() + at);
  std::copy_n(replies_.begin() + at, n, global_.begin() + at);
  // Steps between the two global models: SSD-SGD pulls every K steps after the warm-up.
  const bool several = options_.delay == PsOptions::Delay::kSeveralSteps;
  span_[e.unit] = !e.toParameters && several ? options_.delaySteps : 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (e.toParameters) {
      applied_[e.unit] = e.step + 1;
    } else {
      --pendingPull_[e.unit];
    }
    freshPull_[e.unit] = true;
    --awaiting_;
    busy(-1);
    traceUnit(e.unit, e.step, server, e.sentAt);
  }
  cv_.notify_all();
}

void PsEngine::waitParameters(int t) {
  std::unique_lock<std::mutex> lock(mutex_);
  for (int u = layout_.unitOf[t]; u < layout_.unitOf[t] + layout_.unitCount[t]; ++u) {
    bool done = cv_.wait_for(lock, waitBound(), [&] { return error_ || applied_[u] >= step_; });
    rethrowIfFailed();
    if (!done) {
      throw InternalError(fmt::format("parameters of '{}' were never updated", tensors_[t].name),
                          {.rank = transport_.rank()});
    }
  }
}

void PsEngine::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  bool done = cv_.wait_for(lock, waitBound(), [&] {
    if (error_) return true;
    if (awaiting_ > 0 || pending_ > 0) return false;
    return std::all_of(applied_.begin(), applied_.end(), [&](uint64_t s) { return s >= step_; });
  });
  rethrowIfFailed();
  if (!done)
    throw InternalError("parameter-server steps never completed", {.rank = transport_.rank()});
}

void PsEngine::setStep(uint64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_ = step;
  std::fill(applied_.begin(), applied_.end(), step);
}

StepStats PsEngine::totals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  StepStats totals = totals_;
  totals.bytesSent = transport_.bytesSent() - bytesAtStart_;
  return totals;
}

// Communication time is the time during which a push or a reply is outstanding.
void PsEngine::busy(int delta) {
  if (active_ == 0 && delta > 0) busySince_ = options_.clock->now();
  active_ += delta;
  if (delta < 0 && active_ == 0) totals_.commSeconds += secondsSince(*options_.clock, busySince_);
}

void PsEngine::traceUnit(size_t unit, uint64_t step, int server, Nanos start) {
  if (trace_ == nullptr || !trace_->active()) return;
  const CommUnit& u = layout_.units[unit];
  std::string name = tensors_[u.tensors.front()].name;
  if (u.tensors.size() > 1) name += fmt::format(" +{} tensors", u.tensors.size() - 1);
  if (layout_.unitCount[u.tensors.front()] > 1) {
    name += fmt::format("[{}:{}]", u.tensorOffset, u.tensorOffset + u.elements);
  }
  trace_->complete(kCommLane, "communication", name, start, options_.clock->now(),
                   TraceArgs()
                       .add("op", "push_pull")
                       .add("step", step)
                       .add("server", server)
                       .add("priority", u.priority));
}

void PsEngine::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  cv_.notify_all();
}

void PsEngine::rethrowIfFailed() {
  if (error_) std::rethrow_exception(error_);
}

std::chrono::milliseconds PsEngine::waitBound() const {
  return transport_.options().timeout * static_cast<int>(layout_.units.size() + 1);
}

}  // namespace gradsync
