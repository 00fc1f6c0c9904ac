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
#include <cstring>

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

namespace gradsync::methods {
namespace {

// Sums of the non-negative and of the negative elements (in double), and the count of the
// non-negative ones, in one pass. The sides are split with bit masks rather than selects:
// compilers turn a select between a float and 0 into a branch, which mispredicts on every
// other element of a gradient (about 15x slower). Eight lanes in GCC's vector extension:
// written as a loop over arrays, the vectoriser gave up on it once the loop was inlined into
// the codec's AVX2 and AVX-512 paths (2x slower than the scalar path). Lane j sums the
// elements i with i % 8 == j, in order, on every path.
struct SideSums {
  double positives = 0;
  double negatives = 0;
  double count = 0;
};

// Accumulates four lanes of the side sums from four elements.
struct SideLanes {
  using Floats = float __attribute__((vector_size(16)));
  using Masks = int32_t __attribute__((vector_size(16)));
  using Doubles = double __attribute__((vector_size(32)));
  using Counts = int64_t __attribute__((vector_size(32)));  // 64-bit: a bucket may be a tensor

  Doubles positives = {}, negatives = {};
  Counts counts = {};

  void add(const float* x) {
    Floats v;
    std::memcpy(&v, x, sizeof v);
    const Masks nonNegative = v >= 0;  // all ones where true
    const Masks bits = reinterpret_cast<Masks>(v);
    positives += __builtin_convertvector(reinterpret_cast<Floats>(bits & nonNegative), Doubles);
    negatives += __builtin_convertvector(reinterpret_cast<Floats>(bits & ~nonNegative), Doubles);
    counts -= __builtin_convertvector(nonNegative, Counts);
  }
};

SideSums sideSums(std::span<const float> x) {
  SideLanes low, high;  // lanes 0-3 and 4-7
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8) {
    low.add(x.data() + i);
    high.add(x.data() + i + 4);
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
  for (const SideLanes* lanes : {&low, &high}) {
    for (int j = 0; j < 4; ++j) {
      sums.positives += lanes->positives[j];
      sums.negatives += lanes->negatives[j];
      sums.count += static_cast<double>(lanes->counts[j]);
    }
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
    for (size_t i = 0; i < codes.size(); ++i) out[i] += selectFloat(codes[i], positive, negative);
  }
};

}  // namespace

std::unique_ptr<Compressor> makeOneBit(const MethodArgs& args, std::span<const TensorShape> unit) {
  const size_t bucket = bucketOption(args, "onebit", 16);
  return std::make_unique<BucketCodec<OneBitQuantizer>>(OneBitQuantizer(), unit, bucket);
}

}  // namespace gradsync::methods
