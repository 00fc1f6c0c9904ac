// qsgd:L (Alistarh et al. 2017): per bucket of `bucket` elements (default 512) the L2 norm
// ||v||, and per element a sign and a level l in {0..L}, rounded stochastically so that the
// decoded value ||v|| * sign(v_i) * l / L is unbiased: with r = |v_i| * L / ||v||, l is
// floor(r) + 1 with probability r - floor(r), else floor(r). Wire: the norm as float32 per
// bucket, then 1 + ceil(log2(L + 1)) bits per element (level << 1 | sign), plain fixed-width
// codes instead of the paper's Elias coding (bucket_codec.h). No error feedback by default: the
// quantizer is unbiased. L <= 127 keeps a code within 8 bits.
#include <bit>
#include <cmath>
#include <limits>

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

constexpr double kMaxLevels = 127;

class QsgdQuantizer {
 public:
  static constexpr size_t kParams = 1;
  static constexpr const char* kName = "qsgd";

  explicit QsgdQuantizer(int levels)
      : levels_(levels), bits_(1 + std::bit_width(static_cast<unsigned>(levels))) {}

  int bits() const { return bits_; }
  uint8_t maxCode() const { return static_cast<uint8_t>(2 * levels_ + 1); }
  void start(uint64_t seed) { random_.seed(seed); }

  // The norm from squares summed in double: exact enough that |v_i| <= norm holds for every
  // element after rounding to float (the sum of non-negative terms never drops below its
  // largest term), so r never exceeds L by more than a rounding step.
  void analyse(std::span<const float> bucket, float* params) {
    double squares = laneSum(bucket, [](float v) { return double{v} * v; });
    params[0] = static_cast<float>(std::sqrt(squares));
  }

  void quantize(std::span<const float> x, uint8_t* codes, const float* params) {
    const float norm = params[0];
    const float factor = static_cast<float>(levels_) / norm;
    // A zero bucket is all level 0. A non-finite norm (an inf or NaN in the bucket) sends level
    // 0 too, and decodes as 0 * norm = NaN for the whole bucket, so the divergence shows.
    if (!(norm > 0) || !std::isfinite(norm)) return zeroCodes(x.size(), codes);
    random_.fill(uniform_, x.size());
    if (std::isfinite(factor)) {
      roundStochastically(x, codes, [factor](float a) { return a * factor; });
    } else {  // a norm below L / FLT_MAX: L / norm overflows, so divide first
      const float levels = static_cast<float>(levels_);
      roundStochastically(x, codes, [norm, levels](float a) { return a / norm * levels; });
    }
  }

  void dequantizeAdd(std::span<const uint8_t> codes, float* out, const float* params) const {
    const float unit = params[0] / static_cast<float>(levels_);
    for (size_t i = 0; i < codes.size(); ++i) {
      float magnitude = static_cast<float>(codes[i] >> 1) * unit;
      out[i] += negateIf(codes[i] & 1, magnitude);
    }
  }

 private:
  static void zeroCodes(size_t n, uint8_t* codes) { std::fill(codes, codes + n, uint8_t{0}); }

  // level = floor(r) + [u < r - floor(r)], capped at L against rounding; sign in bit 0.
  template <class Ratio>
  void roundStochastically(std::span<const float> x, uint8_t* codes, Ratio ratio) const {
    const int32_t top = levels_;
    for (size_t i = 0; i < x.size(); ++i) {
      float r = ratio(std::fabs(x[i]));
      int32_t floor = static_cast<int32_t>(r);
      int32_t level = floor + (uniform_[i] < r - static_cast<float>(floor) ? 1 : 0);
      level = level < top ? level : top;
      codes[i] = static_cast<uint8_t>(2 * level + (x[i] < 0 ? 1 : 0));
    }
  }

  int levels_;
  int bits_;
  rng::LaneUniforms random_;
  float uniform_[kCodeChunk + rng::LaneUniforms::kLanes - 1];  // fill writes whole steps
};

}  // namespace

std::unique_ptr<Compressor> makeQsgd(const MethodArgs& args, std::span<const TensorShape> unit) {
  const double levels = args.value;
  if (!(levels >= 1 && levels <= kMaxLevels) || levels != std::floor(levels)) {
    throw ConfigError(
        fmt::format("qsgd:L needs a whole number 1 <= L <= {}, got {}", kMaxLevels, levels),
        {.hint = "L levels take 1 + ceil(log2(L + 1)) <= 8 bits per element"});
  }
  const size_t bucket = bucketOption(args, "qsgd", 512);
  return std::make_unique<BucketCodec<QsgdQuantizer>>(QsgdQuantizer(static_cast<int>(levels)), unit,
                                                      bucket);
}

}  // namespace gradsync::methods
