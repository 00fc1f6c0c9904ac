// Linear Weight Prediction on a worker of the asynchronous parameter servers (`--compensate lwp`
// with asgd or ssp:S; docs/algorithms.md, "Staleness compensation on the servers").
//
// Under asgd and ssp, the gradient a worker computes on the parameters of a reply is applied
// about D updates of the unit later (D: the push's staleness, which the server measures and
// sends back with the reply: ps/protocol.h, PsStaleness). Kosson et al.'s LWP computes the
// gradient on the weights predicted D updates ahead instead. The worker does not hold the
// servers' velocity, so the direction comes from the replies themselves: the displacement per
// update between the unit's previous reply and this one,
//   d = (w_new − w_prev) / (updates_new − updates_prev),
// (under asgd the interval is the push's staleness + 1: the others' updates and its own; under
// ssp a held-back reply may carry a few more), averaged over the replies as a velocity is,
//   d̄ ← β·d̄ + (1 − β)·d   (d̄ = 0 before the second reply; β = `smoothing`, the momentum),
// and the horizon D is a running mean of the unit's measured staleness (an exponential average
// with weight kStalenessSmoothing, started at the first measurement): the next push's staleness
// is not known until it is applied, and one measurement is noisy. The predicted weights are
// ŵ = w_new + D·d̄. Why d̄ and not d (docs/algorithms.md): asgd's explicit momentum per push is
// small (asynchrony supplies the rest), so d is mostly the last few gradients; extrapolated D
// updates ahead, an oscillating sharp direction is amplified (w_prev ≈ −w gives ŵ ≈ (1 + 2D)·w)
// and training diverged (4 of 8 one-epoch runs of cnn). β = 0 is the unsmoothed rule.
//
// The first reply of a unit (after a start or a resume) has no previous one: it is trained on as
// it is (ŵ = w_new), and starts the running mean.
//
// Pure arithmetic, no I/O. Thread-safety: calls for different units may run concurrently (one
// receiver thread per server); calls for one unit must not. The unit sizes are fixed at
// construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "ps/protocol.h"

namespace gradsync {

class WeightPredictor {
 public:
  // Weight of the newest staleness in the running mean: about the last eight pushes count.
  static constexpr double kStalenessSmoothing = 1.0 / 8;

  // `smoothing` in [0, 1): β, the weight of the previous direction.
  WeightPredictor(std::vector<size_t> unitElements, double smoothing);

  // Records `pulled`, the unit's weights from a reply that says `reply`, and writes into
  // `predicted` (same size, not aliasing `pulled`) the weights to train on until the unit's next
  // reply. Returns the horizon it predicted over (0 at the unit's first reply).
  double predict(size_t unit, std::span<const float> pulled, PsStaleness reply,
                 std::span<float> predicted);

  // The unit's last pulled weights (the servers' at that reply, never a prediction); empty before
  // its first reply.
  std::span<const float> pulled(size_t unit) const;
  // The running mean of the unit's staleness (0 before its first reply).
  double horizon(size_t unit) const { return units_[unit].meanStaleness; }

 private:
  struct Unit {
    std::vector<float> pulled;     // the last reply's weights
    std::vector<float> direction;  // d̄, per update
    uint64_t updates = 0;          // the last reply's update count
    double meanStaleness = 0;
    bool seen = false;  // a reply arrived
  };
  std::vector<Unit> units_;
  std::vector<size_t> elements_;
  double smoothing_;
};

}  // namespace gradsync
