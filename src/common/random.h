// Portable pseudo-random helpers, for every module that draws numbers from a seed: the data
// pipeline's permutations and synthetic data, the compressors' random choices (randomk, dgc's
// sampling, PowerSGD's initial Q, stochastic rounding), the servers' embedding rows, CPR's
// failure model. The standard library's distributions (std::uniform_int_distribution,
// std::shuffle) are implementation-defined, so a permutation or a random choice built with them
// could differ between libstdc++ and libc++; everything here is fully specified so that the same
// seed gives the same numbers on every platform and compiler. Here, below every module, so that
// none of them depends on another for its randomness.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>

namespace gradsync::rng {

// SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit mix, used to turn
// (seed, epoch) or (seed, sample) pairs into well-spread generator seeds.
inline uint64_t splitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Combines two 64-bit values into one seed; not symmetric, so (a, b) and (b, a) differ.
inline uint64_t mixSeed(uint64_t a, uint64_t b) {
  return splitMix64(splitMix64(a) ^ b);
}

// Uniform integer in [0, bound) by rejection (no modulo bias), bound >= 1. Draws from the
// engine until a value at or above 2^64 mod bound appears, then reduces it modulo bound.
inline uint64_t uniformBelow(std::mt19937_64& engine, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  uint64_t r = engine();
  while (r < threshold) r = engine();
  return r % bound;
}

// Uniform float in [0, 1) from the top 24 bits of a 64-bit value (exactly representable).
inline float unitFloat(uint64_t bits) {
  return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);
}

// Uniform floats in [0, 1) for stochastic rounding, cheap enough not to dominate a quantizer's
// encode: 16 interleaved xoshiro128+ generators (Blackman and Vigna 2018: 32-bit adds, xors,
// shifts and a rotation, no multiply; its upper bits pass BigCrush, and only the top 24 of each
// output are used). Value 16k + j of a stream is unitFloat of generator j's k-th output; lane j
// starts from two SplitMix64 draws of the seed. Vectorised per instruction set (common/simd.h),
// the same bits on each. One per encoder: not thread-safe.
class LaneUniforms {
 public:
  static constexpr size_t kLanes = 16;

  explicit LaneUniforms(uint64_t seed = 0) { this->seed(seed); }
  // Restarts the stream: lane j's state is (low, high halves of) splitMix64(seed + 2j * gamma)
  // and splitMix64(seed + (2j + 1) * gamma), gamma SplitMix64's increment.
  void seed(uint64_t seed);
  // The next values of the stream into u[0, n rounded up to a multiple of kLanes): the buffer
  // needs kLanes - 1 spare slots. Every lane steps ceil(n / kLanes) times.
  void fill(float* u, size_t n);

 private:
  alignas(64) uint32_t state_[4][kLanes];  // xoshiro128+'s words s0..s3 of every lane
};

}  // namespace gradsync::rng
