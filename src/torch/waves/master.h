// The one set of weights and optimizer state that Wavelet's waves of a worker train
// (docs/algorithms.md "Wavelet"). Each wave computes on a replica of its own (a backward needs
// the weights its forward saw, while the other wave's update may already have changed the
// master) and hands its averaged gradients here:
//  - kShared (option 1 of the reference): each wave's averaged gradient is applied when its
//    allreduce is done, in the waves' order (tick 0, tock 0, tick 1, ...: momentum makes the order
//    matter, and every worker must apply the same updates); right after its own update a wave's
//    replica takes the master's weights for its next forward, which therefore sees every update
//    up to its own and none of the other waves' since: exactly K - 1 (one for tick-tock)
//    updates stale, whatever the timing, so a run repeats bitwise.
//  - kAccumulate (option 2): the waves' gradients of a round (tick, tock, ...) are averaged and
//    make one update; every wave's forward of round r sees exactly the updates of rounds < r:
//    SSGD at batch waves x B, the overlap shrinking to tick's backward beside tock's forward.
// Thread-safe: every wave's thread calls load and apply; the master's weights change only under
// the lock. Waits end with TimeoutError after `timeout`, or with abort()'s error.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "gradsync/torch/fused_sgd.h"
#include "torch/models/models.h"

namespace gradsync {

enum class WaveConsistency { kShared, kAccumulate };
// "shared" | "accumulate"; ConfigError otherwise.
WaveConsistency parseWaveConsistency(const std::string& name);

class WaveMaster {
 public:
  // `replicas`: every wave's model (same architecture as `net`), indexed by wave; kept by
  // reference (they must outlive this); each starts with `net`'s parameters.
  WaveMaster(std::shared_ptr<Model> net, std::unique_ptr<FusedSGD> optimizer,
             std::vector<Model*> replicas, WaveConsistency consistency,
             std::chrono::milliseconds timeout, int rank);

  // Before wave `wave`'s forward of round `round`: kAccumulate copies the master's parameters
  // into its replica once the updates of every earlier round are made; kShared has nothing to
  // do (apply and the constructor load the replica).
  void load(int wave, int64_t round);
  // Copies the master's parameters as they are now into `wave`'s replica (for evaluation).
  void loadLatest(int wave);
  // After the wave's averaged gradients are in its replica's .grad: kShared steps the master
  // with them; kAccumulate steps once every wave of the round has handed in (their mean, summed
  // in wave order, so the result does not depend on which wave finished first).
  void apply(int wave, int64_t round);
  // Wakes every waiter, which throws `error`.
  void abort(std::exception_ptr error);

  Model& net() { return *net_; }
  FusedSGD& optimizer() { return *optimizer_; }
  double optimizerSeconds() const;  // spent stepping the master so far

 private:
  int waves() const { return static_cast<int>(replicas_.size()); }
  // Waits (the lock held by `lock`) until `updates` updates are applied.
  void waitUntil(std::unique_lock<std::mutex>& lock, int wave, int64_t updates);
  void copyGradients(const std::vector<int>& waves);
  void copyMasterTo(int wave);  // the master's parameters into the wave's replica
  void step();

  std::shared_ptr<Model> net_;
  std::unique_ptr<FusedSGD> optimizer_;
  std::vector<Model*> replicas_;
  const WaveConsistency consistency_;
  const std::chrono::milliseconds timeout_;
  const int rank_;
  mutable std::mutex mutex_;
  std::condition_variable updated_;
  int64_t applied_ = 0;       // updates made (kAccumulate: one per round)
  int handedIn_ = 0;          // kAccumulate: waves of round applied_ that handed in
  std::exception_ptr error_;  // abort()'s
  double optimizerSeconds_ = 0;
};

}  // namespace gradsync
