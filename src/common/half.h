// IEEE 754 binary16 conversions (round to nearest even; infinities and NaN preserved;
// subnormals exact). Portable bit manipulation: no F16C or _Float16 needed, and the loops over
// arrays vectorise.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace gradsync {

inline uint16_t halfFromFloat(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  if (f >= 0x47800000u) {  // >= 2^16: infinity, or NaN (kept quiet)
    return static_cast<uint16_t>(sign | (f > 0x7f800000u ? 0x7e00u : 0x7c00u));
  }
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
  if (rest >= 0x7c00u) return std::bit_cast<float>(sign | 0x7f800000u | ((rest & 0x3ffu) << 13));
  if (rest < 0x400u) {  // subnormal or zero: exact as a float product
    float magnitude = static_cast<float>(rest) * (1.0f / 16777216.0f);
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(magnitude));
  }
  return std::bit_cast<float>(sign | ((rest << 13) + 0x38000000u));
}

inline void halfFromFloat(const float* in, uint16_t* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = halfFromFloat(in[i]);
}

inline void floatFromHalf(const uint16_t* in, float* out, size_t count) {
  for (size_t i = 0; i < count; ++i) out[i] = floatFromHalf(in[i]);
}

}  // namespace gradsync
