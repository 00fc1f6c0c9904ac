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
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "common/simd.h"

#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"

#if GS_SIMD_X86
#include <immintrin.h>
#endif

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

#if GS_SIMD_X86
// Four buckets' lanes j..j+3 (one vector per bucket) become lane j, ..., j+3 of the four buckets
// (one vector per lane).
GS_TARGET_AVX2 inline void transposeFour(__m256d& a, __m256d& b, __m256d& c, __m256d& d) {
  const __m256d ab02 = _mm256_unpacklo_pd(a, b);
  const __m256d ab13 = _mm256_unpackhi_pd(a, b);
  const __m256d cd02 = _mm256_unpacklo_pd(c, d);
  const __m256d cd13 = _mm256_unpackhi_pd(c, d);
  a = _mm256_permute2f128_pd(ab02, cd02, 0x20);
  b = _mm256_permute2f128_pd(ab13, cd13, 0x20);
  c = _mm256_permute2f128_pd(ab02, cd02, 0x31);
  d = _mm256_permute2f128_pd(ab13, cd13, 0x31);
}

// SideLanes of one bucket of n elements (n a multiple of 8): the same additions, in AVX2.
struct LanesAvx2 {
  __m256d positives[2], negatives[2];  // lanes 0-3, 4-7
  int64_t count = 0;
};

GS_TARGET_AVX2 inline LanesAvx2 lanesAvx2(const float* x, size_t n) {
  LanesAvx2 lanes;
  for (int h = 0; h < 2; ++h) lanes.positives[h] = lanes.negatives[h] = _mm256_setzero_pd();
  for (size_t i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 nonNegative = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
    const __m256 positive = _mm256_and_ps(v, nonNegative);
    const __m256 negative = _mm256_andnot_ps(nonNegative, v);
    for (int h = 0; h < 2; ++h) {
      const __m128 p =
          h == 0 ? _mm256_castps256_ps128(positive) : _mm256_extractf128_ps(positive, 1);
      const __m128 q =
          h == 0 ? _mm256_castps256_ps128(negative) : _mm256_extractf128_ps(negative, 1);
      lanes.positives[h] = _mm256_add_pd(lanes.positives[h], _mm256_cvtps_pd(p));
      lanes.negatives[h] = _mm256_add_pd(lanes.negatives[h], _mm256_cvtps_pd(q));
    }
    lanes.count += std::popcount(static_cast<unsigned>(_mm256_movemask_ps(nonNegative)));
  }
  return lanes;
}

// sideMeans of `groups` times four consecutive buckets of n elements (n a multiple of 8), one
// bucket per element of a vector: the same additions in the same order, then the divisions, so
// every mean has sideMeans' bits. Small buckets (the default 16) are dominated by the sum of the
// eight lanes, a chain of dependent additions, and the two divisions: four buckets share each
// instruction of those.
// kBucket: n as a constant (0: n as given), so that the default's loops unroll.
template <size_t kBucket>
GS_TARGET_AVX2 void sideMeansInFours(const float* x, size_t n, size_t groups, float* params) {
  if (kBucket != 0) n = kBucket;
  for (size_t g = 0; g < groups; ++g, x += 4 * n, params += 8) {
    LanesAvx2 lanes[4];
    for (int b = 0; b < 4; ++b) lanes[b] = lanesAvx2(x + b * n, n);
    __m256d positives = _mm256_setzero_pd(), negatives = _mm256_setzero_pd();
    for (int h = 0; h < 2; ++h) {
      transposeFour(lanes[0].positives[h], lanes[1].positives[h], lanes[2].positives[h],
                    lanes[3].positives[h]);
      transposeFour(lanes[0].negatives[h], lanes[1].negatives[h], lanes[2].negatives[h],
                    lanes[3].negatives[h]);
      for (int b = 0; b < 4; ++b) {  // transposed: lanes[b] holds lane 4h + b
        positives = _mm256_add_pd(positives, lanes[b].positives[h]);
        negatives = _mm256_add_pd(negatives, lanes[b].negatives[h]);
      }
    }
    const __m256d counts =
        _mm256_set_pd(static_cast<double>(lanes[3].count), static_cast<double>(lanes[2].count),
                      static_cast<double>(lanes[1].count), static_cast<double>(lanes[0].count));
    const __m256d rest = _mm256_sub_pd(_mm256_set1_pd(static_cast<double>(n)), counts);
    const __m256d zero = _mm256_setzero_pd();
    const __m256d positiveMeans =
        _mm256_and_pd(_mm256_div_pd(positives, counts), _mm256_cmp_pd(counts, zero, _CMP_GT_OQ));
    const __m256d negativeMeans =
        _mm256_and_pd(_mm256_div_pd(negatives, rest), _mm256_cmp_pd(rest, zero, _CMP_GT_OQ));
    const __m128 p = _mm256_cvtpd_ps(positiveMeans);
    const __m128 q = _mm256_cvtpd_ps(negativeMeans);
    _mm_storeu_ps(params, _mm_unpacklo_ps(p, q));
    _mm_storeu_ps(params + 4, _mm_unpackhi_ps(p, q));
  }
}
#endif

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

  // The means of consecutive buckets: on the AVX paths four at a time where a bucket has a
  // multiple of 8 elements.
  void analyseRun(std::span<const float> run, size_t bucket, float* params) {
    size_t first = 0;
#if GS_SIMD_X86
    if (simd::active() != simd::Path::kScalar && bucket % 8 == 0) {
      const size_t groups = run.size() / (4 * bucket);
      if (bucket == 16) {
        sideMeansInFours<16>(run.data(), bucket, groups, params);
      } else {
        sideMeansInFours<0>(run.data(), bucket, groups, params);
      }
      first = groups * 4 * bucket;
      params += groups * 4 * kParams;
    }
#endif
    for (; first < run.size(); first += bucket, params += kParams) {
      analyse(run.subspan(first, std::min(bucket, run.size() - first)), params);
    }
  }

  void quantize(std::span<const float> x, uint8_t* codes, const float*) {
    elementCodes(x, codes);
  }
  void elementCodes(std::span<const float> x, uint8_t* codes) {
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
