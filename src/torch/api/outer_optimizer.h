// The outer step of localsgd and diloco (sync/strategy.h, OuterOptions): every H local steps the
// workers' pseudo-gradients Δ = θ_global − θ_local are averaged and an outer SGD step (DiLoCo:
// Nesterov, lr 0.7, momentum 0.9) moves the kept global parameters, which every worker then
// adopts. localsgd is the case lr 1 without momentum, where θ_global − mean(Δ) is the workers'
// average: computed as that average (exact in real arithmetic, one pass fewer, and no global
// copy kept), so that localsgd:H and diloco:H,outer_lr=1,outer_momentum=0 give the same bits.
// With quantize=int8 the pseudo-gradients travel the int8 ring (allreduceInt8, every rank the
// same bits), always as pseudo-gradients: quantizing whole models would lose far more.
// A sync sends the dense pseudo-gradients (localsgd: the models) of every tensor it covers in
// one all-reduce, so its per-message costs are paid once, not once per tensor.
//
// Streaming DiLoCo (Douillard et al. 2025): with fragments=P the parameter tensors form P
// fragments of nearly equal size (sync/fragments.h: largest tensor first), and fragment
// p is synced at local steps
// (p + 1)·H/P + k·H, so that one fragment syncs every H/P steps and the peak bytes of a sync fall
// to about 1/P. With delay=τ (< H/P) a fragment's all-reduce runs on a thread of its own while
// τ more local steps go on; its outer update is merged τ steps later, the local fragment becoming
// α·θ_local + (1 − α)·θ_global (alpha=α; 0 adopts the global fragment). P = 1, τ = 0 is plain
// DiLoCo, bit for bit. eager=on (PCCL's async DiLoCo, the overlap Kale et al. 2025 build on):
// τ = H/P, the all-reduce overlapping the fragment's whole turn, merged just before the next
// launch; the merge rebases the steps trained meanwhile on the new θ_global instead of mixing:
// the local fragment becomes θ_global + (θ_local − θ_local at the launch), so the next
// pseudo-gradient is exactly those steps' progress.
//
// Compressed pseudo-gradients (`--compress` with diloco): every tensor of at least minElements
// exchanges its pseudo-gradient through a compressor of its own (error feedback as the method
// has it: top-k with error feedback is SparseLoCo's scheme), averaged over the ranks as the
// method aggregates; every rank decodes the same encodings in the same order, so every rank
// holds the same bits.
//
// Not thread-safe; the training thread calls it. afterLocalStep() and step() are collective over
// the transport (every rank calls them at the same local steps).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <span>
#include <thread>
#include <vector>

#include "compress/compressor.h"
#include "compress/spec.h"
#include "gradsync/transport.h"
#include "sync/strategy.h"

namespace gradsync {

// How pseudo-gradients are compressed: the spec ("none": dense), tensors below minElements dense,
// the run's seed for the methods that draw random numbers.
struct PseudoGradientCompression {
  CompressSpec spec;
  size_t minElements = 0;
  uint64_t seed = 0;
};

class OuterOptimizer {
 public:
  // `period`: H, the local steps between two outer steps of a fragment.
  OuterOptimizer(OuterOptions options, int period, PseudoGradientCompression compression = {});
  ~OuterOptimizer();  // waits for a fragment's all-reduce in flight (its result is dropped)
  OuterOptimizer(const OuterOptimizer&) = delete;
  OuterOptimizer& operator=(const OuterOptimizer&) = delete;

  // Before the first local step (the parameters are still the round's start, the same on every
  // rank): keeps θ_global = `parameters`. A restored state (loadState) keeps its own. ConfigError
  // when there are fewer tensors than fragments.
  void begin(const std::vector<torch::Tensor>& parameters);
  // Whether begin() has nothing left to do (it was called, a state was loaded, or localsgd's
  // average needs no global copy).
  bool started() const { return averages() || !global_.empty(); }
  // Whether the outer state settles after local step `step` (outerStateSettlesAfter).
  bool settlesAfter(int64_t step) const;
  // Streaming DiLoCo: the state settles at each fragment's merge, not only at a whole outer step.
  bool streams() const { return options_.streams(); }
  // After local step `step` (1, 2, ...): the outer work due then (see above). Returns the bytes
  // this rank's merged syncs sent.
  uint64_t afterLocalStep(int64_t step, std::vector<torch::Tensor>& parameters,
                          Transport& transport);
  // Collective: the whole outer step now (a fragment in flight is merged first): every rank's
  // `parameters` become the new θ_global, the same bits on every rank. Returns the bytes sent.
  uint64_t step(std::vector<torch::Tensor>& parameters, Transport& transport);

  // θ_global, the outer momentum and a fragment in flight (its averaged pseudo-gradients: the
  // all-reduce is finished first), for checkpoints, and back (shaped as `parameters`; DataError
  // naming the mismatch).
  std::vector<uint8_t> saveState();
  // The parameters every rank restarts from alike (DistributedOptimizer::settledSyncState):
  // θ_global where it is kept (with Streaming DiLoCo each fragment's as of its last merged outer
  // update), else `parameters` (localsgd's average, or before begin()). ConfigError with a
  // fragment's all-reduce in flight.
  const std::vector<torch::Tensor>& settledParameters(
      const std::vector<torch::Tensor>& parameters) const;
  void loadState(std::span<const uint8_t> bytes, const std::vector<torch::Tensor>& parameters);
  // Another rank's saveState() taken at an outer step, for a rank of another membership:
  // θ_global and the outer momentum; the compressors start afresh. ConfigError when the state
  // is not at an outer step (a fragment in flight, or `parameters` are not θ_global).
  void adoptState(std::span<const uint8_t> bytes, const std::vector<torch::Tensor>& parameters);

 private:
  // Pseudo-gradients θ_global − θ_local by tensor; the dense ones (no compressor) are views of
  // one buffer, `dense`, so that they travel one all-reduce: a collective's per-message cost is
  // paid once per sync, not once per tensor (on a 50 ms link a ring over 112 ranks pays 11 s of
  // latency per all-reduce; docs/simulator.md, "Outer rounds").
  struct PseudoGradients {
    std::vector<torch::Tensor> byTensor;
    torch::Tensor dense;  // undefined after a restore (the all-reduce was done)
  };
  // A fragment's averaged pseudo-gradients, on their way (thread running) or arrived.
  struct InFlight {
    int fragment = -1;  // -1: none
    int64_t mergeAt = 0;
    PseudoGradients deltas;                   // by tensor of the fragment
    std::vector<torch::Tensor> launchedFrom;  // eager: the local tensors at the launch
    std::thread thread;
    std::exception_ptr error;
    uint64_t bytes = 0;
  };

  void restoreState(std::span<const uint8_t> bytes, const std::vector<torch::Tensor>& parameters,
                    bool adopt);
  bool averages() const;  // localsgd's plain average of the models
  void assignFragments(const std::vector<torch::Tensor>& parameters);
  std::vector<size_t> tensorsOf(int fragment) const;  // in model order
  // Every tensor at once, without overlap; `adopt`: every local tensor becomes θ_global.
  uint64_t syncAll(std::vector<torch::Tensor>& parameters, Transport& transport, bool adopt);
  // The pseudo-gradients of `tensors` (indices, in model order) from the parameters now, laid
  // out for an all-reduce among `ranks`.
  PseudoGradients pseudoGradients(const std::vector<size_t>& tensors,
                                  const std::vector<torch::Tensor>& parameters, int ranks) const;
  // Their average over the ranks, in place: each compressed tensor through its compressor (as
  // the method aggregates), then the dense buffer in one all-reduce (int8 with quantize=int8).
  void reduce(const std::vector<size_t>& tensors, PseudoGradients& deltas, Transport& transport);
  void makeCompressors(const std::vector<torch::Tensor>& parameters);
  // θ_global's tensor i moves by the outer rule on the averaged `delta`; the local tensor
  // follows: adopts it (`adopt`, or alpha 0), mixes with it (alpha), or, given `launchedFrom`
  // (eager), keeps its progress since then on top of it.
  void applyOuter(size_t i, const torch::Tensor& delta, torch::Tensor& parameter, bool adopt,
                  const torch::Tensor* launchedFrom = nullptr);
  // Streaming: a fragment's pseudo-gradients all-reduced (on a thread with a delay), then merged.
  void launch(int fragment, int64_t step, const std::vector<torch::Tensor>& parameters,
              Transport& transport);
  uint64_t merge(std::vector<torch::Tensor>& parameters);
  void finishAllreduce();  // joins the thread; rethrows its failure

  const OuterOptions options_;
  const int period_;
  std::vector<torch::Tensor> global_;    // θ_global, one per parameter (not for an average)
  std::vector<torch::Tensor> momentum_;  // the outer momentum buffers (with momentum > 0)
  std::vector<int> fragmentOf_;          // by tensor (streaming)
  const PseudoGradientCompression compression_;
  std::vector<std::unique_ptr<Compressor>> compressors_;  // by tensor; null: dense
  uint64_t exchanges_ = 0;  // pseudo-gradient exchanges so far (the compressors' step)
  InFlight inFlight_;
};

}  // namespace gradsync
