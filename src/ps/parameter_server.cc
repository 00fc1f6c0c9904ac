#include "ps/parameter_server.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "compress/push_codec.h"
#include "compress/two_bit.h"
#include "gradsync/error.h"
#include "optim/delay_compensation.h"
#include "optim/update_rule.h"
#include "ps/idle_wait.h"

namespace gradsync {

struct ParameterServer::Unit {
  size_t index = 0;
  std::vector<float> parameters, velocity, sum;
  std::unique_ptr<PushCodec> decoder;  // null: pushes come dense (or 2-bit)
  uint64_t updates = 0;                // updates applied (the update rule's step count)
  // kSync, by worker: the round's pushes, decoded. They are summed in worker order once all
  // arrived, so the sum does not depend on arrival order and runs repeat bitwise.
  std::vector<std::vector<float>> pushed;
  bool initialized = false;           // a worker set its state (kSetState)
  std::condition_variable roundOpen;  // pushes wait for the state, and (kSync) for their round
  int arrived = 0;                    // kSync: pushes in the current round
  std::vector<bool> inRound;          // kSync, by worker: pushed in the current round
  std::vector<bool> wantsReply;       // kSync, by worker
  std::vector<uint64_t> pushes;       // kAsync, kStale, by worker: pushes applied
  std::vector<uint64_t> servedAt;     // kAsync, kStale, by worker: `updates` of its last reply
  std::vector<PendingReply> pending;  // kStale: answers held back
};

ParameterServer::ParameterServer(Transport& transport, PsPlacement placement, int index,
                                 std::vector<ServedUnit> served, ServerOptions options)
    : transport_(transport),
      placement_(placement),
      index_(index),
      options_(options),
      stopped_(placement.workers, false) {
  GS_CHECK(transport.size() == placement.worldSize());
  units_.resize(served.size());
  for (size_t u = 0; u < served.size(); ++u) {
    if (placement.serverOf(u) != index) continue;
    auto unit = std::make_unique<Unit>();
    const size_t elements = served[u].elements;
    unit->index = u;
    unit->parameters.assign(elements, 0.0f);
    unit->velocity.assign(elements, 0.0f);
    unit->sum.assign(elements, 0.0f);
    if (!served[u].compression.dense()) {
      unit->decoder = std::make_unique<PushCodec>(served[u].compression, served[u].shapes);
    }
    unit->inRound.assign(placement.workers, false);
    unit->wantsReply.assign(placement.workers, false);
    unit->pushes.assign(placement.workers, 0);
    unit->servedAt.assign(placement.workers, 0);
    if (options.consistency == ServerOptions::Consistency::kSync) {
      unit->pushed.assign(placement.workers, std::vector<float>(elements, 0.0f));
    }
    units_[u] = std::move(unit);
  }
  for (int w = 0; w < placement.workers; ++w) threads_.emplace_back([this, w] { serveWorker(w); });
}

ParameterServer::~ParameterServer() {
  try {
    finish();
  } catch (const Error&) {  // wait() reports failures; the buffers are released either way
  }
}

void ParameterServer::wait() {
  finish();
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

// Joins the receiving threads, then waits for the replies still on the wire; a reply that times
// out keeps its buffer until the transport is aborted (transport.h), so abort before freeing.
void ParameterServer::finish() {
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  std::vector<InFlight> sends;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sends.swap(sends_);
  }
  for (auto& send : sends) {
    try {
      send.work->wait();
    } catch (const TimeoutError&) {
      transport_.abort(std::current_exception());
      throw;
    } catch (const Error&) {  // the transport failed: it no longer touches the buffer
    }
  }
}

void ParameterServer::serveWorker(int worker) {
  try {
    PsHeader header;
    std::vector<uint8_t> payload;
    do {
      waitPatiently(*transport_.recv(worker, tags::kPsRequest, &header, sizeof header));
      checkPayload(worker, header);
      payload.resize(header.payloadBytes);
      if (!payload.empty()) {
        transport_.recv(worker, tags::kPsPayload, payload.data(), payload.size())->wait();
      }
    } while (handle(worker, header, payload));
  } catch (...) {
    recordFailure(worker);
  }
}

// A failed server fails the job at once: aborting the transport fails every worker's pending
// request (they name this server) instead of leaving them to their timeouts, and releases the
// buffers of timed-out receives (transport.h).
void ParameterServer::recordFailure(int worker) {
  std::exception_ptr error = std::current_exception();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = error;
    stopped_[worker] = true;
    for (auto& unit : units_) {
      if (unit) unit->roundOpen.notify_all();
    }
  }
  transport_.abort(error);
}

void ParameterServer::checkPayload(int worker, const PsHeader& header) const {
  if (header.request == PsRequest::kStop && header.payloadBytes == 0) return;
  if (header.request != PsRequest::kStop &&
      (header.unit >= units_.size() || !units_[header.unit])) {
    throw ProtocolError(
        fmt::format("unit {} is not placed on parameter server {}", header.unit, index_),
        {.rank = transport_.rank(), .peer = worker});
  }
  const Unit* unit = header.request == PsRequest::kStop ? nullptr : units_[header.unit].get();
  const size_t elements = unit ? unit->parameters.size() : 0;
  size_t expected = 0;  // exact, except an encoded push's upper bound
  switch (header.request) {
    case PsRequest::kPush:
      if ((header.flags & kEncoded) && !unit->decoder) {
        throw ProtocolError(
            fmt::format("an encoded push of unit {}, which goes dense", unit->index),
            {.rank = transport_.rank(), .peer = worker});
      }
      expected = header.flags & kEncoded     ? unit->decoder->maxBytes()
                 : header.flags & kQuantized ? twoBitBytes(elements)
                                             : elements * sizeof(float);
      break;
    case PsRequest::kSetState:
      expected = 2 * elements * sizeof(float);
      break;
    case PsRequest::kGetState:
    case PsRequest::kStop:
      break;
    default:
      throw ProtocolError(
          fmt::format("unknown parameter-server request {}", static_cast<uint32_t>(header.request)),
          {.rank = transport_.rank(), .peer = worker});
  }
  const bool encoded = header.request == PsRequest::kPush && (header.flags & kEncoded);
  if (encoded ? header.payloadBytes <= expected : header.payloadBytes == expected) return;
  throw ProtocolError(fmt::format("request {} for unit {} carries {} bytes, expected {}{}",
                                  static_cast<uint32_t>(header.request), header.unit,
                                  header.payloadBytes, encoded ? "at most " : "", expected),
                      {.rank = transport_.rank(), .peer = worker});
}

bool ParameterServer::handle(int worker, const PsHeader& header, std::vector<uint8_t>& payload) {
  switch (header.request) {
    case PsRequest::kPush:
      push(worker, header, payload);
      return true;
    case PsRequest::kSetState: {
      std::lock_guard<std::mutex> lock(mutex_);
      Unit& unit = *units_[header.unit];
      size_t n = unit.parameters.size();
      std::memcpy(unit.parameters.data(), payload.data(), n * sizeof(float));
      std::memcpy(unit.velocity.data(), payload.data() + n * sizeof(float), n * sizeof(float));
      unit.initialized = true;
      unit.roundOpen.notify_all();
      return true;
    }
    case PsRequest::kGetState: {
      std::unique_lock<std::mutex> lock(mutex_);
      Unit& unit = *units_[header.unit];
      // A consistent state: every push this worker made is applied (a synchronous round it
      // joined may still miss the others' pushes). Rounds it has not joined are later steps of
      // workers that went on: waiting for them would wait for this worker's own push.
      waitFor(lock, unit,
              [&] { return unit.initialized && (unit.arrived == 0 || !unit.inRound[worker]); });
      auto state = std::make_shared<std::vector<float>>(unit.parameters);
      state->insert(state->end(), unit.velocity.begin(), unit.velocity.end());
      reply(worker, std::move(state), tags::kPsState);
      return true;
    }
    case PsRequest::kStop: {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_[worker] = true;
      for (auto& unit : units_) {
        if (!unit) continue;
        releaseStale(*unit);  // a stopped worker holds nobody back
        unit->roundOpen.notify_all();
      }
      return false;
    }
  }
  return false;
}

// Waits until `ready()`; throws once it can no longer become true: the state was never set and
// worker 0 (which sets it) stopped, or a round misses a stopped worker's push.
template <typename Ready>
void ParameterServer::waitFor(std::unique_lock<std::mutex>& lock, Unit& unit, Ready ready) {
  unit.roundOpen.wait(lock, [&] { return ready() || error_ || stuck(unit); });
  if (ready()) return;
  if (error_) std::rethrow_exception(error_);
  throw ProtocolError(
      fmt::format("unit {} waits for a worker that has stopped", unit.index),
      {.rank = transport_.rank(), .hint = "a worker stopped before its last step; see its error"});
}

bool ParameterServer::stuck(const Unit& unit) const {
  if (!unit.initialized && stopped_[0]) return true;
  if (options_.consistency != ServerOptions::Consistency::kSync || unit.arrived == 0) return false;
  for (int w = 0; w < placement_.workers; ++w) {
    if (stopped_[w] && !unit.inRound[w]) return true;
  }
  return false;
}

void ParameterServer::push(int worker, const PsHeader& header, std::span<const uint8_t> payload) {
  std::unique_lock<std::mutex> lock(mutex_);
  Unit& unit = *units_[header.unit];
  const size_t n = unit.parameters.size();
  const bool sync = options_.consistency == ServerOptions::Consistency::kSync;
  // A worker that needs no answer may push the next step before the others pushed this one.
  waitFor(lock, unit, [&] { return unit.initialized && !(sync && unit.inRound[worker]); });
  if ((header.flags & kQuantized) && !(header.threshold > 0 && std::isfinite(header.threshold))) {
    throw ProtocolError(
        fmt::format("2-bit push of unit {} with threshold {}", unit.index, header.threshold),
        {.rank = transport_.rank(), .peer = worker});
  }
  // kSync keeps the push for the round's ordered sum; the others apply it alone, from unit.sum.
  std::span<float> decoded = sync ? std::span<float>(unit.pushed[worker]) : std::span(unit.sum);
  if (header.flags & kEncoded) {
    std::fill(decoded.begin(), decoded.end(), 0.0f);
    try {
      unit.decoder->decodeAdd(payload, decoded, header.seed);
    } catch (const ProtocolError& e) {
      throw ProtocolError(fmt::format("encoded push of unit {}: {}", unit.index, e.detail()),
                          {.rank = transport_.rank(), .peer = worker});
    }
  } else if (header.flags & kQuantized) {
    std::fill(decoded.begin(), decoded.end(), 0.0f);
    twoBitAccumulate(payload, header.threshold, decoded);
  } else {
    std::memcpy(decoded.data(), payload.data(), n * sizeof(float));
  }
  if (sync) {
    unit.inRound[worker] = true;
    unit.wantsReply[worker] = header.flags & kWantReply;
    if (++unit.arrived == placement_.workers) applySync(unit, header);
    return;
  }
  // The worker computed this gradient on the parameters of its last reply; the updates applied
  // since are its staleness.
  const uint64_t staleness = unit.updates - unit.servedAt[worker];
  const UpdateRule rule = asyncSgd(header.lr, staleness);
  if (options_.spikeCompensation) {
    applyDelayedSgd(rule, unit.parameters, unit.sum, unit.velocity, static_cast<double>(staleness),
                    /*spike=*/true);
    ++unit.updates;
  } else {
    applyUpdate(rule, unit.parameters, unit.sum, {unit.velocity, {}}, ++unit.updates);
  }
  ++unit.pushes[worker];
  if (header.flags & kWantReply) unit.pending.push_back({worker, unit.pushes[worker], staleness});
  releaseStale(unit);
}

// One push of W per step. Asynchrony itself acts as momentum of about 1 - 1/W (Mitliagkas et
// al., "Asynchrony begets momentum"), so the explicit momentum per step is reduced by that much,
// m_e = max(0, m - (1 - 1/W)), and spread over the pushes: m_push = m_e^(1/W). The learning rate
// per push, lr (1 - m_push) / (W (1 - m)), makes W pushes of a steady gradient move the
// parameters as far as one synchronous step with momentum m does (m = 0: lr / W). Pushes in
// any order within two rounds are at most 2 (W - 1) updates stale; a staler push (its worker
// was descheduled while the others ran ahead) has its learning rate scaled by
// 2 (W - 1) / staleness, after Zhang et al.'s staleness-aware async SGD (lr / staleness): the
// gradient of parameters that old is trusted less.
UpdateRule ParameterServer::asyncSgd(double lr, uint64_t staleness) const {
  const double workers = placement_.workers;
  const double m = options_.momentum;
  const double explicitMomentum = std::max(0.0, m - (1 - 1 / workers));
  const double perPush = std::pow(explicitMomentum, 1.0 / workers);
  const double expected = 2 * (workers - 1);
  const double trust =
      static_cast<double>(staleness) > expected ? expected / static_cast<double>(staleness) : 1.0;
  return UpdateRule::sgd(lr * trust * (1 - perPush) / (workers * (1 - m)), perPush);
}

void ParameterServer::applySync(Unit& unit, const PsHeader& header) {
  std::copy(unit.pushed[0].begin(), unit.pushed[0].end(), unit.sum.begin());
  for (int w = 1; w < placement_.workers; ++w) {
    for (size_t i = 0; i < unit.sum.size(); ++i) unit.sum[i] += unit.pushed[w][i];
  }
  const float scale = 1.0f / static_cast<float>(placement_.workers);
  for (float& g : unit.sum) g *= scale;
  applyUpdate(UpdateRule::sgd(header.lr, options_.momentum), unit.parameters, unit.sum,
              {unit.velocity, {}}, ++unit.updates);
  unit.arrived = 0;
  auto snapshot = std::make_shared<std::vector<float>>(unit.parameters);  // one for every reply
  for (int w = 0; w < placement_.workers; ++w) {
    if (unit.wantsReply[w]) reply(w, snapshot, psReplyTag(unit.index));
    unit.inRound[w] = false;
  }
  unit.roundOpen.notify_all();
}

// Answers the held-back pushes that no longer run ahead of the slowest worker by more than the
// staleness bound (kAsync: the bound is infinite).
void ParameterServer::releaseStale(Unit& unit) {
  const bool bounded = options_.consistency == ServerOptions::Consistency::kStale;
  uint64_t slowest = UINT64_MAX;
  for (int w = 0; w < placement_.workers; ++w) {
    if (!stopped_[w]) slowest = std::min(slowest, unit.pushes[w]);
  }
  auto held = unit.pending.begin();
  while (held != unit.pending.end()) {
    bool release = !bounded || slowest == UINT64_MAX ||
                   held->pushes <= slowest + static_cast<uint64_t>(options_.staleness);
    if (!release) {
      ++held;
      continue;
    }
    reply(held->worker, std::make_shared<std::vector<float>>(unit.parameters),
          psReplyTag(unit.index));
    reply(held->worker, std::make_shared<PsStaleness>(PsStaleness{held->staleness, unit.updates}),
          psReplyTag(unit.index));
    unit.servedAt[held->worker] = unit.updates;
    held = unit.pending.erase(held);
  }
}

void ParameterServer::reply(int worker, std::shared_ptr<const std::vector<float>> snapshot,
                            uint64_t tag) {
  const float* data = snapshot->data();
  const size_t bytes = snapshot->size() * sizeof(float);
  send(worker, std::move(snapshot), data, bytes, tag);
}

void ParameterServer::reply(int worker, std::shared_ptr<const PsStaleness> staleness,
                            uint64_t tag) {
  const PsStaleness* data = staleness.get();
  send(worker, std::move(staleness), data, sizeof(PsStaleness), tag);
}

void ParameterServer::send(int worker, std::shared_ptr<const void> keepAlive, const void* data,
                           size_t bytes, uint64_t tag) {
  reapSends();
  sends_.push_back({transport_.send(worker, tag, data, bytes), std::move(keepAlive)});
}

void ParameterServer::reapSends() {
  std::erase_if(sends_, [](const InFlight& send) { return send.work->done(); });
}

}  // namespace gradsync
