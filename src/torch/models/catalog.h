// The models of `gradsync train --model` seen without torch: their parameters' shapes and their
// output's, for the CLI and the simulator's profiles. Torch-free header (models.h is the torch
// side); implemented in models.cc.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor_shape.h"

namespace gradsync {

// The parameters of a model (registration order): names as in PyTorch, element counts.
// Throws ConfigError listing the valid names.
std::vector<TensorShape> describeModel(const std::string& model);
// The output of the model for a batch of `batch` zero images has this shape (checks the
// forward pass end to end).
std::vector<int64_t> modelOutputShape(const std::string& model, int64_t batch);

}  // namespace gradsync
