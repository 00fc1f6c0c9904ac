// The sampled selection's one pass by magnitude (select.h, MagnitudeKeys::gatherAtLeast) as
// AVX-512 and AVX2 kernels: the keys of 16 (8) elements computed in one vector, compared with the
// lowest key kept, and the indices and keys of those at or above it compressed into place in
// index order (AVX-512's compress; a permutation from a table of the 256 masks on AVX2). The
// keys are the ones MagnitudeKeys::fill computes (the bits without the sign), so every path selects
// the same elements; tests force each path and compare
// (SimdPaths.TopKSelectionsAndMagnitudeStatsEqual Scalar). MSTopK's one pass gathers with it too
// (threshold_select.h).
//
// Call only on the path the name says (simd::active()). `count` is a multiple of kLanes; `indices`
// and `keys` get up to `count` slots written, the first n (returned) meaningful; element j's index
// is `base + j`, below 2^32. Thread-safe (no state).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradsync::gather {

constexpr size_t kLanes = 16;

size_t magnitudesAvx512(const float* x, size_t count, size_t base, uint32_t lowest,
                        uint32_t* indices, uint32_t* keys);
size_t magnitudesAvx2(const float* x, size_t count, size_t base, uint32_t lowest, uint32_t* indices,
                      uint32_t* keys);

}  // namespace gradsync::gather
