// The sampled selection's one pass by magnitude (select.h, MagnitudeKeys::gatherAtLeast) as an
// AVX-512 kernel: the keys of 16 elements computed in one vector, compared with the lowest key
// kept, and the indices and keys of those at or above it compressed into place in index order. The
// keys are the ones MagnitudeKeys::fill computes (the bits without the sign), so every path selects
// the same elements; tests force each path and compare
// (SimdPaths.TopKSelectionsAndMagnitudeStatsEqual Scalar). MSTopK's one pass gathers with it too
// (threshold_select.h).
//
// Call only when simd::active() is kAvx512. `count` is a multiple of kLanes; `indices` and
// `keys` get up to `count` slots written, the first n (returned) meaningful; element j's index
// is `base + j`, below 2^32. Thread-safe (no state).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradsync::gather {

constexpr size_t kLanes = 16;

size_t magnitudesAvx512(const float* x, size_t count, size_t base, uint32_t lowest,
                        uint32_t* indices, uint32_t* keys);

}  // namespace gradsync::gather
