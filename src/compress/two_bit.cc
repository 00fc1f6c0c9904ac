#include "compress/two_bit.h"

#include "common/check.h"
#include "compress/bit_pack.h"
#include "gradsync/error.h"

namespace gradsync {

// Both directions stream the codes through bit_pack's staging buffers: no code array the size
// of the unit on the push path.
std::vector<uint8_t> twoBitEncode(std::span<const float> gradient, std::span<float> residual,
                                  float threshold) {
  GS_CHECK(gradient.size() == residual.size() && threshold > 0);
  std::vector<uint8_t> packed(twoBitBytes(residual.size()));
  PackedWriter writer(2, packed.data());
  for (size_t i = 0; i < residual.size();) {
    std::span<uint8_t> codes = writer.room(residual.size() - i);
    for (uint8_t& code : codes) {
      float r = residual[i] + gradient[i];
      code = r >= threshold ? 1 : r <= -threshold ? 2 : 0;
      residual[i++] = code == 1 ? r - threshold : code == 2 ? r + threshold : r;
    }
    writer.commit(codes.size());
  }
  writer.finish();
  return packed;
}

void twoBitAccumulate(std::span<const uint8_t> packed, float threshold, std::span<float> sum) {
  GS_CHECK(packed.size() == twoBitBytes(sum.size()));
  PackedReader reader(packed.data(), sum.size(), 2, /*maxCode=*/2);  // 3 is malformed
  for (size_t i = 0; i < sum.size();) {
    for (uint8_t code : reader.next(sum.size() - i)) {
      sum[i++] += code == 1 ? threshold : code == 2 ? -threshold : 0.0f;
    }
  }
}

}  // namespace gradsync
