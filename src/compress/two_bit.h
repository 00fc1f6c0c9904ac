// MXNet's 2-bit threshold quantization with error feedback, as CD-SGD pushes it (docs/
// algorithms.md, "CD-SGD"): the residual r absorbs each gradient (r += g); an element is sent as
// +t where r >= t (then r -= t), as -t where r <= -t (then r += t), and as 0 otherwise. Codes
// are 2 bits each (0: zero, 1: +t, 2: -t), packed as bit_pack.h lays them out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

inline size_t twoBitBytes(size_t elements) {
  return (elements * 2 + 7) / 8;
}

// Adds `gradient` to `residual`, quantizes it against `threshold` (> 0) and returns the codes
// (twoBitBytes(residual.size()) bytes); the residual keeps what was not sent.
std::vector<uint8_t> twoBitEncode(std::span<const float> gradient, std::span<float> residual,
                                  float threshold);
// Adds the values the codes stand for to `sum`. Throws ProtocolError on a malformed code.
void twoBitAccumulate(std::span<const uint8_t> codes, float threshold, std::span<float> sum);

}  // namespace gradsync
