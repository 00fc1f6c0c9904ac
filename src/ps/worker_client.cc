#include "ps/worker_client.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "common/tags.h"
#include "compress/guard.h"
#include "compress/two_bit.h"
#include "ps/served_units.h"

namespace gradsync {
namespace {

void checkOptions(const PsOptions& options, const GradientLayout& layout,
                  const CompressionPlan& plan) {
  const PsPlacement& placement = options.placement;
  if (placement.servers < 1 || (placement.colocated && placement.servers > placement.workers)) {
    throw ConfigError(fmt::format("{} co-located parameter servers for {} workers",
                                  placement.servers, placement.workers),
                      {.hint = "co-locate at most one server per worker, or run them apart "
                               "(--servers K)"});
  }
  for (const CommUnit& unit : layout.units) {
    if (2 * unit.elements * sizeof(float) > UINT32_MAX) {  // kSetState carries 2 x the unit
      throw ConfigError(
          fmt::format("a unit of {} elements is too large for a parameter server", unit.elements),
          {.hint = "slice the tensors (--schedule p3) or use smaller fusion buckets"});
    }
  }
  if (options.delay == PsOptions::Delay::kCompressed && plan.any()) {
    throw ConfigError("--compress does not combine with --sync cdsgd",
                      {.hint = "cdsgd pushes its own 2-bit codes; compress with odsgd or ssdsgd"});
  }
}

}  // namespace

PushPlan planPush(const PsOptions& options, uint64_t step) {
  PushPlan push;
  push.delayed = options.delay != PsOptions::Delay::kNone &&
                 step >= static_cast<uint64_t>(std::max<int64_t>(0, options.warmupSteps));
  const auto k = static_cast<uint64_t>(options.delaySteps);
  const auto sinceWarmup = step - static_cast<uint64_t>(std::max<int64_t>(0, options.warmupSteps));
  // CD-SGD's k-step correction counts global steps, as its reference code does.
  push.quantized = push.delayed && options.delay == PsOptions::Delay::kCompressed && step % k != 0;
  push.wantReply =
      !push.delayed || options.delay != PsOptions::Delay::kSeveralSteps || sinceWarmup % k == k - 1;
  return push;
}

PsWorkerClient::PsWorkerClient(Transport& transport, WorkerSetup setup, PsOptions options,
                               EngineEvents& events)
    : transport_(transport), s_(std::move(setup)), options_(options), events_(events) {
  checkOptions(options_, s_.layout, s_.plan);
  const PsPlacement& placement = options_.placement;
  GS_CHECK(transport.size() == placement.worldSize() && transport.rank() < placement.workers);
  GS_CHECK(s_.parameters.size() == s_.tensors.size());
  std::vector<ServedUnit> served = servedUnits(s_.layout, s_.plan, s_.tensors);
  for (const ServedUnit& unit : served) {
    codecs_.push_back(unit.compression.dense()
                          ? nullptr
                          : std::make_unique<PushCodec>(unit.compression, unit.shapes));
  }
  const size_t total = s_.layout.totalElements;
  for (auto* buffer : {&staged_, &global_, &previous_, &replies_, &residual_, &localVelocity_})
    buffer->assign(total, 0.0f);
  span_.assign(s_.layout.units.size(), 1);
  pendingPull_.assign(s_.layout.units.size(), 0);
  freshPull_.assign(s_.layout.units.size(), false);
  expected_.resize(placement.servers);
  if (options_.predictWeights) {
    GS_CHECK(options_.delay == PsOptions::Delay::kNone &&
             options_.server.consistency != ServerOptions::Consistency::kSync);
    std::vector<size_t> elements;
    for (const CommUnit& unit : s_.layout.units) elements.push_back(unit.elements);
    // The direction is averaged over the replies as the momentum averages gradients.
    predictor_ = std::make_unique<WeightPredictor>(std::move(elements), options_.server.momentum);
    predicted_.assign(total, 0.0f);
  }
  bytesReported_ = transport_.bytesSent();
  if (placement.colocated && transport.rank() < placement.servers) {
    server_ = std::make_unique<ParameterServer>(transport, placement, transport.rank(),
                                                std::move(served), options_.server);
  }
  for (int s = 0; s < placement.servers; ++s) receivers_.emplace_back([this, s] { receive(s); });
}

PsWorkerClient::~PsWorkerClient() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& receiver : receivers_) receiver.join();
  for (int s = 0; s < options_.placement.servers; ++s) {
    try {
      sendRequest(s, {.request = PsRequest::kStop}, nullptr);
    } catch (const Error& e) {
      if (!failed_) GS_LOG(kWarn, "could not stop {}: {}", serverName(s), e.what());
    }
  }
  if (!server_) return;
  try {
    server_->wait();  // the other workers' kStop
  } catch (const Error& e) {
    if (!failed_) GS_LOG(kWarn, "{} failed: {}", serverName(transport_.rank()), e.what());
  }
}

std::string PsWorkerClient::serverName(int server) const {
  return fmt::format("parameter server {} (rank {})", server,
                     options_.placement.serverRank(server));
}

std::chrono::milliseconds PsWorkerClient::waitBound() const {
  return transport_.options().timeout * static_cast<int>(s_.layout.units.size() + 1);
}

// The last pull must be in before a delayed local step: it is the step's base. Returns whether
// a reply arrived since the unit's last local step.
bool PsWorkerClient::waitForPull(size_t unit) {
  std::unique_lock<std::mutex> lock(mutex_);
  const bool in = cv_.wait_for(lock, waitBound(),
                               [&] { return failed_ || stopping_ || pendingPull_[unit] == 0; });
  if (failed_ || stopping_) throw InternalError("the parameter-server client has stopped");
  if (!in) throw InternalError("a parameter-server reply never came", {.rank = transport_.rank()});
  const bool fresh = freshPull_[unit];
  freshPull_[unit] = false;
  return fresh;
}

OpOutcome PsWorkerClient::run(const PlannedOp& op) {
  GS_CHECK(op.kind == PlannedOp::Kind::kPush);
  if (!published_) publishState();
  const CommUnit& u = s_.layout.units[op.unit];
  const PushPlan push = planPush(options_, op.step);
  const bool freshPull = push.delayed && waitForPull(op.unit);
  OpOutcome outcome{.unitDone = push.delayed, .server = options_.placement.serverOf(op.unit)};
  // Codes (cdsgd's or a compressor's) are sent as they are; a dense gradient is staged, since
  // the slot is refilled by the next backward once the unit counts as done.
  const std::optional<std::vector<uint8_t>> codes = encode(op, push, outcome);
  if (!codes) {
    std::memcpy(staged_.data() + u.offset, s_.gradients.data() + u.offset,
                u.elements * sizeof(float));
  }
  if (push.delayed) localUpdate(op.unit, freshPull);
  const Nanos start = s_.clock->now();
  expectReply(op, push, outcome.server, start);
  const bool encoded = codes && !push.quantized;
  PsHeader header{
      .request = PsRequest::kPush,
      .unit = static_cast<uint32_t>(op.unit),
      .step = op.step,
      .lr = static_cast<float>(s_.lr),
      .threshold = options_.threshold,
      .flags = (push.wantReply ? kWantReply : 0u) | (push.quantized ? kQuantized : 0u) |
               (encoded ? kEncoded : 0u),
      .payloadBytes = static_cast<uint32_t>(codes ? codes->size() : u.elements * sizeof(float)),
      .seed = encoded ? codecs_[op.unit]->seedFor(s_.seed, op.step, transport_.rank()) : 0};
  sendRequest(outcome.server, header,
              codes ? static_cast<const void*>(codes->data()) : staged_.data() + u.offset);
  // What the transport sent since the last push: this push, and a co-located server's replies.
  const uint64_t bytes = transport_.bytesSent();
  outcome.bytesSent = bytes - bytesReported_;
  bytesReported_ = bytes;
  return outcome;
}

// cdsgd's 2-bit codes, or the compressor's encoding after its warm-up; none: the push is dense.
std::optional<std::vector<uint8_t>> PsWorkerClient::encode(const PlannedOp& op,
                                                           const PushPlan& push,
                                                           OpOutcome& outcome) {
  const CommUnit& u = s_.layout.units[op.unit];
  std::span<const float> gradient = s_.gradients.subspan(u.offset, u.elements);
  if (push.quantized) {
    return twoBitEncode(gradient, {residual_.data() + u.offset, u.elements}, options_.threshold);
  }
  PushCodec* codec = codecs_[op.unit].get();
  CompressionGuard* guard = s_.guard;
  if (codec == nullptr || op.step < static_cast<uint64_t>(s_.plan.warmupSteps) ||
      (guard != nullptr && guard->dense(op.unit, op.step))) {
    return {};
  }
  const Nanos start = s_.clock->now();
  std::vector<uint8_t> codes;
  const uint64_t seed = codec->seedFor(s_.seed, op.step, transport_.rank());
  codec->encode(gradient, codes, seed);
  outcome.encodeSeconds = secondsSince(*s_.clock, start);
  outcome.method = s_.plan.perTensor[u.tensors.front()].toString();
  if (guard != nullptr && guard->samples(op.step)) measure(op, *codec, gradient, codes, seed);
  return codes;
}

// As the ring executor measures its exchanges, with what this worker's push sends.
void PsWorkerClient::measure(const PlannedOp& op, PushCodec& codec, std::span<const float> gradient,
                             std::span<const uint8_t> codes, uint64_t seed) const {
  const std::span<const float> sent = codec.sent(codes, seed);
  const std::span<const float> residual = codec.residual();
  s_.guard->record(op.unit, op.step, l2Norm(gradient), l2Norm(sent),
                   residual.empty() ? -1 : l2Norm(residual), dotProduct(sent, gradient));
}

void PsWorkerClient::expectReply(const PlannedOp& op, const PushPlan& push, int server,
                                 Nanos sentAt) {
  if (!push.wantReply) return;
  events_.busy(+1);  // until the reply is in
  {
    std::lock_guard<std::mutex> lock(mutex_);
    expected_[server].push_back({op.unit, op.step, !push.delayed, sentAt});
    if (push.delayed) ++pendingPull_[op.unit];
  }
  cv_.notify_all();
}

void PsWorkerClient::sendRequest(int server, PsHeader header, const void* payload) {
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

void PsWorkerClient::rethrowNamingServer(int server, const Error& e) const {
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
                       .hint = hint,
                       .origin = e.context().origin};  // where a relayed failure began
  std::string what = fmt::format("{}: {}", serverName(server), e.detail());
  if (dynamic_cast<const PeerLostError*>(&e)) throw PeerLostError(what, context);
  if (dynamic_cast<const TimeoutError*>(&e)) throw TimeoutError(what, context);
  throw;
}

void PsWorkerClient::receive(int server) {
  try {
    while (true) {
      Expected e;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || failed_ || !expected_[server].empty(); });
        if (failed_ || expected_[server].empty()) return;
        e = expected_[server].front();
        expected_[server].pop_front();
      }
      const CommUnit& u = s_.layout.units[e.unit];
      const int rank = options_.placement.serverRank(server);
      std::optional<PsStaleness> staleness;
      try {
        transport_
            .recv(rank, psReplyTag(e.unit), replies_.data() + u.offset, u.elements * sizeof(float))
            ->wait();
        if (options_.server.consistency != ServerOptions::Consistency::kSync) {
          PsStaleness answered;
          transport_.recv(rank, psReplyTag(e.unit), &answered, sizeof answered)->wait();
          staleness = answered;
        }
      } catch (const Error& error) {
        rethrowNamingServer(server, error);
      }
      arrived(e, server, staleness);
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      failed_ = true;
    }
    cv_.notify_all();
    events_.fail(std::current_exception());
  }
}

// A reply is in replies_: warm-up and plain strategies take it as their parameters; the delayed
// ones keep it aside as the next local step's base.
void PsWorkerClient::arrived(const Expected& e, int server, std::optional<PsStaleness> staleness) {
  const CommUnit& u = s_.layout.units[e.unit];
  auto at = static_cast<std::ptrdiff_t>(u.offset);
  auto n = static_cast<std::ptrdiff_t>(u.elements);
  if (e.toParameters) replyToParameters(e.unit, staleness);
  std::copy_n(global_.begin() + at, n, previous_.begin() + at);
  std::copy_n(replies_.begin() + at, n, global_.begin() + at);
  // Steps between the two global models: SSD-SGD pulls every K steps after the warm-up.
  const bool several = options_.delay == PsOptions::Delay::kSeveralSteps;
  span_[e.unit] = !e.toParameters && several ? options_.delaySteps : 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!e.toParameters) --pendingPull_[e.unit];
    freshPull_[e.unit] = true;
  }
  cv_.notify_all();
  if (staleness) events_.pushAnswered(staleness->staleness);
  events_.traceSpan(e.unit, "pull", e.sentAt,
                    staleness ? fmt::format("server {}, staleness {}", server, staleness->staleness)
                              : fmt::format("server {}", server));
  if (e.toParameters) events_.unitDone(e.unit, e.step);
  events_.busy(-1);
}

// LWP (`--compensate lwp`): the forward and the backward of the unit's next step run on the
// weights predicted over its staleness; the reply stays in global_ (and the predictor) as the
// servers' model.
void PsWorkerClient::replyToParameters(size_t unit, std::optional<PsStaleness> staleness) {
  if (!predictor_ || !staleness) return copyToParameters(unit, replies_);
  const CommUnit& u = s_.layout.units[unit];
  predictor_->predict(unit, {replies_.data() + u.offset, u.elements}, *staleness,
                      {predicted_.data() + u.offset, u.elements});
  copyToParameters(unit, predicted_);
}

}  // namespace gradsync
