// IEEE 754 binary16 conversions (round to nearest even; infinities preserved; subnormals exact;
// a NaN stays a NaN of the same sign, quieted, with the payload bits that fit, as x86's F16C
// instructions convert it). The per-element functions are portable bit manipulation; the array
// functions run F16C where the CPU has it (common/simd.h) and give the same bits on every path.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace gradsync {

inline uint16_t halfFromFloat(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  if (f > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((f >> 13) & 0x3ffu));  // NaN
  if (f >= 0x47800000u)
    return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 2^16: infinity
  if (f < 0x38800000u) {  // below the smallest normal half: let a float addition round it
    float shifted = std::bit_cast<float>(f) + 0.5f;  // 0.5f's ulp is half's subnormal step 2^-24
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  const uint32_t odd = (f >> 13) & 1u;  // ties to even
  f += 0xc8000fffu + odd;               // rebias the exponent (-112 << 23) and round
  return static_cast<uint16_t>(sign | (f >> 13));
}

inline float floatFromHalf(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t rest = half & 0x7fffu;
  if (rest == 0x7c00u) return std::bit_cast<float>(sign | 0x7f800000u);
  if (rest > 0x7c00u) return std::bit_cast<float>(sign | 0x7fc00000u | ((rest & 0x3ffu) << 13));
  if (rest < 0x400u) {  // subnormal or zero: exact as a float product
    float magnitude = static_cast<float>(rest) * (1.0f / 16777216.0f);
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((rest << 13) + 0x38000000u));
}

// Arrays of `count` values; in and out must not overlap. Dispatched by simd::active().
void halfFromFloat(const float* in, uint16_t* out, size_t count);
void floatFromHalf(const uint16_t* in, float* out, size_t count);
// dst[i] = half(float(dst[i]) + float(src[i])): a sum of halves rounded back, as the fp16 ring
// reduces. src must not overlap dst.
void addHalves(uint16_t* dst, const uint16_t* src, size_t count);

}  // namespace gradsync
