// A float32 tensor's storage as a span, for the code that hands tensors to the torch-free
// engine, collectives and state files. Not owning: valid while the tensor's storage lives.
#pragma once

#include <torch/torch.h>

#include <span>

#include "common/check.h"

namespace gradsync {

// The elements of `tensor`. REQUIRES (checked): a contiguous float32 tensor on the CPU.
inline std::span<float> floatSpan(const torch::Tensor& tensor) {
  GS_CHECK(tensor.scalar_type() == torch::kFloat && tensor.is_contiguous() &&
           tensor.device().is_cpu());
  return {tensor.data_ptr<float>(), static_cast<size_t>(tensor.numel())};
}

}  // namespace gradsync
