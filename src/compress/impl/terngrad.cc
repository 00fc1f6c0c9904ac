// terngrad (Wen et al. 2017): per tensor, clip at c * sigma (option `clip`, default 2.5; 0
// disables clipping), take s = max |clipped g| = min(max |g|, c * sigma), and send each element
// as s * sign(g_i) with probability |clip(g_i)| / s, else 0: unbiased with respect to the
// clipped gradient. Wire: s as float32 per tensor, then 2 bits per element (0: 0, 1: +s, 2: -s;
// 3 is malformed). sigma is the root mean square of the tensor (the deviation about 0, not
// about the mean: the two agree for the near-zero-mean gradients the paper clips, but the
// deviation about the mean is 0 for a constant or one-element tensor, which would then be
// clipped to zero at every step). No error feedback by default: the quantizer is unbiased.
#include <cmath>
#include <cstring>
#include <limits>

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

// The sum of squares (in double) and max |x[i]|, in one pass over the tensor, in eight
// interleaved lanes (lane j takes the elements i with i % 8 == j, in order). Written in GCC's
// vector extension: as a loop over arrays, the vectoriser left it scalar once inlined into the
// codec's AVX2 and AVX-512 paths.
struct Moments {
  double squares = 0;
  float largest = 0;
};

struct MomentLanes {
  using Floats = float __attribute__((vector_size(16)));
  using Bits = uint32_t __attribute__((vector_size(16)));
  using Doubles = double __attribute__((vector_size(32)));
  Doubles squares = {};
  Floats largest = {};

  void add(const float* x) {
    Floats v;
    std::memcpy(&v, x, sizeof v);
    const Doubles wide = __builtin_convertvector(v, Doubles);
    squares += wide * wide;
    const Floats magnitude = reinterpret_cast<Floats>(reinterpret_cast<Bits>(v) & 0x7fffffffu);
    largest = largest < magnitude ? magnitude : largest;
  }
};

Moments moments(std::span<const float> x) {
  MomentLanes low, high;  // lanes 0-3 and 4-7
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8) {
    low.add(x.data() + i);
    high.add(x.data() + i + 4);
  }
  Moments m;
  for (; i < x.size(); ++i) {
    m.squares += double{x[i]} * x[i];
    m.largest = std::max(m.largest, std::fabs(x[i]));
  }
  for (const MomentLanes* lanes : {&low, &high}) {
    for (int j = 0; j < 4; ++j) {
      m.squares += lanes->squares[j];
      m.largest = std::max(m.largest, lanes->largest[j]);
    }
  }
  return m;
}

class TernGradQuantizer {
 public:
  static constexpr size_t kParams = 1;
  static constexpr const char* kName = "terngrad";

  explicit TernGradQuantizer(double clip) : clip_(clip) {}

  int bits() const { return 2; }
  uint8_t maxCode() const { return 2; }
  void start(uint64_t seed) { random_.seed(seed); }

  void analyse(std::span<const float> tensor, float* params) {
    const Moments m = moments(tensor);
    const double squares = m.squares;
    double scale = m.largest;
    if (clip_ > 0)
      scale = std::min(scale, clip_ * std::sqrt(squares / static_cast<double>(tensor.size())));
    // The sum of squares in double is finite exactly when every element is (float's largest
    // square is far below double's range): an inf or NaN makes the whole tensor decode as NaN.
    if (!std::isfinite(squares)) scale = std::numeric_limits<double>::quiet_NaN();
    params[0] = static_cast<float>(scale);
  }

  void quantize(std::span<const float> x, uint8_t* codes, const float* params) {
    const float s = params[0];
    // Zero tensor: all 0. Non-finite s: all 0 too, decoded as 0 * s = NaN.
    if (!(s > 0) || !std::isfinite(s)) {
      std::fill(codes, codes + x.size(), uint8_t{0});
      return;
    }
    random_.fill(uniform_, x.size());
    // P(send) = P(u s < |g_i|) = min(|g_i|, s) / s: at or beyond the clip u s < s <= |g_i| (u
    // s rounds to s's predecessor at most: u <= 1 - 2^-24), so always sent. A product rather
    // than |g_i| / s: a vector division costs several multiplies. Branch-free (code = send +
    // (send & negative)) so that the loop vectorises.
    for (size_t i = 0; i < x.size(); ++i) {
      const int32_t send = uniform_[i] * s < std::fabs(x[i]) ? 1 : 0;
      const int32_t negative = x[i] < 0 ? 1 : 0;
      codes[i] = static_cast<uint8_t>(send + (send & negative));
    }
  }

  void dequantizeAdd(std::span<const uint8_t> codes, float* out, const float* params) const {
    const float s = params[0];
    for (size_t i = 0; i < codes.size(); ++i) {
      // code 0, 1, 2 -> 0, +1, -1; a product rather than a select, so that a NaN s poisons
      const int32_t ternary = (codes[i] & 1) - (codes[i] >> 1);
      out[i] += s * static_cast<float>(ternary);
    }
  }

 private:
  double clip_;
  rng::LaneUniforms random_;
  float uniform_[kCodeChunk + rng::LaneUniforms::kLanes - 1];  // fill writes whole steps
};

}  // namespace

std::unique_ptr<Compressor> makeTernGrad(const MethodArgs& args,
                                         std::span<const TensorShape> unit) {
  const double clip = args.number("clip", 2.5);
  if (!(clip >= 0) || !std::isfinite(clip)) {
    throw ConfigError(fmt::format(
        "terngrad: clip={} must be >= 0 (in standard deviations; 0 disables it)", clip));
  }
  // One bucket per tensor: the paper's scalers are per layer.
  return std::make_unique<BucketCodec<TernGradQuantizer>>(TernGradQuantizer(clip), unit, 0);
}

}  // namespace gradsync::methods
