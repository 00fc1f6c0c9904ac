// int8: gradients travel the int8 ring (allreduceInt8): each hop sends its partial sums as int8
// with a float scale per 1,024 values and adds in float32, a quarter of a dense allreduce's
// bytes, every rank the same bits. No error feedback by default, as fp16: the rounding (half a
// step of each chunk's largest value, 1/254 of it) is below gradient noise on the tested jobs;
// `,ef=on` feeds back the difference to this rank's own values quantized once. Last in the
// registry, so that the fuzzer's committed seeds keep the cases they were written for.
#include <algorithm>

#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

class Int8 final : public LinearCompressor {
 public:
  size_t codeLength(size_t elements) const override { return elements; }
  Wire wire() const override { return Wire::kInt8; }
  void encode(std::span<const float> x, std::span<float> code, uint64_t) override {
    std::copy(x.begin(), x.end(), code.begin());
  }
  void decode(std::span<const float> code, std::span<float> out, uint64_t) const override {
    std::copy(code.begin(), code.end(), out.begin());
  }
};

}  // namespace

std::unique_ptr<Compressor> makeInt8(const MethodArgs&, std::span<const TensorShape>) {
  return std::make_unique<Int8>();
}

}  // namespace gradsync::methods
