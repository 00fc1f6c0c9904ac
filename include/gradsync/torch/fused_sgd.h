// The parallel tensor operator of Shi et al. (MLSys'21): after aggregation, one update pass over
// all parameters of a group instead of one chain of small kernels per tensor. On a model of many
// small tensors (resnet20: 65 tensors, 0.27 M parameters) the per-tensor optimizer spends its
// time in per-call overhead, not in arithmetic.
//
// FusedSGD is a torch::optim::SGD (same options, same state layout, same save/load), so code
// that accepts an SGD accepts it; `gradsync train` steps through it
// (src/torch/loop/training_optimizer.h). Its constructor moves each group's parameters into one
// flat buffer (each parameter becomes a view of it, the same tensor for its module: its data
// pointer changes, its values do not; so construct it before anything keeps pointers to parameter
// data) and keeps the momentum buffers as views of a second flat buffer; every step then copies the
// gradients into a third flat buffer (one call) and updates with a few calls over the whole group:
//   SGD with momentum: m = μ·m + g (m = g on the first step); p −= lr·m   (bitwise torch's SGD)
//   LARS (`lars` > 0, You et al. 2017): g ← g · lars·‖p_t‖/‖g_t‖ per tensor t (1 where either
//   norm is 0), then as above; one pass per tensor over the flat buffers (tensors in parallel)
//   computes both norms in double and scales.
// A step where the fused path does not apply is torch's per-tensor SGD step, with LARS applied
// per tensor first, so results do not depend on which path ran (bitwise for SGD; for LARS up to
// the float rounding of the norms): a group with weight decay, dampening or Nesterov, a
// parameter without a gradient this step, or a group whose parameters differ in some state from
// the others (some with momentum buffers, some without). State that
// was replaced from outside (load, broadcastOptimizerState), or a parameter given new storage
// (torch::load into the module), is copied into the flat buffers at the next step. Parameters or
// gradients that are not CPU float32 also take the per-tensor path. The per-tensor path applies
// LARS by scaling the gradients in place; the fused path leaves them as they were.
// Not thread-safe: one caller steps it, as any torch optimizer.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace gradsync {

struct FusedSgdOptions {
  double lars = 0;    // LARS trust coefficient η; 0: plain SGD
  bool fused = true;  // false: the per-tensor path always (the baseline the benchmark measures)
};

class FusedSGD : public torch::optim::SGD {
 public:
  FusedSGD(std::vector<torch::optim::OptimizerParamGroup> groups, torch::optim::SGDOptions defaults,
           FusedSgdOptions options = {});
  FusedSGD(std::vector<torch::Tensor> parameters, torch::optim::SGDOptions defaults,
           FusedSgdOptions options = {});

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Steps (since construction) that took the fused path, for tests and the benchmark.
  int64_t fusedSteps() const { return fusedSteps_; }

 private:
  struct FlatGroup {
    torch::Tensor params, momentum, grads;  // flat float32, one segment per parameter
    std::vector<int64_t> offsets;           // each parameter's first element in the buffers
  };

  bool stepGroupFused(torch::optim::OptimizerParamGroup& group, FlatGroup& flat);
  void ensureFlat(torch::optim::OptimizerParamGroup& group, FlatGroup& flat);
  void applyLarsPerTensor(torch::optim::OptimizerParamGroup& group);
  void scaleByLars(FlatGroup& flat) const;

  FusedSgdOptions options_;
  std::vector<FlatGroup> flat_;
  int64_t fusedSteps_ = 0;
};

}  // namespace gradsync
