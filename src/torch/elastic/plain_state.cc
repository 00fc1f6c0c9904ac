#include "torch/elastic/plain_state.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "common/allocator.h"
#include "common/check.h"
#include "gradsync/error.h"
#include "torch/api/archive_bytes.h"
#include "torch/api/optimizer_kind.h"
#include "torch/api/optimizer_state_key.h"

namespace gradsync {
namespace {

using Kind = OptimizerKind;

std::vector<torch::Tensor> parametersOf(torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> parameters;
  for (auto& group : optimizer.param_groups()) {
    parameters.insert(parameters.end(), group.params().begin(), group.params().end());
  }
  return parameters;
}

// Adam's and AdamW's state have the same fields under two unrelated types.
template <typename State>
std::vector<torch::Tensor> adamTensors(const State& s) {
  return {s.exp_avg(), s.exp_avg_sq(), s.max_exp_avg_sq()};
}

template <typename State>
std::unique_ptr<State> adamState(const std::vector<torch::Tensor>& tensors, int64_t step) {
  GS_CHECK(tensors.size() == 3);
  auto state = std::make_unique<State>();
  state->step(step);
  state->exp_avg(tensors[0]);
  state->exp_avg_sq(tensors[1]);
  state->max_exp_avg_sq(tensors[2]);
  return state;
}

// The bytes of a contiguous CPU tensor.
std::span<const uint8_t> bytesOf(const torch::Tensor& t) {
  return {static_cast<const uint8_t*>(t.data_ptr()), t.nbytes()};
}

// A tensor's bytes as a bulk array. A gatherer lists them where they are, so a tensor that is not
// contiguous goes through a contiguous copy it keeps (`keep`: until its segments are sent).
void writeBytesOf(StateWriter& out, const torch::Tensor& t, std::vector<torch::Tensor>& keep) {
  if (t.is_contiguous()) {
    out.writeBulk(bytesOf(t));
    return;
  }
  keep.push_back(t.contiguous());
  out.writeBulk(bytesOf(keep.back()));
}

void writeTensor(StateWriter& out, const torch::Tensor& t, std::vector<torch::Tensor>& keep) {
  out.write(uint64_t{t.defined() ? 1u : 0u});
  if (t.defined()) writeBytesOf(out, t, keep);
}

// Fills `into` (defined, of the expected shape) from the next array, in place.
void readInto(StateReader& in, torch::Tensor& into) {
  torch::NoGradGuard noGrad;
  if (into.is_contiguous()) {
    in.readBulk(std::span<uint8_t>(static_cast<uint8_t*>(into.data_ptr()), into.nbytes()));
    return;
  }
  // A scatterer lists places for bytes still to come: a staged copy would be taken too early.
  if (in.scattering()) {
    throw DataError(
        fmt::format("{}: a tensor of the model is not contiguous: its bytes cannot "
                    "be received in place",
                    in.what()));
  }
  torch::Tensor staged = torch::empty_like(into, torch::MemoryFormat::Contiguous);
  in.readBulk(std::span<uint8_t>(static_cast<uint8_t*>(staged.data_ptr()), staged.nbytes()));
  into.copy_(staged);
}

// A state tensor shaped as its parameter, or undefined as it was written. Into `held` (the
// optimizer's own, in place) where it is one of that shape and kind: warm memory that nothing
// needs to allocate or fault in (a joiner's prepared moments, prepareOptimizerState; a member's
// own); else into a new one.
torch::Tensor readStateTensor(StateReader& in, const torch::Tensor& parameter,
                              const torch::Tensor& held) {
  if (in.readU64() == 0) return {};
  torch::Tensor t = held;
  if (!t.defined() || !t.is_contiguous() || t.sizes() != parameter.sizes() ||
      t.dtype() != parameter.dtype() || t.device() != parameter.device()) {
    t = torch::empty_like(parameter.detach(), torch::MemoryFormat::Contiguous);
    // Huge pages before the first touch: a joiner's Adam state is two fresh model-sized tensors
    // (src/common/allocator.h: 4 KiB faults cost 0.15 s per 51.6 MB here, 2 MiB ones 5 ms).
    adviseHugePages(t.data_ptr(), t.nbytes());
  }
  readInto(in, t);
  return t;
}

void writeOptimizer(StateWriter& out, torch::optim::Optimizer& optimizer,
                    std::vector<torch::Tensor>& keep) {
  if (!hasPlainState(optimizer)) {
    out.write(archiveBytes([&](auto& archive) { optimizer.save(archive); }));
    return;
  }
  const PlainOptimizerState state = plainStateOf(optimizer);
  for (size_t i = 0; i < state.tensors.size(); ++i) {
    out.write(uint64_t{state.tensors[i].size()});
    if (state.tensors[i].empty()) continue;
    out.write(static_cast<uint64_t>(state.steps[i]));
    for (const torch::Tensor& t : state.tensors[i]) writeTensor(out, t, keep);
  }
}

void readOptimizer(StateReader& in, torch::optim::Optimizer& optimizer) {
  if (!hasPlainState(optimizer)) {
    std::vector<uint8_t> archive;
    in.read(archive);
    loadArchiveBytes(archive, in.what() + "'s optimizer state",
                     [&](auto& a) { optimizer.load(a); });
    return;
  }
  const std::vector<torch::Tensor> parameters = parametersOf(optimizer);
  const size_t slots = optimizerKind(optimizer) == Kind::kSgd ? 1 : 3;
  const PlainOptimizerState held = plainStateOf(optimizer);
  PlainOptimizerState state{.tensors = std::vector<std::vector<torch::Tensor>>(parameters.size()),
                            .steps = std::vector<int64_t>(parameters.size(), 0)};
  for (size_t i = 0; i < parameters.size(); ++i) {
    const uint64_t count = in.readU64();
    if (count == 0) continue;
    if (count != slots) {
      throw DataError(fmt::format("{}: parameter {}'s optimizer state has {} tensors, not {}",
                                  in.what(), i, count, slots));
    }
    state.steps[i] = static_cast<int64_t>(in.readU64());
    for (size_t k = 0; k < slots; ++k) {
      const std::vector<torch::Tensor>& own = held.tensors[i];
      state.tensors[i].push_back(
          readStateTensor(in, parameters[i], k < own.size() ? own[k] : torch::Tensor()));
    }
  }
  setPlainState(optimizer, state);
}

}  // namespace

std::vector<torch::Tensor> modelTensors(torch::nn::Module& model) {
  std::vector<torch::Tensor> tensors = model.parameters();
  for (const torch::Tensor& buffer : model.buffers()) tensors.push_back(buffer);
  return tensors;
}

bool modelIsContiguous(torch::nn::Module& model) {
  for (const torch::Tensor& t : modelTensors(model)) {
    if (!t.is_contiguous()) return false;
  }
  return true;
}

bool hasPlainState(const torch::optim::Optimizer& optimizer) {
  return optimizerKind(optimizer) != Kind::kOther;
}

PlainOptimizerState plainStateOf(torch::optim::Optimizer& optimizer) {
  const Kind kind = optimizerKind(optimizer);
  GS_CHECK(kind != Kind::kOther);
  PlainOptimizerState plain;
  for (const torch::Tensor& p : parametersOf(optimizer)) {
    auto found = optimizer.state().find(optimizerStateKey(p));
    std::vector<torch::Tensor> tensors;
    int64_t step = 0;
    if (found != optimizer.state().end()) {
      const torch::optim::OptimizerParamState& s = *found->second;
      if (kind == Kind::kSgd) {
        tensors = {static_cast<const torch::optim::SGDParamState&>(s).momentum_buffer()};
      } else if (kind == Kind::kAdam) {
        const auto& adam = static_cast<const torch::optim::AdamParamState&>(s);
        tensors = adamTensors(adam);
        step = adam.step();
      } else {
        const auto& adamw = static_cast<const torch::optim::AdamWParamState&>(s);
        tensors = adamTensors(adamw);
        step = adamw.step();
      }
    }
    plain.tensors.push_back(std::move(tensors));
    plain.steps.push_back(step);
  }
  return plain;
}

void setPlainState(torch::optim::Optimizer& optimizer, const PlainOptimizerState& plain) {
  const Kind kind = optimizerKind(optimizer);
  GS_CHECK(kind != Kind::kOther);
  const std::vector<torch::Tensor> parameters = parametersOf(optimizer);
  GS_CHECK(plain.tensors.size() == parameters.size() && plain.steps.size() == parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    const std::string key = optimizerStateKey(parameters[i]);
    const std::vector<torch::Tensor>& tensors = plain.tensors[i];
    if (tensors.empty()) {
      optimizer.state().erase(key);
    } else if (kind == Kind::kSgd) {
      GS_CHECK(tensors.size() == 1);
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(tensors[0]);
      optimizer.state()[key] = std::move(state);
    } else if (kind == Kind::kAdam) {
      optimizer.state()[key] = adamState<torch::optim::AdamParamState>(tensors, plain.steps[i]);
    } else {
      optimizer.state()[key] = adamState<torch::optim::AdamWParamState>(tensors, plain.steps[i]);
    }
  }
}

void prepareOptimizerState(torch::optim::Optimizer& optimizer) {
  const Kind kind = optimizerKind(optimizer);
  if (kind != Kind::kAdam && kind != Kind::kAdamW) return;
  torch::NoGradGuard noGrad;
  PlainOptimizerState state = plainStateOf(optimizer);
  size_t i = 0;  // plainStateOf's order: the param groups', parameter by parameter
  for (auto& group : optimizer.param_groups()) {
    const bool amsgrad = usesAmsgrad(group.options(), kind);
    for (const torch::Tensor& p : group.params()) {
      std::vector<torch::Tensor>& tensors = state.tensors[i++];
      if (!tensors.empty()) continue;
      // Adam's own first step makes these same zeros, at step 0 (torch::optim::Adam::step);
      // written now, their pages are faulted in before anyone waits for them.
      auto zeros = [&] { return torch::zeros_like(p.detach(), torch::MemoryFormat::Contiguous); };
      tensors = {zeros(), zeros(), amsgrad ? zeros() : torch::Tensor()};
    }
  }
  setPlainState(optimizer, state);
}

std::vector<torch::Tensor> writeTrainingState(StateWriter& out, torch::nn::Module& model,
                                              torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> keep;
  for (const torch::Tensor& t : modelTensors(model)) writeBytesOf(out, t, keep);
  std::vector<double> lrs;
  for (const auto& group : optimizer.param_groups()) lrs.push_back(group.options().get_lr());
  out.write(lrs);
  writeOptimizer(out, optimizer, keep);
  return keep;
}

void readTrainingState(StateReader& in, torch::nn::Module& model,
                       torch::optim::Optimizer& optimizer) {
  for (torch::Tensor& t : modelTensors(model)) readInto(in, t);
  std::vector<double> lrs(optimizer.param_groups().size());
  in.readExact(lrs);
  for (size_t g = 0; g < lrs.size(); ++g) optimizer.param_groups()[g].options().set_lr(lrs[g]);
  readOptimizer(in, optimizer);
}

}  // namespace gradsync
