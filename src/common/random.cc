// LaneUniforms (random.h) per instruction set: xoshiro128+ needs only 32-bit adds, xors, shifts
// and rotations, which AVX2 and AVX-512 have lane-wise. AVX2 steps the 16 generators as two
// registers of 8 (two independent chains, so one's latency hides behind the other's), AVX-512
// as one of 16. Each converts the top 24 bits of an output to float exactly, as the scalar loop
// does.
#include "common/random.h"

#include <bit>

#include "common/simd.h"

#if GS_SIMD_X86
#include <immintrin.h>
#endif

namespace gradsync::rng {
namespace {

constexpr size_t kLanes = LaneUniforms::kLanes;
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;
constexpr float kUnit = 1.0f / 16777216.0f;
using State = uint32_t[4][kLanes];

// One step of every lane: u[j] from lane j's output.
void stepScalar(State& s, float* u) {
  for (size_t j = 0; j < kLanes; ++j) {
    const uint32_t result = s[0][j] + s[3][j];
    const uint32_t t = s[1][j] << 9;
    s[2][j] ^= s[0][j];
    s[3][j] ^= s[1][j];
    s[1][j] ^= s[2][j];
    s[0][j] ^= s[3][j];
    s[2][j] ^= t;
    s[3][j] = std::rotl(s[3][j], 11);
    u[j] = static_cast<float>(result >> 8) * kUnit;
  }
}

void fillScalar(State& s, float* u, size_t steps) {
  for (size_t k = 0; k < steps; ++k) stepScalar(s, u + k * kLanes);
}

#if GS_SIMD_X86
// Eight lanes of xoshiro128+: the output's top 24 bits as floats, then the step.
struct Lanes8 {
  __m256i s0, s1, s2, s3;

  GS_TARGET_AVX2 __m256 next() {
    const __m256i result = _mm256_add_epi32(s0, s3);
    const __m256i t = _mm256_slli_epi32(s1, 9);
    s2 = _mm256_xor_si256(s2, s0);
    s3 = _mm256_xor_si256(s3, s1);
    s1 = _mm256_xor_si256(s1, s2);
    s0 = _mm256_xor_si256(s0, s3);
    s2 = _mm256_xor_si256(s2, t);
    s3 = _mm256_or_si256(_mm256_slli_epi32(s3, 11), _mm256_srli_epi32(s3, 21));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(result, 8)), _mm256_set1_ps(kUnit));
  }
};

// (No lambdas here: a lambda does not take its enclosing function's target attribute.)
GS_TARGET_AVX2 Lanes8 load8(const State& s, size_t first) {
  return {_mm256_load_si256(reinterpret_cast<const __m256i*>(&s[0][first])),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(&s[1][first])),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(&s[2][first])),
          _mm256_load_si256(reinterpret_cast<const __m256i*>(&s[3][first]))};
}

GS_TARGET_AVX2 void store8(const Lanes8& lanes, State& s, size_t first) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(&s[0][first]), lanes.s0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(&s[1][first]), lanes.s1);
  _mm256_store_si256(reinterpret_cast<__m256i*>(&s[2][first]), lanes.s2);
  _mm256_store_si256(reinterpret_cast<__m256i*>(&s[3][first]), lanes.s3);
}

GS_TARGET_AVX2 void fillAvx2(State& s, float* u, size_t steps) {
  Lanes8 low = load8(s, 0);
  Lanes8 high = load8(s, 8);
  for (size_t k = 0; k < steps; ++k) {
    _mm256_storeu_ps(u + k * kLanes, low.next());
    _mm256_storeu_ps(u + k * kLanes + 8, high.next());
  }
  store8(low, s, 0);
  store8(high, s, 8);
}

// GCC 12 says the AVX-512 intrinsics' own placeholder operands "may be used uninitialized"
// (a false positive inside immintrin.h).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
GS_TARGET_AVX512 void fillAvx512(State& s, float* u, size_t steps) {
  __m512i s0 = _mm512_load_si512(&s[0][0]);
  __m512i s1 = _mm512_load_si512(&s[1][0]);
  __m512i s2 = _mm512_load_si512(&s[2][0]);
  __m512i s3 = _mm512_load_si512(&s[3][0]);
  const __m512 unit = _mm512_set1_ps(kUnit);
  for (size_t k = 0; k < steps; ++k) {
    const __m512i result = _mm512_add_epi32(s0, s3);
    const __m512i t = _mm512_slli_epi32(s1, 9);
    s2 = _mm512_xor_si512(s2, s0);
    s3 = _mm512_xor_si512(s3, s1);
    s1 = _mm512_xor_si512(s1, s2);
    s0 = _mm512_xor_si512(s0, s3);
    s2 = _mm512_xor_si512(s2, t);
    s3 = _mm512_rol_epi32(s3, 11);
    _mm512_storeu_ps(u + k * kLanes,
                     _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(result, 8)), unit));
  }
  _mm512_store_si512(&s[0][0], s0);
  _mm512_store_si512(&s[1][0], s1);
  _mm512_store_si512(&s[2][0], s2);
  _mm512_store_si512(&s[3][0], s3);
}
#pragma GCC diagnostic pop
#endif

}  // namespace

void LaneUniforms::seed(uint64_t seed) {
  for (size_t j = 0; j < kLanes; ++j) {
    const uint64_t first = splitMix64(seed + 2 * j * kGamma);
    const uint64_t second = splitMix64(seed + (2 * j + 1) * kGamma);
    state_[0][j] = static_cast<uint32_t>(first);
    state_[1][j] = static_cast<uint32_t>(first >> 32);
    state_[2][j] = static_cast<uint32_t>(second);
    state_[3][j] = static_cast<uint32_t>(second >> 32);
    // xoshiro's one forbidden state (it would stay zero): never drawn in practice.
    if ((first | second) == 0) state_[0][j] = 1;
  }
}

void LaneUniforms::fill(float* u, size_t n) {
  const size_t steps = (n + kLanes - 1) / kLanes;
#if GS_SIMD_X86
  switch (simd::active()) {
    case simd::Path::kAvx512:
      return fillAvx512(state_, u, steps);
    case simd::Path::kAvx2:
      return fillAvx2(state_, u, steps);
    case simd::Path::kScalar:
      break;
  }
#endif
  fillScalar(state_, u, steps);
}

}  // namespace gradsync::rng
