// Every kernel compiled per instruction set (common/simd.h) gives the scalar path's bits on the
// AVX2 and AVX-512 paths, each forced in turn: the half conversions on every half and around
// every rounding boundary of the floats, and every quantized codec's encoding and decoding, on
// inputs with NaN, infinities, subnormals and signed zeros, at sizes 0, 1, odd and large; and the
// top-k selections' gathering pass and MSTopK's mean and max.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "codec_checks.h"
#include "common/half.h"
#include "common/random.h"
#include "common/simd.h"
#include "compress/bit_pack.h"
#include "compress/registry.h"
#include "compress/select.h"
#include "compress/spec.h"
#include "compress/threshold_select.h"
#include "exchange_harness.h"

namespace gradsync {
namespace {

using testing::gaussian;

// The paths above scalar that this CPU can run; the test says which it could not check.
std::vector<simd::Path> fasterPaths() {
  std::vector<simd::Path> paths;
  for (simd::Path path : {simd::Path::kAvx2, simd::Path::kAvx512}) {
    if (static_cast<int>(path) <= static_cast<int>(simd::supported())) paths.push_back(path);
  }
  if (paths.size() < 2) {
    std::printf("note: this CPU supports %s at most; wider paths not checked\n",
                simd::name(simd::supported()));
  }
  return paths;
}

template <class T>
void expectSameBits(const std::vector<T>& expected, const std::vector<T>& actual,
                    const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::memcmp(&expected[i], &actual[i], sizeof(T)) != 0) {
      FAIL() << what << ": element " << i << " of " << expected.size() << " differs";
    }
  }
}

float floatOf(uint32_t bits) {
  return std::bit_cast<float>(bits);
}

// Floats that exercise every rounding decision of float -> half: each half's value, the
// midpoints between neighbouring halves and the floats either side of them (ties to even),
// the subnormal and overflow ranges, NaNs with payloads, and a sweep of all bit patterns.
std::vector<float> halfBoundaryFloats() {
  std::vector<float> x;
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float here = floatFromHalf(static_cast<uint16_t>(h));
    const float next = floatFromHalf(static_cast<uint16_t>(h + 1));
    const float mid = here + (next - here) / 2;  // exact: a half has 11 significant bits
    for (float v : {here, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      x.push_back(v);
      x.push_back(-v);
    }
  }
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0x7fbfffffu, 0x7f802000u, 0xffc12345u}) {
    x.push_back(floatOf(nan));
  }
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) {
    x.push_back(floatOf(static_cast<uint32_t>(bits)));
  }
  return x;
}

TEST(SimdPaths, HalfFromFloatEqualsScalarAroundEveryRoundingBoundary) {
  const std::vector<float> x = halfBoundaryFloats();
  std::vector<uint16_t> expected(x.size());
  for (size_t i = 0; i < x.size(); ++i) expected[i] = halfFromFloat(x[i]);
  for (simd::Path path : fasterPaths()) {
    simd::ScopedPath forced(path);
    for (size_t offset : {size_t{0}, size_t{3}}) {  // a misaligned start and an odd tail
      std::vector<uint16_t> actual(x.size() - offset);
      halfFromFloat(x.data() + offset, actual.data(), actual.size());
      expectSameBits(std::vector<uint16_t>(expected.begin() + offset, expected.end()), actual,
                     std::string("halfFromFloat on ") + simd::name(path));
    }
  }
}

TEST(SimdPaths, FloatFromHalfAndAddHalvesEqualScalarOnEveryHalf) {
  std::vector<uint16_t> halves(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<float> expected(halves.size());
  for (size_t i = 0; i < halves.size(); ++i) expected[i] = floatFromHalf(halves[i]);
  // Every half added to a shuffled partner (a multiplicative permutation of 2^16).
  std::vector<uint16_t> partners(halves.size()), sums(halves);
  for (uint32_t h = 0; h < 0x10000; ++h) partners[h] = static_cast<uint16_t>(h * 40503u + 7);
  for (size_t i = 0; i < sums.size(); ++i) {
    sums[i] = halfFromFloat(floatFromHalf(sums[i]) + floatFromHalf(partners[i]));
  }
  for (simd::Path path : fasterPaths()) {
    simd::ScopedPath forced(path);
    std::vector<float> actual(halves.size() - 1);  // odd: the tail takes the scalar loop
    floatFromHalf(halves.data() + 1, actual.data(), actual.size());
    expectSameBits(std::vector<float>(expected.begin() + 1, expected.end()), actual,
                   std::string("floatFromHalf on ") + simd::name(path));
    std::vector<uint16_t> added(halves);
    addHalves(added.data(), partners.data(), added.size());
    expectSameBits(sums, added, std::string("addHalves on ") + simd::name(path));
  }
}

// xoshiro128+ one lane at a time, as its authors define it (the reference for LaneUniforms).
struct Xoshiro128Plus {
  uint32_t s[4];
  float next() {
    const uint32_t result = s[0] + s[3];
    const uint32_t t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = std::rotl(s[3], 11);
    return static_cast<float>(result >> 8) / 16777216.0f;
  }
};

// One stream filled in pieces of every awkward size gives, on the scalar path, value 16k + j from
// lane j's k-th output (a piece's unused tail dropped), and the same bits on every faster path.
TEST(SimdPaths, LaneUniformsEqualTheDefinitionOnEveryPath) {
  constexpr size_t kLanes = rng::LaneUniforms::kLanes;
  const std::vector<size_t> pieces = {0, 1, 15, 16, 17, 4097, 3};
  std::vector<Xoshiro128Plus> lanes(kLanes);
  for (size_t j = 0; j < kLanes; ++j) {
    const uint64_t first = rng::splitMix64(99 + 2 * j * 0x9E3779B97F4A7C15ull);
    const uint64_t second = rng::splitMix64(99 + (2 * j + 1) * 0x9E3779B97F4A7C15ull);
    lanes[j] = {{static_cast<uint32_t>(first), static_cast<uint32_t>(first >> 32),
                 static_cast<uint32_t>(second), static_cast<uint32_t>(second >> 32)}};
  }
  std::vector<std::vector<float>> expected;
  {
    simd::ScopedPath scalar(simd::Path::kScalar);
    rng::LaneUniforms stream(99);
    for (size_t n : pieces) {
      std::vector<float> u(n + kLanes - 1, -1.0f);
      stream.fill(u.data(), n);
      for (size_t i = 0; i < n; i += kLanes) {
        for (size_t j = 0; j < kLanes; ++j) ASSERT_EQ(u[i + j], lanes[j].next()) << n << " " << i;
      }
      expected.push_back(u);
    }
  }
  for (simd::Path path : fasterPaths()) {
    simd::ScopedPath forced(path);
    rng::LaneUniforms stream(99);
    for (size_t p = 0; p < pieces.size(); ++p) {
      std::vector<float> actual(pieces[p] + kLanes - 1, -1.0f);
      stream.fill(actual.data(), pieces[p]);
      expectSameBits(expected[p], actual, std::string("LaneUniforms on ") + simd::name(path));
    }
  }
}

// Uniform on [0, 1): over 2^20 values the mean is 1/2 and each tenth of the range holds a tenth
// of them, both within 0.0015 (five standard deviations); reseeding restarts the stream.
TEST(SimdPaths, LaneUniformsAreUniformAndReseedable) {
  constexpr size_t n = size_t{1} << 20;
  std::vector<float> u(n + rng::LaneUniforms::kLanes - 1);
  rng::LaneUniforms stream(7);
  stream.fill(u.data(), n);
  double sum = 0;
  std::vector<size_t> tenths(10);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_GE(u[i], 0.0f);
    ASSERT_LT(u[i], 1.0f);
    sum += u[i];
    ++tenths[static_cast<size_t>(u[i] * 10)];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.0015);
  for (size_t count : tenths) EXPECT_NEAR(static_cast<double>(count) / n, 0.1, 0.0015);
  std::vector<float> again(2 * rng::LaneUniforms::kLanes);
  stream.seed(7);
  stream.fill(again.data(), again.size());
  EXPECT_TRUE(std::equal(again.begin(), again.end(), u.begin()));
}

TEST(SimdPaths, BitPackingEqualsScalarAtEveryWidth) {
  std::mt19937_64 random(3);
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{4101}}) {
      std::vector<uint8_t> codes(n);  // whole bytes: packing must ignore the high bits
      for (uint8_t& c : codes) c = static_cast<uint8_t>(random());
      std::vector<uint8_t> stream(packedBytes(n, bits));
      for (uint8_t& b : stream) b = static_cast<uint8_t>(random());
      std::vector<uint8_t> packed(stream.size()), unpacked(n);
      {
        simd::ScopedPath scalar(simd::Path::kScalar);
        packBits(codes, bits, packed.data());
        unpackBits(stream.data(), bits, unpacked);
      }
      for (simd::Path path : fasterPaths()) {
        simd::ScopedPath forced(path);
        const std::string what =
            std::to_string(bits) + " bits, " + std::to_string(n) + " codes on " + simd::name(path);
        std::vector<uint8_t> myPacked(stream.size()), myUnpacked(n);
        packBits(codes, bits, myPacked.data());
        unpackBits(stream.data(), bits, myUnpacked);
        expectSameBits(packed, myPacked, "packBits, " + what);
        expectSameBits(unpacked, myUnpacked, "unpackBits, " + what);
      }
    }
  }
}

// A gradient-like buffer with the awkward values sprinkled in: subnormals, signed zeros, values
// at the top of float's range; with `nonFinite`, NaN and infinities too (whose buckets decode
// as NaN on every path alike).
std::vector<float> awkwardInput(size_t n, uint64_t seed, bool nonFinite) {
  std::vector<float> x = gaussian(n, seed, 0.01f);
  for (size_t i = 0; i < n; i += 97) x[i] = (i / 97) % 2 == 0 ? 1e-40f : -0.0f;
  for (size_t i = 50; i < n; i += 1009) x[i] = 0.0f;
  for (size_t i = 31; i < n; i += 4001) x[i] = (i % 2 == 0 ? 1 : -1) * 3e38f;
  if (nonFinite && n > 10) {
    x[n / 2] = std::numeric_limits<float>::quiet_NaN();
    x[n / 3] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// Values whose sums in double round differently in another order, and visibly so in float: ones,
// 2^-24 (1 + 2^-24 lies halfway between two floats) and 2^-56 (below half a double's ulp at 1,
// though 2^-53 or more when several are summed first), with random signs. A codec that sums a
// bucket in another order than the scalar path gives other bits here (gaussian(n, seed, 0.01),
// whose sums in double are exact, cannot tell).
std::vector<float> roundingSensitiveInput(size_t n, uint64_t seed) {
  const float values[] = {1.0f, 0x1p-24f, 0x1p-56f, 0x1p-56f};
  std::mt19937_64 random(seed);
  std::vector<float> x(n);
  for (float& v : x) {
    const uint64_t r = random();
    v = (r & 4 ? -1.0f : 1.0f) * values[r & 3];
  }
  return x;
}

// The unit: two tensors (buckets never straddle them), or one for tiny sizes.
std::vector<TensorShape> unitOf(size_t n) {
  if (n < 2) return {tensorShape("t", {static_cast<int64_t>(n)})};
  const auto first = static_cast<int64_t>(n / 3);
  return {tensorShape("a", {first}), tensorShape("b", {static_cast<int64_t>(n) - first})};
}

struct Coded {
  std::vector<uint8_t> bytes;
  std::vector<float> decoded;
};

Coded codeOnce(const std::string& text, const std::vector<float>& x) {
  const CompressSpec spec = CompressSpec::parse(text);
  const std::vector<TensorShape> unit = unitOf(x.size());
  std::unique_ptr<Compressor> codec = findMethod(spec.method).make(spec.args, unit);
  Coded out;
  out.bytes = testing::encodeOnce(*codec, x, 12345);
  out.decoded.assign(x.size(), 0.25f);  // decodeAdd adds
  testing::asCodec(*codec).decodeAdd(out.bytes, out.decoded);
  return out;
}

TEST(SimdPaths, QuantizedCodecsEncodeAndDecodeTheScalarBits) {
  const std::vector<std::string> methods = {"qsgd:16",           "qsgd:127,bucket=0",
                                            "qsgd:1,bucket=7",   "terngrad",
                                            "terngrad,clip=0",   "onebit",
                                            "onebit,bucket=512", "onebit,bucket=8",
                                            "onebit,bucket=24",  "onebit,bucket=0",
                                            "signsgd",           "signsgd,bucket=5",
                                            "twobit:0.5",        "rtn:4",
                                            "rtn:2,bucket=33"};
  const std::vector<simd::Path> paths = fasterPaths();
  for (const std::string& method : methods) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{5}, size_t{4097}, size_t{70001}}) {
      for (const char* kind : {"awkward", "awkward, NaN/inf", "rounding-sensitive"}) {
        const std::string input = kind;
        const std::vector<float> x = input == "rounding-sensitive"
                                         ? roundingSensitiveInput(n, n + 1)
                                         : awkwardInput(n, n + 1, input != "awkward");
        Coded expected;
        {
          simd::ScopedPath scalar(simd::Path::kScalar);
          expected = codeOnce(method, x);
        }
        for (simd::Path path : paths) {
          simd::ScopedPath forced(path);
          const Coded actual = codeOnce(method, x);
          const std::string what =
              method + " on " + simd::name(path) + ", " + std::to_string(n) + " elements, " + input;
          expectSameBits(expected.bytes, actual.bytes, what + ": encoding");
          expectSameBits(expected.decoded, actual.decoded, what + ": decoding");
        }
      }
    }
  }
}

// The top-k selections' one-pass gathering (compress/select_gather.h) and MSTopK's mean and max:
// the scalar path's indices and statistics on every path, sampled path included (from 2^18
// elements), at sizes that leave a tail off the 16-lane groups, with and without NaN and
// infinities (which send MSTopK to exact top-k by magnitude).
TEST(SimdPaths, TopKSelectionsAndMagnitudeStatsEqualScalar) {
  const std::vector<simd::Path> paths = fasterPaths();
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1025}, size_t{70001},
                   (size_t{1} << 18) + 13, size_t{1'000'003}}) {
    for (const char* shape : {"gaussian", "awkward", "awkward, NaN/inf"}) {
      const std::string kind = shape;
      const std::vector<float> x = kind == "gaussian" ? gaussian(n, n + 7, 0.01f)
                                                      : awkwardInput(n, n + 7, kind != "awkward");
      const std::string input = std::to_string(n) + " elements, " + kind;
      // Sampled: whether both selections took their one pass (the gathering kernel's).
      auto run = [&](std::vector<uint32_t>& top, std::vector<uint32_t>& ms,
                     std::vector<float>& stats, bool& sampled) {
        const MagnitudeStats m = magnitudeStats(x);
        stats = {m.mean, m.max, m.finite ? 1.0f : 0.0f};
        TopKSelector selector;
        selector.selectByMagnitude(x, selectionCount(n, 0.01), top);
        ThresholdSelector threshold(20);
        threshold.select(x, selectionCount(n, 0.01), ms);
        sampled = selector.lastSampled() && threshold.lastOnePass();
      };
      std::vector<uint32_t> top, ms;
      std::vector<float> stats;
      bool sampled = false;
      {
        simd::ScopedPath scalar(simd::Path::kScalar);
        run(top, ms, stats, sampled);
      }
      std::vector<uint32_t> reference;
      selectTopKBySort(x, selectionCount(n, 0.01), reference);
      ASSERT_EQ(top, reference) << input << ": scalar top-k against sorting";
      if (kind == "gaussian") {
        EXPECT_EQ(sampled, n >= (size_t{1} << 18)) << input << ": the one-pass paths ran";
      }
      for (simd::Path path : paths) {
        simd::ScopedPath forced(path);
        std::vector<uint32_t> pathTop, pathMs;
        std::vector<float> pathStats;
        bool pathSampled = false;
        run(pathTop, pathMs, pathStats, pathSampled);
        const std::string what = std::string(simd::name(path)) + ", " + input;
        EXPECT_EQ(pathTop, top) << what << ": top-k";
        EXPECT_EQ(pathMs, ms) << what << ": mstopk";
        EXPECT_EQ(pathSampled, sampled) << what;
        expectSameBits(stats, pathStats, what + ": mean, max, finite");
      }
    }
  }
}

}  // namespace
}  // namespace gradsync
