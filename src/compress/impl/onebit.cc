// onebit (1-bit SGD, Seide et al. 2014): per bucket of `bucket` elements (default 16), one bit
// per element (set for x < 0) and two reconstruction values, the mean of the bucket's
// non-negative elements and the mean of its negative elements, so every element decodes to
// one of its bucket's two means. Wire: the two means as float32 per bucket, then 1 bit per
// element. Biased: the registry wraps it in error feedback, as in the paper, which carries
// each step's quantization error into the next step's gradient. Means are computed in double
// and rounded once to float. The paper keeps one pair of values per column of each weight
// matrix; fixed-size buckets within each tensor take their place here (which dimension is a
// column depends on the framework's layout, and 1-D tensors have none), so the number of
// elements sharing a pair is bounded whatever the shapes. The default 16 (5 bits per element)
// is the largest bucket measured to end near dense without options (docs/algorithms.md,
// "Compression defaults without an expert"); 512 is closer to the paper's 1 bit.
#include <bit>
#include <cmath>

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

// Sums of the non-negative and of the negative elements (in double), and the count of the
// non-negative ones, in one pass. The sides are split with bit masks rather than selects:
// compilers turn a select between a float and 0 into a branch, which mispredicts on every
// other element of a gradient (about 15x slower).
struct SideSums {
  double positives = 0;
  double negatives = 0;
  double count = 0;
};

SideSums sideSums(std::span<const float> x) {
  constexpr size_t kLanes = 8;
  double positives[kLanes] = {}, negatives[kLanes] = {};
  int64_t counts[kLanes] = {};  // 64-bit: a bucket may be a whole tensor
  size_t i = 0;
  for (; i + kLanes <= x.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) {
      const uint32_t bits = std::bit_cast<uint32_t>(x[i + j]);
      const uint32_t mask = x[i + j] >= 0 ? ~uint32_t{0} : 0;
      positives[j] += std::bit_cast<float>(bits & mask);
      negatives[j] += std::bit_cast<float>(bits & ~mask);
      counts[j] += mask & 1;
    }
  }
  SideSums sums;
  for (; i < x.size(); ++i) {
    if (x[i] >= 0) {
      sums.positives += x[i];
      sums.count += 1;
    } else {
      sums.negatives += x[i];
    }
  }
  for (size_t j = 0; j < kLanes; ++j) {
    sums.positives += positives[j];
    sums.negatives += negatives[j];
    sums.count += static_cast<double>(counts[j]);
  }
  return sums;
}

class OneBitQuantizer {
 public:
  static constexpr size_t kParams = 2;
  static constexpr const char* kName = "onebit";

  int bits() const { return 1; }
  uint8_t maxCode() const { return 1; }
  void start(uint64_t) {}

  // params: {mean of x >= 0, mean of x < 0}; 0 for a side with no element (never decoded).
  // A NaN compares false with 0, so it lands on the negative side and poisons that mean.
  void analyse(std::span<const float> bucket, float* params) {
    const SideSums sums = sideSums(bucket);
    const double rest = static_cast<double>(bucket.size()) - sums.count;
    params[0] = sums.count > 0 ? static_cast<float>(sums.positives / sums.count) : 0.0f;
    params[1] = rest > 0 ? static_cast<float>(sums.negatives / rest) : 0.0f;
  }

  void quantize(std::span<const float> x, uint8_t* codes, const float*) {
    for (size_t i = 0; i < x.size(); ++i) codes[i] = x[i] >= 0 ? 0 : 1;
  }

  void dequantizeAdd(std::span<const uint8_t> codes, float* out, const float* params) const {
    const float positive = params[0];
    const float negative = params[1];
    for (size_t i = 0; i < codes.size(); ++i) out[i] += codes[i] != 0 ? negative : positive;
  }
};

}  // namespace

std::unique_ptr<Compressor> makeOneBit(const MethodArgs& args, std::span<const TensorShape> unit) {
  const size_t bucket = bucketOption(args, "onebit", 16);
  return std::make_unique<BucketCodec<OneBitQuantizer>>(OneBitQuantizer(), unit, bucket);
}

}  // namespace gradsync::methods
