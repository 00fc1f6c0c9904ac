#include "sync/fragments.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "gradsync/error.h"

namespace gradsync {

// Largest first to the lightest fragment: the fragments' sizes end close to 1/P of the model, so
// a sync's peak bytes are about 1/P, and each layer's large matrices land in different fragments
// (the paper strides layers; in model order, i mod P put every weight in one fragment and every
// bias in another where they alternate, and a greedy pass in model order left gpt's largest
// fragment at 1/4.1 for P = 5, against 1/4.8 this way).
void checkFragmentsFit(int fragments, size_t tensors) {
  if (tensors >= static_cast<size_t>(fragments)) return;
  throw ConfigError(fmt::format("diloco's fragments={}: the model has only {} parameter tensors",
                                fragments, tensors),
                    {.hint = "choose at most as many fragments as tensors"});
}

std::vector<int> assignFragments(std::span<const int64_t> elements, int fragments) {
  std::vector<size_t> bySize(elements.size());
  std::iota(bySize.begin(), bySize.end(), size_t{0});
  std::stable_sort(bySize.begin(), bySize.end(),
                   [&](size_t a, size_t b) { return elements[a] > elements[b]; });
  std::vector<int64_t> load(static_cast<size_t>(std::max(fragments, 1)), 0);
  std::vector<int> fragmentOf(elements.size(), 0);
  for (size_t i : bySize) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    fragmentOf[i] = static_cast<int>(lightest);
    load[static_cast<size_t>(lightest)] += elements[i];
  }
  return fragmentOf;
}

int fragmentSyncedAfter(int64_t step, int period, int fragments) {
  const int stride = period / fragments;
  if (stride <= 0 || step <= 0 || step % stride != 0) return -1;
  return static_cast<int>((step / stride - 1) % fragments);
}

bool outerStateSettlesAfter(int64_t step, int period, int fragments, int delay, bool eager) {
  return !eager && step > delay && fragmentSyncedAfter(step - delay, period, fragments) >= 0;
}

FusedLayout fusedLayout(std::span<const int64_t> elements, int64_t align, int ranks) {
  const auto rounded = [](int64_t n, int64_t to) { return (n + to - 1) / to * to; };
  FusedLayout layout;
  for (int64_t n : elements) {
    layout.offsets.push_back(layout.elements);
    layout.elements = rounded(layout.elements + n, align);
  }
  if (align > 1) layout.elements = rounded(layout.elements, align * std::max(ranks, 1));
  return layout;
}

}  // namespace gradsync
