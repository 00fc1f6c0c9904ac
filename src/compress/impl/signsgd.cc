// signsgd (EF-signSGD, Karimireddy et al. 2019): per bucket of `bucket` elements (default 32)
// the scale ||x||_1 / n (the mean magnitude, computed in double and rounded once to float), and
// one sign bit per element (set for x < 0), so every element decodes to +scale or -scale; zero
// decodes to +scale. Wire: the scale as float32 per bucket, then 1 bit per element. Biased:
// the registry wraps it in error feedback, which is what makes the paper's method converge.
// The paper scales per tensor; `bucket=0` does that. The default 32 (2 bits per element) is the
// largest bucket measured to end near dense without options (docs/algorithms.md, "Compression
// defaults without an expert"); 512 (1/16 bit over 1) ended 3.6 points below.
#include <cmath>

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

class SignSgdQuantizer {
 public:
  static constexpr size_t kParams = 1;
  static constexpr const char* kName = "signsgd";

  int bits() const { return 1; }
  uint8_t maxCode() const { return 1; }
  void start(uint64_t) {}

  void analyse(std::span<const float> bucket, float* params) {
    const double magnitudes = laneSum(bucket, [](float v) { return double{std::fabs(v)}; });
    params[0] = static_cast<float>(magnitudes / static_cast<double>(bucket.size()));
  }

  void quantize(std::span<const float> x, uint8_t* codes, const float*) { elementCodes(x, codes); }
  void elementCodes(std::span<const float> x, uint8_t* codes) {
    for (size_t i = 0; i < x.size(); ++i) codes[i] = x[i] < 0 ? 1 : 0;
  }

  void dequantizeAdd(std::span<const uint8_t> codes, float* out, const float* params) const {
    const float scale = params[0];
    for (size_t i = 0; i < codes.size(); ++i) out[i] += negateIf(codes[i], scale);
  }
};

}  // namespace

std::unique_ptr<Compressor> makeSignSgd(const MethodArgs& args, std::span<const TensorShape> unit) {
  const size_t bucket = bucketOption(args, "signsgd", 32);
  return std::make_unique<BucketCodec<SignSgdQuantizer>>(SignSgdQuantizer(), unit, bucket);
}

}  // namespace gradsync::methods
