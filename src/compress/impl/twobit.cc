// twobit:T, MXNet's 2-bit threshold quantization (the codec CD-SGD pushes, compress/two_bit.h)
// as an ordinary compressor: each element is sent as +T where x >= T, as -T where x <= -T, and
// as 0 otherwise; what is not sent stays in the error-feedback residual (the registry wraps the
// method in error feedback), which is exactly MXNet's residual rule r += g, r -= sent. Wire: T
// as float32 (one bucket per tensor), then 2 bits per element (0: 0, 1: +T, 2: -T; 3 is
// malformed). Over the ring the encodings are all-gathered; through parameter servers a worker
// pushes its own. The threshold is absolute, so it suits gradients whose scale is known (CD-SGD
// pairs it with its k-step full-precision correction); default 0.5, MXNet's.
#include <cmath>

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

class TwoBitQuantizer {
 public:
  static constexpr size_t kParams = 1;
  static constexpr const char* kName = "twobit";

  explicit TwoBitQuantizer(float threshold) : threshold_(threshold) {}

  int bits() const { return 2; }
  uint8_t maxCode() const { return 2; }
  void start(uint64_t) {}

  void analyse(std::span<const float>, float* params) { params[0] = threshold_; }

  void quantize(std::span<const float> x, uint8_t* codes, const float* params) {
    const float t = params[0];
    // t > 0, so at most one comparison holds.
    for (size_t i = 0; i < x.size(); ++i) {
      codes[i] = static_cast<uint8_t>((x[i] >= t ? 1 : 0) + (x[i] <= -t ? 2 : 0));
    }
  }

  void dequantizeAdd(std::span<const uint8_t> codes, float* out, const float* params) const {
    const float t = params[0];
    for (size_t i = 0; i < codes.size(); ++i) {
      // code 0, 1, 2 -> +0, t, -t
      out[i] += negateIf(codes[i] >> 1, selectFloat(codes[i] != 0 ? 1 : 0, 0.0f, t));
    }
  }

 private:
  float threshold_;
};

}  // namespace

std::unique_ptr<Compressor> makeTwoBit(const MethodArgs& args, std::span<const TensorShape> unit) {
  const double threshold = args.value;
  if (!(threshold > 0) || !std::isfinite(threshold)) {
    throw ConfigError(fmt::format("twobit:T needs a threshold T > 0, got {}", threshold),
                      {.hint = "T is the magnitude each sent element stands for (MXNet: 0.5)"});
  }
  return std::make_unique<BucketCodec<TwoBitQuantizer>>(
      TwoBitQuantizer(static_cast<float>(threshold)), unit, 0);
}

}  // namespace gradsync::methods
