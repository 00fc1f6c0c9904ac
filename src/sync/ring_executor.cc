#include "sync/ring_executor.h"

#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "transport/counting_transport.h"

namespace gradsync {
namespace {

// Each unit's stream (tags.h); checkpoints gather the velocity on a stream of their own.
CollectiveOptions unitStream(size_t unit) {
  return {.tag = tags::kGradientUnits + unit};
}
const CollectiveOptions kVelocityStream{.tag = tags::kVelocity};

// Each unit's compressor (null: dense), as the plan says for its tensors.
std::vector<std::unique_ptr<Compressor>> makeCompressors(const RingSetup& s) {
  std::vector<std::unique_ptr<Compressor>> compressors;
  for (size_t u = 0; u < s.layout.units.size(); ++u) {
    compressors.push_back(makeCompressor(s.plan.perTensor[s.layout.units[u].tensors[0]],
                                         unitShapes(s.layout, u, s.tensors)));
  }
  return compressors;
}

// Each compressed unit's codec for the warm-up's steps (null: float32), stateless.
std::vector<std::unique_ptr<Compressor>> makeWarmupCodecs(
    const RingSetup& s, const std::vector<std::unique_ptr<Compressor>>& compressors) {
  std::vector<std::unique_ptr<Compressor>> codecs;
  for (size_t u = 0; u < s.layout.units.size(); ++u) {
    codecs.push_back(compressors[u] == nullptr
                         ? nullptr
                         : makeCompressor(s.plan.warmupCodec, unitShapes(s.layout, u, s.tensors)));
  }
  return codecs;
}

}  // namespace

RingExecutor::RingExecutor(Transport& transport, RingSetup setup)
    : transport_(transport),
      s_(std::move(setup)),
      compressors_(makeCompressors(s_)),
      warmupCodecs_(makeWarmupCodecs(s_, compressors_)),
      budgets_(s_.tensors, s_.layout, compressors_) {
  GS_CHECK(s_.gradients.size() == s_.layout.totalElements);
  GS_CHECK(!s_.updates || s_.parameters.size() == s_.tensors.size());
  if (!s_.updates) return;
  for (size_t u = 0; u < s_.layout.units.size(); ++u) {
    const CommUnit& unit = s_.layout.units[u];
    const size_t columns = exchangedColumns(u);
    if (s_.sharded) {
      owned_.push_back(
          columns > 0 ? columnOwnership(unit.elements, columns, transport.size(), transport.rank())
                      : flatOwnership(unit.elements, transport.size(), transport.rank()));
    }
    velocityAt_.push_back(s_.sharded ? velocity_.size() : unit.offset);
    velocity_.resize(velocity_.size() + (s_.sharded ? owned_[u].elements() : unit.elements), 0.0f);
  }
  if (s_.rule.stateSlots() == 2) secondMoment_.assign(velocity_.size(), 0.0f);
}

OpOutcome RingExecutor::run(const PlannedOp& op) {
  const CommUnit& unit = s_.layout.units[op.unit];
  CountingTransport transport(transport_);  // this operation's bytes, whatever else runs
  OpOutcome outcome;
  switch (op.kind) {
    case PlannedOp::Kind::kAllreduce:
      outcome.method = exchange(op, transport, outcome);
      if (s_.updates) update(op.unit, 0, unit.elements, op.step, velocityAt_[op.unit]);
      outcome.unitDone = true;
      break;
    case PlannedOp::Kind::kReduceScatter:
      if (exchangedColumns(op.unit) == 0) {  // else the FC exchange averaged our columns already
        reduceScatter(transport, s_.gradients.subspan(unit.offset, unit.elements),
                      ReduceOp::kAverage, unitStream(op.unit));
      }
      updateOwned(op.unit, op.step);
      break;  // done once the allgather brought every block
    case PlannedOp::Kind::kAllgather:
      allgatherParameters(op.unit, transport);
      outcome.unitDone = true;
      break;
    case PlannedOp::Kind::kPush:
      GS_CHECK(false && "the ring has no parameter servers to push to");
  }
  outcome.bytesSent = transport.bytesSent();
  return outcome;
}

std::string RingExecutor::exchange(const PlannedOp& op, Transport& transport, OpOutcome& outcome) {
  const CommUnit& u = s_.layout.units[op.unit];
  std::span<float> data = s_.gradients.subspan(u.offset, u.elements);
  Compressor* compressor = compressors_[op.unit].get();
  CompressionGuard* guard = s_.guard;
  const bool warmup = op.step < static_cast<uint64_t>(s_.plan.warmupSteps);
  if (warmup && warmupCodecs_[op.unit] != nullptr) {  // the warm-up in fp16 or int8
    ExchangeContext context{transport, unitStream(op.unit), op.step, s_.seed, s_.clock};
    ExchangeStats stats;
    std::vector<float> sent = takeScratch(u.elements);
    warmupCodecs_[op.unit]->exchange(context, data, {sent.data(), u.elements}, stats);
    giveBack(std::move(sent));
    outcome.encodeSeconds = stats.encodeSeconds;
    outcome.decodeSeconds = stats.decodeSeconds;
    return s_.plan.warmupCodec.toString();
  }
  if (compressor == nullptr || warmup || (guard != nullptr && guard->dense(op.unit, op.step))) {
    allreduce(transport, data, ReduceOp::kAverage, unitStream(op.unit));
    return {};
  }
  {
    std::lock_guard<std::mutex> lock(budgetsMutex_);
    budgets_.allot(op.unit, op.step, s_.gradients);
  }
  ExchangeContext context{transport, unitStream(op.unit), op.step, s_.seed, s_.clock};
  ExchangeStats stats;
  std::vector<float> sent = takeScratch(u.elements);
  const bool measured = guard != nullptr && guard->samples(op.step);
  std::vector<float> gradient;  // measured steps: the gradient the exchange replaces
  if (measured) {
    gradient = takeScratch(u.elements);
    std::copy(data.begin(), data.end(), gradient.begin());
  }
  compressor->exchange(context, data, {sent.data(), u.elements}, stats);
  if (measured) {
    const std::span<const float> g(gradient.data(), u.elements), mine(sent.data(), u.elements);
    guard->record(op.unit, op.step, l2Norm(g), l2Norm(mine),
                  CompressionGuard::residualNorm(*compressor), dotProduct(mine, g));
    giveBack(std::move(gradient));
  }
  giveBack(std::move(sent));
  outcome.encodeSeconds = stats.encodeSeconds;
  outcome.decodeSeconds = stats.decodeSeconds;
  return s_.plan.perTensor[u.tensors.front()].toString();
}

std::vector<float> RingExecutor::takeScratch(size_t elements) {
  std::vector<float> scratch;
  {
    std::lock_guard<std::mutex> lock(scratchMutex_);
    if (!scratch_.empty()) {
      scratch = std::move(scratch_.back());
      scratch_.pop_back();
    }
  }
  if (scratch.size() < elements) scratch.resize(elements);
  return scratch;
}

void RingExecutor::giveBack(std::vector<float> scratch) {
  std::lock_guard<std::mutex> lock(scratchMutex_);
  scratch_.push_back(std::move(scratch));
}

size_t RingExecutor::exchangedColumns(size_t unit) const {
  const CommUnit& u = s_.layout.units[unit];
  if (s_.exchangedColumns.empty() || u.tensors.size() != 1) return 0;
  return s_.exchangedColumns[u.tensors.front()];
}

void RingExecutor::updateOwned(size_t unit, uint64_t step) {
  const Ownership& own = owned_[unit];
  for (size_t k = 0; k < own.runs; ++k) {
    update(unit, own.runBegin(k), own.runBegin(k) + own.length, step,
           velocityAt_[unit] + k * own.length);
  }
}

void RingExecutor::update(size_t unit, size_t begin, size_t end, uint64_t step, size_t velocityAt) {
  const CommUnit& u = s_.layout.units[unit];
  const size_t first = u.offset + begin;
  const size_t last = u.offset + end;
  GS_CHECK(static_cast<int64_t>(step) >= stateOrigin_);
  const auto stateStep = static_cast<uint64_t>(static_cast<int64_t>(step) - stateOrigin_) + 1;
  for (int t : u.tensors) {
    const size_t lo = std::max(first, s_.layout.offsetOf[t]);
    const size_t hi = std::min(last, s_.layout.offsetOf[t] + s_.tensors[t].elements);
    if (lo >= hi) continue;
    UpdateRule rule = s_.rule;
    if (s_.plan.absorbsMomentum(t)) rule.momentum = 0;             // the compressor applied it
    if (stateOrigin_ > 0) rule.lr *= rule.restartRamp(stateStep);  // restarted mid-run
    const size_t at = velocityAt + (lo - first);
    UpdateState state{
        std::span(velocity_).subspan(at, hi - lo),
        secondMoment_.empty() ? std::span<float>{} : std::span(secondMoment_).subspan(at, hi - lo)};
    // The state's step in progress, counted from 1: Adam's bias correction.
    applyUpdate(rule, s_.parameters[t].subspan(lo - s_.layout.offsetOf[t], hi - lo),
                std::span<const float>(s_.gradients).subspan(lo, hi - lo), state, stateStep);
  }
}

void RingExecutor::gradientToMomentum(int t, std::span<float> gradient) {
  GS_CHECK(s_.updates && !s_.sharded && gradient.size() == s_.tensors[t].elements);
  const std::span<const float> moment(velocity_.data() + s_.layout.offsetOf[t], gradient.size());
  gradsync::gradientToMomentum(s_.rule, s_.parameters[t], gradient, moment);
}

// The unit's slot stages the parameters: this rank's block (just updated) goes in, the
// allgather fills the rest, and every tensor of the unit takes its values back.
void RingExecutor::allgatherParameters(size_t unit, Transport& transport) {
  const CommUnit& u = s_.layout.units[unit];
  if (const size_t columns = exchangedColumns(unit); columns > 0) {  // a unit of one tensor
    allgatherOwned(transport, s_.parameters[u.tensors.front()], columns,
                   s_.gradients.subspan(u.offset, u.elements), unitStream(unit).tag);
    return;
  }
  const Block own = blockOf(u.elements, transport_.size(), transport_.rank());
  auto copy = [&](size_t begin, size_t end, bool toParameters) {
    for (int t : u.tensors) {
      const size_t lo = std::max(u.offset + begin, s_.layout.offsetOf[t]);
      const size_t hi = std::min(u.offset + end, s_.layout.offsetOf[t] + s_.tensors[t].elements);
      if (lo >= hi) continue;
      float* parameter = s_.parameters[t].data() + (lo - s_.layout.offsetOf[t]);
      float* staged = s_.gradients.data() + lo;
      std::memcpy(toParameters ? parameter : staged, toParameters ? staged : parameter,
                  (hi - lo) * sizeof(float));
    }
  };
  copy(own.begin, own.end, false);
  allgather(transport, s_.gradients.subspan(u.offset, u.elements), unitStream(unit));
  copy(0, u.elements, true);
}

std::vector<std::vector<float>*> RingExecutor::stateArrays() {
  if (!s_.updates) return {};
  if (secondMoment_.empty()) return {&velocity_};
  return {&velocity_, &secondMoment_};
}

std::vector<float> RingExecutor::wholeByTensor(const std::vector<float>& local) {
  std::vector<float> flat(s_.layout.totalElements);
  if (s_.sharded) {
    std::vector<float> staging;
    for (size_t u = 0; u < s_.layout.units.size(); ++u) {
      const CommUnit& unit = s_.layout.units[u];
      std::span<float> values(flat.data() + unit.offset, unit.elements);
      unpackOwned(owned_[u], std::span(local).subspan(velocityAt_[u]), values);
      staging.resize(unit.elements);
      allgatherOwned(transport_, values, exchangedColumns(u), staging, kVelocityStream.tag);
    }
  } else {
    flat = local;
  }
  return layoutToTensors(s_.layout, s_.tensors, flat);
}

void RingExecutor::setFromTensors(std::span<const float> byTensor, std::vector<float>& local) {
  std::vector<float> flat = tensorsToLayout(s_.layout, s_.tensors, byTensor);
  if (!s_.sharded) {
    local = std::move(flat);
    return;
  }
  for (size_t u = 0; u < s_.layout.units.size(); ++u) {
    const CommUnit& unit = s_.layout.units[u];
    packOwned(owned_[u], std::span<const float>(flat).subspan(unit.offset, unit.elements),
              std::span(local).subspan(velocityAt_[u]));
  }
}

std::vector<float> RingExecutor::optimizerState() {
  std::vector<float> state;
  for (const std::vector<float>* local : stateArrays()) {
    const std::vector<float> whole = wholeByTensor(*local);
    state.insert(state.end(), whole.begin(), whole.end());
  }
  return state;
}

void RingExecutor::setOptimizerState(std::span<const float> byTensor) {
  const std::vector<std::vector<float>*> arrays = stateArrays();
  const size_t total = s_.layout.totalElements;
  GS_CHECK(s_.updates && byTensor.size() == arrays.size() * total);
  for (size_t i = 0; i < arrays.size(); ++i) {
    setFromTensors(byTensor.subspan(i * total, total), *arrays[i]);
  }
}

void RingExecutor::saveState(StateWriter& out) const {
  for (const auto& compressor : compressors_) {
    if (compressor) compressor->saveState(out);
  }
}

void RingExecutor::loadState(StateReader& in, uint64_t format) {
  if (format == 1 && !secondMoment_.empty()) {  // Adam's moments (this rank's blocks if sharded)
    in.readExact(velocity_);
    in.readExact(secondMoment_);
  }
  for (const auto& compressor : compressors_) {
    if (compressor) compressor->loadState(in);
  }
}

}  // namespace gradsync
