// rtn:B, B-bit round-to-nearest: per bucket of `bucket` elements (default 128) the largest
// magnitude s, and per element a sign and a level l = round(|v_i| * L / s) in {0..L}, L = 2^(B-1)
// - 1, decoded as sign(v_i) * l * s / L; error feedback keeps what rounding lost (Streaming
// DiLoCo's 4-bit outer gradients are of this kind; at B = 2 the codes are {-s, 0, +s}). Wire:
// bucket_codec.h, s as float32 per bucket then B bits per element (level << 1 | sign). Not
// stochastic: every rank decodes the same encodings to the same bits, and a rank encodes the same
// input to the same bytes whatever the seed.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

class RoundToNearest {
 public:
  static constexpr size_t kParams = 1;
  static constexpr const char* kName = "rtn";

  explicit RoundToNearest(int bits) : levels_((1 << (bits - 1)) - 1), bits_(bits) {}

  int bits() const { return bits_; }
  uint8_t maxCode() const { return static_cast<uint8_t>(2 * levels_ + 1); }
  void start(uint64_t /*seed*/) {}

  // A NaN anywhere makes the scale NaN (a max would skip it): the bucket then decodes as NaN.
  // The largest |v| as the largest bit pattern of |v|: the order of non-negative floats is that
  // of their bits as integers, and every NaN's lies above infinity's. An integer max
  // vectorises on every path (a float max with a NaN test kept the loop scalar).
  void analyse(std::span<const float> bucket, float* params) {
    uint32_t largest = 0;
    for (float v : bucket) largest = std::max(largest, std::bit_cast<uint32_t>(v) & 0x7fffffffu);
    params[0] = largest > kInfinityBits ? std::numeric_limits<float>::quiet_NaN()
                                        : std::bit_cast<float>(largest);
  }

  void quantize(std::span<const float> x, uint8_t* codes, const float* params) {
    const float scale = params[0];
    // A zero bucket is all level 0; a non-finite scale sends level 0 too, and decodes as
    // 0 * inf or 0 * NaN = NaN for the whole bucket, so the divergence shows.
    if (!(scale > 0) || !std::isfinite(scale)) {
      std::fill(codes, codes + x.size(), uint8_t{0});
      return;
    }
    const float levels = static_cast<float>(levels_);
    for (size_t i = 0; i < x.size(); ++i) {
      // |v| <= s, so the ratio is at most L up to rounding: the cap only guards that.
      const float r = std::fabs(x[i]) / scale * levels;
      // std::lround(r), halves away from zero, without a call: r - whole is exact for
      // 0 <= r < 2^23.
      const auto whole = static_cast<int32_t>(r);
      const int32_t rounded = whole + (r - static_cast<float>(whole) >= 0.5f ? 1 : 0);
      const int32_t level = std::min<int32_t>(rounded, levels_);
      codes[i] = static_cast<uint8_t>(2 * level + (x[i] < 0 ? 1 : 0));
    }
  }

  void dequantizeAdd(std::span<const uint8_t> codes, float* out, const float* params) const {
    const float unit = params[0] / static_cast<float>(levels_);
    for (size_t i = 0; i < codes.size(); ++i) {
      const float magnitude = static_cast<float>(codes[i] >> 1) * unit;
      out[i] += negateIf(codes[i] & 1, magnitude);
    }
  }

 private:
  static constexpr uint32_t kInfinityBits = 0x7f800000u;

  int32_t levels_;
  int bits_;
};

}  // namespace

std::unique_ptr<Compressor> makeRtn(const MethodArgs& args, std::span<const TensorShape> unit) {
  const double bits = args.value;
  if (!(bits >= 2 && bits <= 8) || bits != std::floor(bits)) {
    throw ConfigError(fmt::format("rtn:B needs a whole number of bits 2 <= B <= 8, got {}", bits),
                      {.hint = "rtn:4 sends 4 bits per element and a scale per bucket"});
  }
  const size_t bucket = bucketOption(args, "rtn", 128);
  return std::make_unique<BucketCodec<RoundToNearest>>(RoundToNearest(static_cast<int>(bits)), unit,
                                                       bucket);
}

}  // namespace gradsync::methods
