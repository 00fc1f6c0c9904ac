// A named tensor's shape: what the gradient engine, the schedule and the compressors know of
// a model's parameters (no torch types below src/torch/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

struct TensorShape {
  std::string name;           // as in PyTorch, e.g. "features.0.weight"
  std::vector<int64_t> dims;  // e.g. {64, 3, 3, 3}; {} is treated as {elements}
  size_t elements = 0;        // the product of dims
};

inline TensorShape tensorShape(std::string name, std::vector<int64_t> dims) {
  size_t elements = 1;
  for (int64_t d : dims) elements *= static_cast<size_t>(d);
  return {std::move(name), std::move(dims), elements};
}

}  // namespace gradsync
