#include "compress/select_gather.h"

#include <bit>

#include "common/check.h"
#include "common/simd.h"

#if GS_SIMD_X86
#include <immintrin.h>
#endif

namespace gradsync::gather {

#if GS_SIMD_X86
// GCC 12 says the AVX-512 intrinsics' own placeholder operands "may be used uninitialized"
// (a false positive inside immintrin.h; as in common/half.cc).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace {

// Appends the lanes of `keys` at or above `lowest` and their indices (`first`, first + 1, ...)
// at indices[n] and keys[n]; returns the new n. Compressed in registers and stored whole: a
// compressing store to memory is microcoded on AMD's Zen 4, tens of times slower. Stored even
// when no lane is kept: about every fourth group keeps one, and a branch on it mispredicts.
GS_TARGET_AVX512 inline size_t keep(__m512i key, __m512i lowest, size_t first, uint32_t* indices,
                                    uint32_t* keys, size_t n) {
  const __mmask16 hit = _mm512_cmpge_epu32_mask(key, lowest);
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i index = _mm512_add_epi32(lanes, _mm512_set1_epi32(static_cast<int>(first)));
  _mm512_storeu_si512(keys + n, _mm512_maskz_compress_epi32(hit, key));
  _mm512_storeu_si512(indices + n, _mm512_maskz_compress_epi32(hit, index));
  return n + static_cast<size_t>(std::popcount(static_cast<unsigned>(hit)));
}

}  // namespace

GS_TARGET_AVX512 size_t magnitudesAvx512(const float* x, size_t count, size_t base, uint32_t lowest,
                                         uint32_t* indices, uint32_t* keys) {
  GS_CHECK(count % kLanes == 0);
  const __m512i low = _mm512_set1_epi32(static_cast<int>(lowest));
  const __m512i noSign = _mm512_set1_epi32(0x7fffffff);
  size_t n = 0;
  for (size_t j = 0; j < count; j += kLanes) {
    const __m512i key = _mm512_and_si512(_mm512_loadu_si512(x + j), noSign);
    n = keep(key, low, base + j, indices, keys, n);
  }
  return n;
}

#pragma GCC diagnostic pop

#else

size_t magnitudesAvx512(const float*, size_t, size_t, uint32_t, uint32_t*, uint32_t*) {
  GS_CHECK(false);
  return 0;
}
#endif

}  // namespace gradsync::gather
