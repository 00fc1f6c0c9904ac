// The compression guardrail (docs/algorithms.md, "The compression guardrail"): while training,
// watch three cheap signals of harm per compressed communication unit, and the training loss
// against the dense warm-up's (compress/loss_trend.h), and past a threshold in consecutive windows
// exchange that unit (for the loss: every compressed unit) densely from then on.
//   alignment cos(what the unit sent, its gradient). Random-k sends sums of ~100 old gradients at
//             random positions: cos ~ 0, where top-k, PowerSGD and QSGD stay above 0.2. The
//             signal that catches randomk:0.01 before it diverges.
//   residual  ||error-feedback residual|| / ||gradient||: what waits to be sent, in gradients;
//             past anything a working method showed (PowerSGD reaches 27x): an explosion.
//   sent      ||what the unit sent|| / ||gradient||: the bursts such a residual releases.
// All are measured on one step per window (the window's first), where the data already is: the
// executor copies the unit's gradient, then takes three norms and a dot product.
//
// GuardDetector is the decision, on numbers only. CompressionGuard feeds it inside an engine:
// the executor's communication threads record each unit's signals, and at the end of each
// window the training thread gathers every rank's (one allgather of 24 bytes per unit and rank)
// so that every rank takes the same decision, which applies from the next step on every rank.
// Over parameter servers (ps/worker_client.h) each worker feeds one with its own pushes and
// decides alone (checkAlone): a push travels alone and the server decodes each by its own flags.
// A unit made dense stays dense; its residual is dropped (never sent: a burst of ~100 stale
// gradients is the harm the guard prevents), and the exchange is exactly the dense allreduce.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "common/state_bytes.h"
#include "compress/compressor.h"
#include "compress/loss_trend.h"
#include "gradsync/guard_event.h"
#include "gradsync/transport.h"

namespace gradsync {

struct GuardOptions {
  int64_t windowSteps = 10;  // steps between checks; the first step of each window is measured
  // Thresholds (docs/algorithms.md gives the measurements they rest on).
  double residualRatio = 40;   // ||residual|| / ||gradient||
  double sentRatio = 6;        // ||sent|| / ||gradient||
  double misalignment = 0.95;  // 1 - cos(sent, gradient): cos below 0.05
  double lossRatio = 2;        // a window's mean loss / the warm-up's last window's
  int windowsToConfirm = 3;    // consecutive windows past a threshold before a unit goes dense
};

// One unit's signals in one window, the largest over the ranks; negative: not measured (the
// unit is dense, was not exchanged compressed in the measured step, or keeps no residual).
struct GuardSignals {
  double residualRatio = -1;
  double sentRatio = -1;
  // 1 - cos(sent, gradient): 0 when the unit sends the gradient's direction, 1 when what it
  // sends is orthogonal to it (stale values at random positions), up to 2.
  double misalignment = -1;
};

struct GuardTrip {
  size_t unit = 0;
  std::string signal;    // "alignment" | "residual" | "sent" | "loss"
  double ratio = 0;      // alignment: cos(sent, gradient) itself
  double threshold = 0;  // alignment: the cosine it fell below
};

// Not thread-safe (one caller).
class GuardDetector {
 public:
  GuardDetector(size_t units, GuardOptions options);

  // One window's signals by unit. Returns the units past a threshold in `windowsToConfirm`
  // consecutive windows, each unit once ever (a unit returned is dense for good).
  std::vector<GuardTrip> observe(std::span<const GuardSignals> window);
  // The window's loss ratio (LossTrend::ratio; negative: not measured). True once, when it was
  // past the threshold in `windowsToConfirm` consecutive windows: every unit goes dense.
  bool observeLoss(double lossRatio);
  const GuardOptions& options() const { return options_; }
  // For checkpoints: the windows counted so far, and back (DataError for another layout).
  void saveState(StateWriter& out) const;
  void loadState(StateReader& in);

 private:
  GuardOptions options_;
  std::vector<int64_t> overWindows_;  // by unit: consecutive windows past a threshold
  std::vector<uint8_t> tripped_;      // by unit: returned once (dense for good)
  int64_t lossOverWindows_ = 0;       // consecutive windows of a loss past the threshold
  bool lossTripped_ = false;
};

// sqrt(sum x^2), accumulated in float lanes per block and in double across blocks (vectorised;
// a signal, not a reduction that must match bits anywhere).
double l2Norm(std::span<const float> values);
// sum a[i] b[i], the same way. REQUIRES: equal sizes.
double dotProduct(std::span<const float> a, std::span<const float> b);

// What the guard knows of a unit, for its decisions and its log line.
struct GuardedUnit {
  bool compressed = false;   // the plan compresses it
  std::vector<int> tensors;  // registration indices (p3's slices of one tensor go dense together)
  std::vector<std::string> names;  // the tensors' names
  std::string method;              // "randomk:0.01"
  // What the sent and residual norms are divided by besides the gradient's: 1, or 1 / (1 - μ)
  // for a unit that accumulates a momentum μ: a method that applies the optimizer's momentum
  // itself (DGC sends accumulated velocity, about 1 / (1 - momentum) gradients' worth per element
  // even when it works as it should), or error feedback with ef_decay=μ (DeMo's momentum, whose
  // residual is that momentum).
  double momentumScale = 1;
  // Whether its alignment is watched: not for such a unit, whose accumulated velocity is
  // rightly far from the step's noisy gradient (DGC measured cos 0.0 +- 0.1, as randomk:0.01).
  bool watchAlignment = true;
  // The optimizer rule: its method fails under the run's Adam-family optimizer
  // (registry.h, failsUnderAdam), so the guard keeps it dense from the end of the warm-up on.
  bool failsUnderOptimizer = false;
};

class CompressionGuard {
 public:
  // Compressed units start being watched at `warmupSteps` (the plan's dense warm-up). A unit
  // that fails under the optimizer is dense from then on at once: its event is in events().
  CompressionGuard(GuardOptions options, int64_t warmupSteps, std::vector<GuardedUnit> units);

  // --- the executor's communication threads (thread-safe) ---
  // Whether `unit` exchanges densely in `step` because the guard decided so.
  bool dense(size_t unit, uint64_t step) const;
  // Whether the compressed exchanges of `step` are measured (the first step of each window).
  bool samples(uint64_t step) const;
  // The norms of one measured exchange; `residualNorm` < 0: the compressor keeps no residual.
  // `sentDotGradient`: the dot product of the sent values with the gradient.
  void record(size_t unit, uint64_t step, double gradNorm, double sentNorm, double residualNorm,
              double sentDotGradient);
  // The norm of `compressor`'s error-feedback residual, or -1 if it keeps none it exposes.
  static double residualNorm(const Compressor& compressor);

  // --- the training thread ---
  // This rank's training loss of global step `step` (optional: without it the loss signal is
  // not measured). Each step once, before its backward ends.
  void observeLoss(uint64_t step, double loss) { lossTrend_.observe(step, loss); }
  // After the backward of step `stepsEnded - 1` ended: whether a window closes there, and the
  // step it measured (which must be complete on this rank before check()).
  bool checksAt(uint64_t stepsEnded) const;
  uint64_t sampledStep(uint64_t stepsEnded) const;
  // Collective (every rank at the same stepsEnded): gathers the ratios, decides, and makes the
  // tripped units dense from step `stepsEnded` on. Returns the new events (the same on every
  // rank). Blocking: one allgatherv on `tag`; throws the transport's errors.
  std::vector<GuardEvent> check(Transport& transport, uint64_t tag, uint64_t stepsEnded);
  // Pushes to parameter servers: the same decision from this rank's own signals and losses only
  // (no collective), for this rank's pushes from step `stepsEnded` on; the events name `rank`.
  // No agreement is needed: the server decodes each push by its own flags (encoded or dense).
  std::vector<GuardEvent> checkAlone(int rank, uint64_t stepsEnded);
  std::vector<GuardEvent> events() const;
  // One line for the log about the units the optimizer rule made dense at the start (their
  // count, methods and why), or "" when there are none.
  std::string startNotice() const;
  // For checkpoints, between steps: which units are dense from which step, the windows counted
  // and the last measurements, so that a resumed run decides as the uninterrupted one would.
  // The events (the log) are not kept. loadState throws DataError for another layout.
  void saveState(StateWriter& out) const;
  void loadState(StateReader& in);

 private:
  struct Window {
    std::vector<GuardSignals> signals;  // by unit, the worst over the ranks
    double lossRatio = -1;              // LossTrend::ratio over the ranks
  };
  std::vector<GuardSignals> localSignals(uint64_t sampled) const;
  Window gather(Transport& transport, uint64_t tag, uint64_t sampled);
  // `rank`: the rank that decided alone, or -1 (every rank alike).
  std::vector<GuardEvent> decide(const Window& window, uint64_t stepsEnded, int rank);
  GuardEvent eventFor(const GuardTrip& trip, uint64_t from, int rank) const;

  const int64_t warmup_;
  GuardDetector detector_;  // training thread only
  LossTrend lossTrend_;     // training thread only
  const std::vector<GuardedUnit> units_;
  std::unique_ptr<std::atomic<uint64_t>[]> denseFrom_;  // by unit; UINT64_MAX: compressed
  mutable std::mutex mutex_;                            // guards the records and the events
  struct Record {
    uint64_t step = UINT64_MAX;  // the step measured
    GuardSignals signals;
  };
  std::vector<Record> records_;  // by unit
  std::vector<GuardEvent> events_;
};

}  // namespace gradsync
