// The engine's update mode (p3, sharded): the optimizer's rule (optim/update_rule.h) on the
// parameters as each unit's average arrives,
// the allgather of sharded's updated blocks, and the velocity's way in and out of checkpoints.
// Part of GradientEngine (gradient_engine.h), apart from its scheduling and threading.
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "sync/gradient_engine.h"

namespace gradsync {
namespace {

// Checkpoints gather the velocity on their own stream.
const CollectiveOptions kVelocityTag{.tag = tags::kVelocity};

}  // namespace

void GradientEngine::update(size_t unit, size_t begin, size_t end, size_t velocityAt) {
  const CommUnit& u = layout_.units[unit];
  const size_t first = u.offset + begin;
  const size_t last = u.offset + end;
  for (int t : u.tensors) {
    size_t lo = std::max(first, layout_.offsetOf[t]);
    size_t hi = std::min(last, layout_.offsetOf[t] + tensors_[t].elements);
    if (lo >= hi) continue;
    UpdateRule rule = options_.update;
    if (plan_.absorbsMomentum(t)) rule.momentum = 0;  // the compressor applied it
    const size_t at = velocityAt + (lo - first);
    UpdateState state{
        std::span(velocity_).subspan(at, hi - lo),
        secondMoment_.empty() ? std::span<float>{} : std::span(secondMoment_).subspan(at, hi - lo)};
    // The step in progress, counted from 1: Adam's bias correction.
    applyUpdate(rule, parameters_[t].subspan(lo - layout_.offsetOf[t], hi - lo),
                std::span<const float>(flat_).subspan(lo, hi - lo), state, step_ + 1);
  }
}

// The unit's flat span stages the parameters: this rank's block (just updated) goes in, the
// allgather fills the rest, and every tensor of the unit takes its values back.
void GradientEngine::allgatherParameters(size_t unit) {
  const CommUnit& u = layout_.units[unit];
  Block own = blockOf(u.elements, transport_.size(), transport_.rank());
  auto copy = [&](size_t begin, size_t end, bool toParameters) {
    for (int t : u.tensors) {
      size_t lo = std::max(u.offset + begin, layout_.offsetOf[t]);
      size_t hi = std::min(u.offset + end, layout_.offsetOf[t] + tensors_[t].elements);
      if (lo >= hi) continue;
      float* parameter = parameters_[t].data() + (lo - layout_.offsetOf[t]);
      float* staged = flat_.data() + lo;
      std::memcpy(toParameters ? parameter : staged, toParameters ? staged : parameter,
                  (hi - lo) * sizeof(float));
    }
  };
  copy(own.begin, own.end, false);
  allgather(transport_, {flat_.data() + u.offset, u.elements}, {.tag = tags::kGradients});
  copy(0, u.elements, true);
}

std::vector<float> GradientEngine::velocity() {
  GS_CHECK(updates_ && options_.update.kind == UpdateRule::Kind::kSgd);
  drain();
  std::vector<float> flat(layout_.totalElements);
  if (options_.sharded) {
    for (size_t u = 0; u < layout_.units.size(); ++u) {
      const CommUnit& unit = layout_.units[u];
      Block own = blockOf(unit.elements, transport_.size(), transport_.rank());
      std::copy_n(velocity_.begin() + static_cast<std::ptrdiff_t>(velocityAt_[u]), own.size(),
                  flat.begin() + static_cast<std::ptrdiff_t>(unit.offset + own.begin));
      allgather(transport_, {flat.data() + unit.offset, unit.elements}, kVelocityTag);
    }
  } else {
    flat = velocity_;
  }
  return layoutToTensors(layout_, tensors_, flat);
}

void GradientEngine::setVelocity(std::span<const float> byTensor) {
  GS_CHECK(updates_ && options_.update.kind == UpdateRule::Kind::kSgd &&
           byTensor.size() == layout_.totalElements);
  drain();
  std::vector<float> flat = tensorsToLayout(layout_, tensors_, byTensor);
  if (!options_.sharded) {
    velocity_ = std::move(flat);
    return;
  }
  for (size_t u = 0; u < layout_.units.size(); ++u) {
    const CommUnit& unit = layout_.units[u];
    Block own = blockOf(unit.elements, transport_.size(), transport_.rank());
    std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(unit.offset + own.begin), own.size(),
                velocity_.begin() + static_cast<std::ptrdiff_t>(velocityAt_[u]));
  }
}

}  // namespace gradsync
