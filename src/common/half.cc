// The array conversions of half.h, one loop per path (common/simd.h). F16C converts exactly as
// the scalar functions do (round to nearest even, subnormals exact, NaN quieted with its
// payload's high bits), which the fp16 tests check on every half and on floats around every
// rounding boundary; the tail of an array takes the scalar function.
#include "common/half.h"

#include "common/simd.h"

#if GS_SIMD_X86
#include <immintrin.h>
#endif

namespace gradsync {
namespace {

constexpr int kNearest = 0x08;  // _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC

void toHalfScalar(const float* in, uint16_t* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = halfFromFloat(in[i]);
}
void toFloatScalar(const uint16_t* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = floatFromHalf(in[i]);
}
void addHalvesScalar(uint16_t* dst, const uint16_t* src, size_t count) {
  for (size_t i = 0; i < count; ++i)
    dst[i] = halfFromFloat(floatFromHalf(dst[i]) + floatFromHalf(src[i]));
}

#if GS_SIMD_X86
GS_TARGET_AVX2 void toHalfAvx2(const float* in, uint16_t* out, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kNearest);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  toHalfScalar(in + i, out + i, count - i);
}
GS_TARGET_AVX2 void toFloatAvx2(const uint16_t* in, float* out, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(h));
  }
  toFloatScalar(in + i, out + i, count - i);
}
GS_TARGET_AVX2 void addHalvesAvx2(uint16_t* dst, const uint16_t* src, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dst + i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_add_ps(a, b), kNearest));
  }
  addHalvesScalar(dst + i, src + i, count - i);
}

// GCC 12 says the AVX-512 intrinsics' own placeholder operands "may be used uninitialized"
// (a false positive inside immintrin.h).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
GS_TARGET_AVX512 void toHalfAvx512(const float* in, uint16_t* out, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(in + i), kNearest);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), h);
  }
  toHalfScalar(in + i, out + i, count - i);
}
GS_TARGET_AVX512 void toFloatAvx512(const uint16_t* in, float* out, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(h));
  }
  toFloatScalar(in + i, out + i, count - i);
}
GS_TARGET_AVX512 void addHalvesAvx512(uint16_t* dst, const uint16_t* src, size_t count) {
  size_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(dst + i)));
    const __m512 b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_cvtps_ph(_mm512_add_ps(a, b), kNearest));
  }
  addHalvesScalar(dst + i, src + i, count - i);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void halfFromFloat(const float* in, uint16_t* out, size_t count) {
#if GS_SIMD_X86
  switch (simd::active()) {
    case simd::Path::kAvx512:
      return toHalfAvx512(in, out, count);
    case simd::Path::kAvx2:
      return toHalfAvx2(in, out, count);
    case simd::Path::kScalar:
      break;
  }
#endif
  toHalfScalar(in, out, count);
}

void floatFromHalf(const uint16_t* in, float* out, size_t count) {
#if GS_SIMD_X86
  switch (simd::active()) {
    case simd::Path::kAvx512:
      return toFloatAvx512(in, out, count);
    case simd::Path::kAvx2:
      return toFloatAvx2(in, out, count);
    case simd::Path::kScalar:
      break;
  }
#endif
  toFloatScalar(in, out, count);
}

void addHalves(uint16_t* dst, const uint16_t* src, size_t count) {
#if GS_SIMD_X86
  switch (simd::active()) {
    case simd::Path::kAvx512:
      return addHalvesAvx512(dst, src, count);
    case simd::Path::kAvx2:
      return addHalvesAvx2(dst, src, count);
    case simd::Path::kScalar:
      break;
  }
#endif
  addHalvesScalar(dst, src, count);
}

}  // namespace gradsync
