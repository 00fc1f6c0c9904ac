// p3 with a sparsifier (topk, mstopk) selects k per tensor, not per slice: cutting a tensor into
// slices must not change which of its elements are sent, only when. Once per step, before the
// first of a tensor's slices is exchanged, the exact top-k of the whole tensor (k = its density's
// share of the tensor) is taken over what the slices' compressors will see (the gradient plus
// each slice's error-feedback residual), counted per slice, and each slice's compressor is told
// to select that many (SparseBudget). A slice's own top-k of that count is then exactly the
// tensor's top-k within the slice (ties to the lower index in both), so the elements sent are
// those of an unsliced top-k. mstopk's approximate selection takes the same counts.
// Used by RingExecutor on the engine's communication thread only (not thread-safe).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/compressor.h"
#include "compress/select.h"
#include "schedule/schedule.h"

namespace gradsync {

class SliceBudgets {
 public:
  // `compressors` by unit (null: dense); kept by reference, with `layout` and `tensors`.
  SliceBudgets(const std::vector<TensorShape>& tensors, const GradientLayout& layout,
               const std::vector<std::unique_ptr<Compressor>>& compressors);

  // Before `unit` is exchanged compressed in `step`: allots its tensor's k among the tensor's
  // slices, once per step, from `gradients` (the slots, flat by layout: every slice of the
  // tensor still holds this step's gradient then). No-op for a unit that is not a slice of a
  // sparsified tensor.
  void allot(size_t unit, uint64_t step, std::span<const float> gradients);

 private:
  const std::vector<TensorShape>& tensors_;
  const GradientLayout& layout_;
  const std::vector<std::unique_ptr<Compressor>>& compressors_;
  std::vector<bool> budgeted_;      // by tensor: sliced, and its slices have budgets
  std::vector<uint64_t> allotted_;  // by tensor: 1 + the last step allotted (0: never)
  std::vector<float> corrected_;    // the tensor as its slices' compressors see it
  std::vector<uint32_t> selected_;  // its top-k, ascending
  TopKSelector selector_;
};

}  // namespace gradsync
