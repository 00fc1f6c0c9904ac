#include "compress/two_bit.h"

#include "common/check.h"
#include "compress/bit_pack.h"
#include "gradsync/error.h"

namespace gradsync {

std::vector<uint8_t> twoBitEncode(std::span<const float> gradient, std::span<float> residual,
                                  float threshold) {
  GS_CHECK(gradient.size() == residual.size() && threshold > 0);
  std::vector<uint8_t> codes(residual.size());
  for (size_t i = 0; i < residual.size(); ++i) {
    float r = residual[i] + gradient[i];
    if (r >= threshold) {
      codes[i] = 1;
      r -= threshold;
    } else if (r <= -threshold) {
      codes[i] = 2;
      r += threshold;
    }
    residual[i] = r;
  }
  std::vector<uint8_t> packed(twoBitBytes(codes.size()));
  packBits(codes, 2, packed.data());
  return packed;
}

void twoBitAccumulate(std::span<const uint8_t> packed, float threshold, std::span<float> sum) {
  GS_CHECK(packed.size() == twoBitBytes(sum.size()));
  std::vector<uint8_t> codes(sum.size());
  unpackBits(packed.data(), 2, codes);
  for (size_t i = 0; i < sum.size(); ++i) {
    if (codes[i] == 1) {
      sum[i] += threshold;
    } else if (codes[i] == 2) {
      sum[i] -= threshold;
    } else if (codes[i] != 0) {
      throw ProtocolError("malformed 2-bit gradient code 3");
    }
  }
}

}  // namespace gradsync
