// The outer step of localsgd and diloco (sync/strategy.h, OuterOptions): after every H local
// steps the workers' pseudo-gradients Δ = θ_global − θ_local are averaged and an outer SGD step
// (DiLoCo: Nesterov, lr 0.7, momentum 0.9) moves the kept global parameters, which every worker
// then adopts. localsgd is the case lr 1 without momentum, where θ_global − mean(Δ) is the
// workers' average: computed as that average (exact in real arithmetic, one pass fewer, and no
// global copy kept), so that localsgd:H and diloco:H,outer_lr=1,outer_momentum=0 give the same
// bits. With quantize=int8 the pseudo-gradients travel the int8 ring (allreduceInt8, every rank
// the same bits), always as pseudo-gradients: quantizing whole models would lose far more.
//
// Not thread-safe; the training thread calls it. step() is collective over the transport.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

#include "gradsync/transport.h"
#include "sync/strategy.h"

namespace gradsync {

class OuterOptimizer {
 public:
  explicit OuterOptimizer(OuterOptions options) : options_(options) {}

  // Before the first local step (the parameters are still the round's start, the same on every
  // rank): keeps θ_global = `parameters`. A restored state (loadState) keeps its own.
  void begin(const std::vector<torch::Tensor>& parameters);
  // Whether begin() has nothing left to do (it was called, a state was loaded, or localsgd's
  // average needs no global copy).
  bool started() const { return options_.averagesModels() || !global_.empty(); }
  // Collective: the outer step; every rank's `parameters` become the new θ_global, the same bits
  // on every rank. Returns the bytes this rank sent.
  uint64_t step(std::vector<torch::Tensor>& parameters, Transport& transport);

  // θ_global and the outer momentum, for checkpoints (nothing for localsgd's average), and back
  // (shaped as `parameters`; DataError naming the mismatch).
  std::vector<uint8_t> saveState() const;
  void loadState(std::span<const uint8_t> bytes, const std::vector<torch::Tensor>& parameters);

 private:
  OuterOptions options_;
  std::vector<torch::Tensor> global_;    // θ_global, one per parameter (not for an average)
  std::vector<torch::Tensor> momentum_;  // the outer momentum buffers (with momentum > 0)
};

}  // namespace gradsync
