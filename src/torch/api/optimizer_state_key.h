// The key torch's optimizers file a parameter's state under in Optimizer::state(): its
// TensorImpl's address as text, which Tensor::set_data keeps. Torch headers: src/torch/ only.
#pragma once

#include <torch/torch.h>

#include <string>

namespace gradsync {

inline std::string optimizerStateKey(const torch::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}

}  // namespace gradsync
