// A model's tensors and its optimizer's state as plain tensors and raw bytes, for the copies an
// elastic job makes of them many times: the in-memory commit after every step (snapshot.h) and
// the state a round's rank 0 gives to every other member (state.h). A torch archive costs a zip
// writer, CRCs and two string copies each way (the transfer of the language model's 51.7 MB spent
// two thirds of its time there); these are one memcpy per tensor.
//
// The optimizer's state is plain where its kind is known: SGD (and its subclasses, FusedSGD),
// Adam and AdamW; any other optimizer (sign descent, RMSprop...) goes through its archive. Both
// sides must hold the same model and the same kind of optimizer over the same parameters (an
// elastic round's members do); a mismatch of sizes throws DataError. Torch headers: src/torch/
// only. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "common/state_bytes.h"

namespace gradsync {

// The parameters, then the buffers (views, not copies).
std::vector<torch::Tensor> modelTensors(torch::nn::Module& model);
// Whether each of them is contiguous (so readTrainingState can scatter into them).
bool modelIsContiguous(torch::nn::Module& model);

// An SGD's, Adam's or AdamW's state by parameter, in param_groups order: per parameter its
// state's tensors (empty where it has none yet): SGD {momentum_buffer}; Adam and AdamW
// {exp_avg, exp_avg_sq, max_exp_avg_sq} (the last undefined without amsgrad), and their step
// counts (0 for SGD).
struct PlainOptimizerState {
  std::vector<std::vector<torch::Tensor>> tensors;
  std::vector<int64_t> steps;
};

// Whether `optimizer`'s state has that form.
bool hasPlainState(const torch::optim::Optimizer& optimizer);
// Its state, as views of the optimizer's own tensors. hasPlainState() must hold.
PlainOptimizerState plainStateOf(torch::optim::Optimizer& optimizer);
// The optimizer's state becomes `state` (its tensors are taken as they are: pass copies).
void setPlainState(torch::optim::Optimizer& optimizer, const PlainOptimizerState& state);

// Gives an Adam or AdamW every state its first step would create (zero moments, step 0) where a
// parameter has none yet; any other optimizer is left as it is. For a worker that will receive a
// job's state (a joiner, while it waits for its round to form): readTrainingState writes into
// these tensors in place, whose pages are then already faulted in (103 MB of the language
// model's moments took most of a joiner's receive when they were fresh).
void prepareOptimizerState(torch::optim::Optimizer& optimizer);

// Appends the model's tensors' bytes, each group's learning rate and the optimizer's state
// (plain, or its archive) to `out`; the tensors' bytes as bulk arrays (StateWriter::writeBulk),
// which a gatherer lists where they lie. Returns the contiguous copies made of tensors that were
// not contiguous, which a gatherer's segments point into: keep them until those are sent.
[[nodiscard]] std::vector<torch::Tensor> writeTrainingState(StateWriter& out,
                                                            torch::nn::Module& model,
                                                            torch::optim::Optimizer& optimizer);
// Reads what writeTrainingState wrote into `model` (in place: the engine updates parameters
// through their storage) and `optimizer`. DataError for bytes of another model or optimizer.
// The optimizer's state tensors of the expected shape are written in place, the others allocated.
// From a scatterer (StateReader::scatterer), every tensor's place is listed, its bytes still to
// be received there; every tensor of the model must then be contiguous (DataError otherwise:
// check modelIsContiguous first).
void readTrainingState(StateReader& in, torch::nn::Module& model,
                       torch::optim::Optimizer& optimizer);

}  // namespace gradsync
