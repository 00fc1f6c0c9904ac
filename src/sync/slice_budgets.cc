#include "sync/slice_budgets.h"

#include <algorithm>

#include "common/check.h"
#include "compress/error_feedback.h"

namespace gradsync {

SliceBudgets::SliceBudgets(const std::vector<TensorShape>& tensors, const GradientLayout& layout,
                           const std::vector<std::unique_ptr<Compressor>>& compressors)
    : tensors_(tensors),
      layout_(layout),
      compressors_(compressors),
      budgeted_(tensors.size(), false),
      allotted_(tensors.size(), 0) {
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (layout.unitCount[t] < 2) continue;  // whole: its own k is the tensor's
    const Compressor* first = compressors[layout.unitOf[t]].get();
    budgeted_[t] = first != nullptr && compressors[layout.unitOf[t]]->sparseBudget() != nullptr;
  }
}

void SliceBudgets::allot(size_t unit, uint64_t step, std::span<const float> gradients) {
  const int t = layout_.units[unit].tensors.front();
  if (!budgeted_[t] || allotted_[t] == step + 1) return;
  allotted_[t] = step + 1;
  const size_t begin = layout_.offsetOf[t];
  const size_t elements = tensors_[t].elements;
  corrected_.assign(gradients.begin() + static_cast<std::ptrdiff_t>(begin),
                    gradients.begin() + static_cast<std::ptrdiff_t>(begin + elements));
  const int first = layout_.unitOf[t];
  const int last = first + layout_.unitCount[t];
  for (int u = first; u < last; ++u) {  // what error feedback will add to each slice
    auto* feedback = dynamic_cast<const ErrorFeedback*>(compressors_[u].get());
    if (feedback == nullptr) continue;
    std::span<const float> residual = feedback->residual();
    float* slice = corrected_.data() + (layout_.units[u].offset - begin);
    for (size_t i = 0; i < residual.size(); ++i) slice[i] += residual[i];
  }
  SparseBudget* budget = compressors_[first]->sparseBudget();
  selector_.selectByMagnitude(corrected_, selectionCount(elements, budget->density()), selected_);
  auto from = selected_.begin();
  for (int u = first; u < last; ++u) {  // selected_ ascends, and so do the slices
    const auto end =
        static_cast<uint32_t>(layout_.units[u].offset + layout_.units[u].elements - begin);
    auto to = std::lower_bound(from, selected_.end(), end);
    compressors_[u]->sparseBudget()->setBudget(static_cast<size_t>(to - from));
    from = to;
  }
}

}  // namespace gradsync
