#include "gradsync/torch/fused_sgd.h"

#include <cmath>
#include <string>
#include <utility>

#include "torch/api/optimizer_state_key.h"

namespace gradsync {
namespace {

using torch::optim::OptimizerParamGroup;
using torch::optim::SGDOptions;
using torch::optim::SGDParamState;

const SGDOptions& sgdOptions(const OptimizerParamGroup& group) {
  return static_cast<const SGDOptions&>(group.options());
}

// Whether the fused pass computes what torch's per-tensor step computes for this group.
bool fusable(const OptimizerParamGroup& group) {
  const SGDOptions& o = sgdOptions(group);
  if (o.weight_decay() != 0 || o.dampening() != 0 || o.nesterov()) return false;
  for (const torch::Tensor& p : group.params()) {
    if (!p.grad().defined() || p.scalar_type() != torch::kFloat || !p.is_cpu()) return false;
    if (p.grad().scalar_type() != torch::kFloat || !p.grad().is_cpu()) return false;
  }
  return !group.params().empty();
}

// ‖p‖ and ‖g‖ of one tensor → LARS's factor for its gradient (1 where either is 0).
double larsFactor(double lars, double parameterNorm, double gradientNorm) {
  if (parameterNorm == 0 || gradientNorm == 0) return 1;
  return lars * parameterNorm / gradientNorm;
}

}  // namespace

FusedSGD::FusedSGD(std::vector<OptimizerParamGroup> groups, SGDOptions defaults,
                   FusedSgdOptions options)
    : torch::optim::SGD(std::move(groups), defaults), options_(options) {
  TORCH_CHECK(options_.lars >= 0, "Invalid LARS coefficient: ", options_.lars);
  if (!options_.fused) return;
  // Placed now, before anyone (the gradient engine) keeps pointers to the parameters' data.
  torch::NoGradGuard noGrad;
  flat_.resize(param_groups().size());
  for (size_t i = 0; i < param_groups().size(); ++i) {
    bool placeable = true;
    for (const torch::Tensor& p : param_groups()[i].params()) {
      placeable = placeable && p.scalar_type() == torch::kFloat && p.is_cpu();
    }
    if (placeable) ensureFlat(param_groups()[i], flat_[i]);
  }
}

FusedSGD::FusedSGD(std::vector<torch::Tensor> parameters, SGDOptions defaults,
                   FusedSgdOptions options)
    : FusedSGD({OptimizerParamGroup(std::move(parameters))}, defaults, options) {}

torch::Tensor FusedSGD::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure != nullptr) {
    torch::AutoGradMode enabled(true);
    loss = closure();
  }
  torch::NoGradGuard noGrad;
  flat_.resize(param_groups().size());
  for (size_t i = 0; i < param_groups().size(); ++i) {
    OptimizerParamGroup& group = param_groups()[i];
    if (options_.fused && fusable(group) && stepGroupFused(group, flat_[i])) continue;
    // The per-tensor path: LARS on each gradient, then torch's SGD on this group alone.
    if (options_.lars > 0) applyLarsPerTensor(group);
    std::vector<OptimizerParamGroup> saved;
    std::swap(saved, param_groups());
    param_groups().push_back(saved[i]);  // shares the parameters and options
    torch::optim::SGD::step();
    std::swap(saved, param_groups());
  }
  return loss;
}

void FusedSGD::applyLarsPerTensor(OptimizerParamGroup& group) {
  for (torch::Tensor& p : group.params()) {
    if (!p.grad().defined()) continue;
    const double factor =
        larsFactor(options_.lars, p.norm().item<double>(), p.grad().norm().item<double>());
    p.mutable_grad().mul_(factor);
  }
}

void FusedSGD::scaleByLars(FlatGroup& flat) const {
  const float* p = flat.params.data_ptr<float>();
  float* g = flat.grads.data_ptr<float>();
  const auto tensors = static_cast<int64_t>(flat.offsets.size());
  const int64_t total = flat.params.numel();
  // One pass per tensor over the flat buffers: its two norms (double sums), then its scaling.
  at::parallel_for(0, tensors, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t lo = flat.offsets[t], hi = t + 1 < tensors ? flat.offsets[t + 1] : total;
      double pn = 0, gn = 0;
      for (int64_t i = lo; i < hi; ++i) {
        pn += static_cast<double>(p[i]) * p[i];
        gn += static_cast<double>(g[i]) * g[i];
      }
      const auto factor =
          static_cast<float>(larsFactor(options_.lars, std::sqrt(pn), std::sqrt(gn)));
      for (int64_t i = lo; i < hi; ++i) g[i] *= factor;
    }
  });
}

void FusedSGD::ensureFlat(OptimizerParamGroup& group, FlatGroup& flat) {
  const std::vector<torch::Tensor>& params = group.params();
  bool placed = flat.params.defined() && flat.offsets.size() == params.size();
  for (size_t j = 0; placed && j < params.size(); ++j) {
    placed = params[j].data_ptr<float>() == flat.params.data_ptr<float>() + flat.offsets[j] &&
             params[j].is_contiguous();
  }
  if (placed) return;
  int64_t total = 0;
  flat.offsets.clear();
  for (const torch::Tensor& p : params) {
    flat.offsets.push_back(total);
    total += p.numel();
  }
  flat.params = torch::empty({total}, torch::kFloat);
  for (size_t j = 0; j < params.size(); ++j) {
    torch::Tensor segment = flat.params.narrow(0, flat.offsets[j], params[j].numel());
    segment.copy_(params[j].reshape(-1));
    params[j].set_data(segment.view(params[j].sizes()));
  }
  flat.grads = torch::empty({total}, torch::kFloat);
  flat.momentum = torch::empty({total}, torch::kFloat);
}

bool FusedSGD::stepGroupFused(OptimizerParamGroup& group, FlatGroup& flat) {
  const SGDOptions& o = sgdOptions(group);
  const std::vector<torch::Tensor>& params = group.params();
  size_t withState = 0;
  for (const torch::Tensor& p : params) withState += state_.count(optimizerStateKey(p));
  const bool first = withState == 0;
  if (o.momentum() != 0 && withState != 0 && withState != params.size()) return false;

  ensureFlat(group, flat);
  std::vector<torch::Tensor> grads;
  grads.reserve(params.size());
  for (const torch::Tensor& p : params) grads.push_back(p.grad().reshape(-1));
  torch::cat_out(flat.grads, grads, 0);
  if (options_.lars > 0) scaleByLars(flat);
  if (o.momentum() == 0) {
    flat.params.add_(flat.grads, -o.lr());
    ++fusedSteps_;
    return true;
  }
  for (size_t j = 0; j < params.size(); ++j) {
    torch::Tensor view = flat.momentum.narrow(0, flat.offsets[j], params[j].numel());
    auto found = state_.find(optimizerStateKey(params[j]));
    if (found == state_.end()) {
      auto state = std::make_unique<SGDParamState>();
      state->momentum_buffer(view.view(params[j].sizes()));
      state_[optimizerStateKey(params[j])] = std::move(state);
      continue;
    }
    auto& state = static_cast<SGDParamState&>(*found->second);
    if (state.momentum_buffer().data_ptr() != view.data_ptr()) {  // replaced from outside
      view.copy_(state.momentum_buffer().reshape(-1));
      state.momentum_buffer(view.view(params[j].sizes()));
    }
  }
  if (first) {
    flat.momentum.copy_(flat.grads);
  } else {
    flat.momentum.mul_(o.momentum()).add_(flat.grads);
  }
  flat.params.add_(flat.momentum, -o.lr());
  ++fusedSteps_;
  return true;
}

}  // namespace gradsync
