// The naive reference of a compressed push (compress/push_codec.h), shared by the
// parameter-server tests: the method's own codec, applied as the contract says.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "collectives/int8_codec.h"
#include "common/half.h"
#include "common/random.h"
#include "compress/compressor.h"
#include "compress/registry.h"

namespace gradsync::testing {

// Run seed of the compressed parameter-server tests.
inline constexpr uint64_t kPushSeed = 11;
// Servers and reference add the same float terms in the same order (worker order, then the update
// rule); what remains is the compiler's freedom to contract a*b+c (a few ulps).
inline constexpr double kPushTolerance = 1e-6;

// What the server decodes from worker `rank`'s push of `x` at `step` (x is corrected by error
// feedback already). The seeds are the ring's: codecs per rank and step, linear per step.
inline std::vector<float> decodedPush(Compressor& method, std::span<const float> x,
                                      uint64_t runSeed, uint64_t step, int rank) {
  std::vector<float> out(x.size(), 0.0f);
  const uint64_t shared = rng::mixSeed(runSeed, step);
  if (auto* codec = dynamic_cast<CodecCompressor*>(&method)) {
    std::vector<uint8_t> bytes;
    codec->encode(x, bytes, rng::mixSeed(shared, static_cast<uint64_t>(rank)));
    codec->decodeAdd(bytes, out);
    return out;
  }
  auto& linear = dynamic_cast<LinearCompressor&>(method);
  std::vector<float> code(linear.codeLength(x.size()));
  linear.encode(x, code, shared);
  for (float& c : code) {
    if (linear.wire() == LinearCompressor::Wire::kHalf) c = floatFromHalf(halfFromFloat(c));
  }
  if (linear.wire() == LinearCompressor::Wire::kInt8) {
    std::vector<uint8_t> packed(int8::wireBytes(code.size()));
    int8::quantize(code, packed.data());
    int8::dequantize(packed.data(), code.size(), code.data(), false);
  }
  linear.decode(code, out, shared);
  return out;
}

}  // namespace gradsync::testing
