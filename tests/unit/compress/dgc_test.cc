// DGC against naive per-element references: with m = 0 and the whole tensor sampled it is
// top-k with error feedback; momentum correction and masking over several steps; masking and
// the threshold's selection on a sampled million-element tensor; the warm-up schedule; local
// clipping; every size through the all-gather; malformed encodings; parameter validation.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include <gtest/gtest.h>

#include "common/state_bytes.h"
#include "compress/impl/dgc.h"
#include "compress/impl/methods.h"
#include "compress/sparse.h"
#include "exchange_harness.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using methods::Dgc;
using methods::DgcOptions;
using testing::gaussian;
using testing::runExchange;

size_t dgcCount(double density, size_t n) {
  return n == 0 ? 0 : std::min<size_t>(n, std::max<long long>(1, std::llround(density * n)));
}

// Indices of the k largest |x| (stable sort: ties to the lower index).
std::vector<uint32_t> naiveTopIndices(const std::vector<float>& x, size_t k) {
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  order.resize(k);
  return order;
}

// One rank's DGC state, element by element, with an exact top-k instead of the sampled threshold
// (what DGC computes when the sample is the whole tensor and magnitudes are distinct).
struct NaiveDgc {
  float momentum;
  double density;
  std::vector<float> u, v;

  std::vector<float> step(const std::vector<float>& g) {
    if (u.empty()) u.assign(g.size(), 0.0f), v.assign(g.size(), 0.0f);
    for (size_t i = 0; i < g.size(); ++i) {
      u[i] = momentum * u[i] + g[i];
      v[i] = v[i] + u[i];
    }
    std::vector<float> sent(g.size(), 0.0f);
    for (uint32_t i : naiveTopIndices(v, dgcCount(density, g.size()))) {
      sent[i] = v[i];
      u[i] = v[i] = 0.0f;
    }
    return sent;
  }
};

// Plain top-k with error feedback: the residual keeps whatever was not sent.
struct NaiveTopKWithErrorFeedback {
  double density;
  std::vector<float> residual;

  std::vector<float> step(const std::vector<float>& g) {
    if (residual.empty()) residual.assign(g.size(), 0.0f);
    std::vector<float> corrected(g.size()), sent(g.size(), 0.0f);
    for (size_t i = 0; i < g.size(); ++i) corrected[i] = residual[i] + g[i];
    for (uint32_t i : naiveTopIndices(corrected, dgcCount(density, g.size())))
      sent[i] = corrected[i];
    for (size_t i = 0; i < g.size(); ++i) residual[i] = corrected[i] - sent[i];
    return sent;
  }
};

std::unique_ptr<Compressor> makeDgc(double density, double momentum = 0,
                                    std::vector<std::pair<std::string, std::string>> keys = {},
                                    size_t n = 4096) {
  MethodArgs args;
  args.value = density;
  args.hasValue = true;
  args.momentum = momentum;
  args.keys = std::move(keys);
  TensorShape shape = testing::tensorShape(n);
  return methods::makeDgc(args, {&shape, 1});
}

std::unique_ptr<Compressor> makeWholeSampleDgc(double density, double momentum, size_t n) {
  DgcOptions options;
  options.density = density;
  options.momentum = momentum;
  options.sampleFraction = 1.0;
  return std::make_unique<Dgc>(options, n);
}

// Runs `steps` exchanges of P ranks and checks the last one against per-rank naive models: the
// average of what they sent, in rank order, and each rank's own part.
template <typename Naive>
void expectLikeNaive(int ranks, size_t n, int steps, Naive model,
                     const std::function<std::unique_ptr<Compressor>()>& make) {
  auto input = [&](int step, int rank) { return gaussian(n, 100 * step + rank); };
  std::vector<Naive> models(ranks, model);
  std::vector<std::vector<float>> sent(ranks);
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < ranks; ++r) sent[r] = models[r].step(input(s, r));
  }
  std::vector<float> average(n, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    for (size_t i = 0; i < n; ++i) average[i] += sent[r][i];
  }
  for (float& a : average) a *= 1.0f / static_cast<float>(ranks);
  auto got = runExchange(ranks, make, input, steps);
  for (int r = 0; r < ranks; ++r) {
    SCOPED_TRACE(::testing::Message() << ranks << " ranks, n " << n << ", rank " << r);
    ASSERT_EQ(got[r].sent, sent[r]);
    ASSERT_EQ(got[r].result, average);
  }
}

TEST(Dgc, WithoutMomentumAndSamplingEverythingIsTopKWithErrorFeedback) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n : {size_t{1}, size_t{1001}, size_t{20'000}}) {
      expectLikeNaive(ranks, n, 4, NaiveTopKWithErrorFeedback{0.01, {}},
                      [&] { return makeWholeSampleDgc(0.01, 0, n); });
    }
    // Through the factory: a tensor no larger than the minimum sample is sampled whole.
    expectLikeNaive(ranks, 300, 4, NaiveTopKWithErrorFeedback{0.05, {}},
                    [&] { return makeDgc(0.05, 0, {}, 300); });
  }
}

TEST(Dgc, MomentumCorrectionAndMaskingMatchANaiveModelOverSteps) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n : {size_t{1}, size_t{1001}}) {
      expectLikeNaive(ranks, n, 6, NaiveDgc{0.9f, 0.1, {}, {}},
                      [&] { return makeWholeSampleDgc(0.1, 0.9, n); });
    }
  }
}

// A sampled threshold on a large tensor: the sent set is a top set of |v| (nothing left behind
// is larger than anything sent) of 1 to 2k elements, the sent values are v, and u and v are
// cleared exactly there and untouched elsewhere.
TEST(Dgc, SampledSelectionSendsATopSetAndMasksExactlyIt) {
  const size_t n = size_t{1} << 20;
  const float m = 0.9f;
  testing::runWithTransports(testing::TransportKind::kLoopback, 1, [&](Transport& t) {
    auto compressor = makeDgc(0.001, m, {}, n);
    auto& dgc = dynamic_cast<Dgc&>(*compressor);
    const size_t k = dgcCount(0.001, n);
    ExchangeStats stats;
    for (int s = 0; s < 3; ++s) {
      std::vector<float> grad = gaussian(n, 10 * s + t.rank()), sent(n);
      std::vector<float> u(dgc.momentumBuffer().begin(), dgc.momentumBuffer().end());
      std::vector<float> v(dgc.velocity().begin(), dgc.velocity().end());
      for (size_t i = 0; i < n; ++i) {
        u[i] = m * u[i] + grad[i];
        v[i] = v[i] + u[i];
      }
      ExchangeContext context{t, {}, static_cast<uint64_t>(s), 3};
      dgc.exchange(context, grad, sent, stats);
      size_t count = 0;
      float smallestSent = std::numeric_limits<float>::infinity(), largestKept = 0;
      for (size_t i = 0; i < n; ++i) {
        if (sent[i] != 0.0f) {  // v is never exactly 0 here: gaussian inputs
          ++count;
          smallestSent = std::min(smallestSent, std::fabs(v[i]));
          ASSERT_EQ(sent[i], v[i]) << i;
          ASSERT_EQ(dgc.velocity()[i], 0.0f) << i;
          ASSERT_EQ(dgc.momentumBuffer()[i], 0.0f) << i;
        } else {
          largestKept = std::max(largestKept, std::fabs(v[i]));
          ASSERT_EQ(dgc.velocity()[i], v[i]) << i;
          ASSERT_EQ(dgc.momentumBuffer()[i], u[i]) << i;
        }
      }
      EXPECT_GT(smallestSent, largestKept) << "step " << s;
      EXPECT_GE(count, k / 4) << "step " << s;  // the estimate is near k, not merely bounded
      EXPECT_LE(count, 2 * k) << "step " << s;
      EXPECT_LE(sparseBytes(count), dgc.encodedBytes(n));
    }
  });
}

// Half the elements tie at the largest magnitude, so the sample's quantile lets through far
// more than 2k of them: the exact top-k among the selected keeps k, the lowest indices.
TEST(Dgc, FallsBackToTheExactTopKWhenTheThresholdSelectsTooMany) {
  const size_t n = 200'000;
  std::vector<float> grad = gaussian(n, 4, 0.01f);
  for (size_t i = 0; i < n; i += 2) grad[i] = i % 4 == 0 ? 1.0f : -1.0f;
  auto got = runExchange(
      1, [&] { return makeDgc(0.001, 0, {}, n); }, [&](int, int) { return grad; });
  const size_t k = dgcCount(0.001, n);
  std::vector<float> expected(n, 0.0f);
  for (size_t i = 0; i < 2 * k; i += 2) expected[i] = grad[i];
  EXPECT_EQ(got[0].sent, expected);
}

TEST(Dgc, WarmupRaisesTheSparsityInFourStages) {
  DgcOptions options;
  options.density = 0.001;
  options.warmupSteps = 8;
  Dgc dgc(options, 0);
  const double expected[] = {0.25, 0.25, 0.0625, 0.0625, 0.015625, 0.015625, 0.004, 0.004, 0.001};
  for (uint64_t step = 0; step < 9; ++step) EXPECT_EQ(dgc.density(step), expected[step]) << step;
  EXPECT_EQ(dgc.density(1'000'000), 0.001);
  options.warmupSteps = 10;  // stages of 3, 2, 3 and 2 steps
  const double uneven[] = {0.25,     0.25,     0.25,  0.0625, 0.0625, 0.015625,
                           0.015625, 0.015625, 0.004, 0.004,  0.001};
  Dgc ten(options, 0);
  for (uint64_t step = 0; step < 11; ++step) EXPECT_EQ(ten.density(step), uneven[step]) << step;
  options.density = 0.01;  // a stage sparser than R is capped at R
  options.warmupSteps = 4;
  Dgc dense(options, 0);
  EXPECT_EQ(dense.density(2), 0.015625);
  EXPECT_EQ(dense.density(3), 0.01);
  options.warmupSteps = 0;
  EXPECT_EQ(Dgc(options, 0).density(0), 0.01);

  // What is actually sent per step, with an exact threshold (the whole tensor sampled).
  const size_t n = 4000;
  options.density = 0.001;
  options.warmupSteps = 8;
  options.sampleFraction = 1.0;
  testing::runWithTransports(testing::TransportKind::kLoopback, 1, [&](Transport& t) {
    Dgc counted(options, n);
    ExchangeStats stats;
    for (int s = 0; s < 10; ++s) {
      std::vector<float> grad = gaussian(n, s), sent(n);
      ExchangeContext context{t, {}, static_cast<uint64_t>(s), 1};
      counted.exchange(context, grad, sent, stats);
      size_t count = std::count_if(sent.begin(), sent.end(), [](float x) { return x != 0.0f; });
      EXPECT_EQ(count, dgcCount(s < 8 ? expected[s] : 0.001, n)) << "step " << s;
    }
  });
}

TEST(Dgc, ClippingBoundsTheNormBeforeAccumulation) {
  const size_t n = 100'003;
  const double clip = 2.0;
  auto run = [&](float scale) {
    // R = 1 sends everything, so `sent` is the clipped gradient itself.
    auto got = runExchange(
        1,
        [&] {
          return makeDgc(1.0, 0, {{"clip", "2"}}, n);
        },
        [&](int, int) { return gaussian(n, 9, scale); });
    return got[0].sent;
  };
  std::vector<float> input = gaussian(n, 9, 1.0f);
  std::vector<float> clipped = run(1.0f);  // norm about sqrt(n) = 316: scaled down
  double norm = 0, inputNorm = 0;
  for (size_t i = 0; i < n; ++i) {
    norm += static_cast<double>(clipped[i]) * clipped[i];
    inputNorm += static_cast<double>(input[i]) * input[i];
  }
  // Each element is rounded once after scaling: the norm is clip to float precision.
  EXPECT_NEAR(std::sqrt(norm), clip, clip * 1e-6);
  const double factor = clip / std::sqrt(inputNorm);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_NEAR(clipped[i], input[i] * factor, std::fabs(input[i] * factor) * 1e-6) << i;
  }
  // A gradient already within the bound passes unchanged.
  std::vector<float> small = gaussian(n, 9, 0.001f);  // norm about 0.32
  EXPECT_EQ(run(0.001f), small);
}

TEST(Dgc, AveragesWhatEveryRankSentForEverySize) {
  for (int ranks : {1, 2, 3}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{1001}, (size_t{1} << 20) + 5}) {
      if (n > 1001 && ranks < 3) continue;     // the large size once, with the most ranks
      std::vector<std::vector<float>> inputs;  // generated once: the normal draws are slow
      for (int i = 0; i < 2 * ranks; ++i) inputs.push_back(gaussian(n, i));
      auto input = [&](int step, int rank) { return inputs[step * ranks + rank]; };
      const size_t bound = makeDgc(0.001, 0.9, {}, n)->encodedBytes(n);
      auto got = runExchange(
          ranks, [&] { return makeDgc(0.001, 0.9, {}, n); }, input, 2);
      std::vector<float> average(n, 0.0f);
      for (int r = 0; r < ranks; ++r) {
        for (size_t i = 0; i < n; ++i) average[i] += got[r].sent[i];
      }
      for (float& a : average) a *= 1.0f / static_cast<float>(ranks);
      for (int r = 0; r < ranks; ++r) {
        SCOPED_TRACE(::testing::Message() << ranks << " ranks, n " << n << ", rank " << r);
        ASSERT_EQ(got[r].result, average);
        size_t count = std::count_if(got[r].sent.begin(), got[r].sent.end(),
                                     [](float x) { return x != 0.0f; });
        ASSERT_GE(count, n == 0 ? 0u : 1u);
        ASSERT_LE(sparseBytes(count), bound);
      }
      // k = n = 1: step 0 sent everything and masking cleared u, so step 1 sends its input alone.
      if (n == 1) {
        EXPECT_EQ(got[0].sent[0], input(1, 0)[0]);
      }
    }
  }
}

// The buffers come with the first encode or load (simulate and tune build compressors only to
// ask their sizes): a fresh compressor saves the zeros an allocated one holds, and one loaded
// from that state encodes as a fresh one does.
TEST(Dgc, AFreshCompressorsStateIsZeroBuffersAndLoadsIntoAnother) {
  const size_t n = 1000;
  auto save = [](methods::Dgc& dgc) {
    StateWriter out;
    dgc.saveState(out);
    return out.take();
  };
  auto fresh = makeDgc(0.05, 0.9, {}, n);
  auto allocated = makeDgc(0.05, 0.9, {}, n);
  auto& touched = dynamic_cast<Dgc&>(*allocated);
  EXPECT_EQ(touched.velocity().size(), n);  // allocates: zeros
  const std::vector<uint8_t> state = save(dynamic_cast<Dgc&>(*fresh));
  EXPECT_EQ(state, save(touched));

  auto loaded = makeDgc(0.05, 0.9, {}, n);
  StateReader in(state, "dgc state");
  loaded->loadState(in);
  in.expectEnd();
  std::vector<uint8_t> fromLoaded, fromFresh;
  dynamic_cast<Dgc&>(*loaded).encode(gaussian(n, 3), fromLoaded, 1);
  dynamic_cast<Dgc&>(*fresh).encode(gaussian(n, 3), fromFresh, 1);
  EXPECT_EQ(fromLoaded, fromFresh);
}

TEST(Dgc, RejectsMalformedEncodings) {
  const size_t n = 100;
  auto compressor = makeDgc(0.05, 0, {}, n);
  auto& dgc = dynamic_cast<Dgc&>(*compressor);
  std::vector<uint8_t> good;
  dgc.encode(gaussian(n, 1), good, 1);
  std::vector<float> out(n, 0.0f);
  EXPECT_NO_THROW(dgc.decodeAdd(good, out));
  std::vector<uint8_t> truncated(good.begin(), good.end() - 1);
  EXPECT_THROW(dgc.decodeAdd(truncated, out), ProtocolError);
  EXPECT_THROW(dgc.decodeAdd(std::span<const uint8_t>(good.data(), 3), out), ProtocolError);
  std::vector<uint8_t> outside;
  std::vector<uint32_t> indices = {3, 100};
  std::vector<float> values = {1.0f, 2.0f};
  encodeSparse(indices, values, outside);
  EXPECT_THROW(dgc.decodeAdd(outside, out), ProtocolError);
  std::vector<uint8_t> overcounted = good;
  overcounted[0] += 1;
  EXPECT_THROW(dgc.decodeAdd(overcounted, out), ProtocolError);
}

TEST(Dgc, RejectsOutOfRangeParameters) {
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    EXPECT_THROW(makeDgc(bad), ConfigError) << bad;
  }
  for (double bad : {1.0, -0.1, std::nan("")}) {
    EXPECT_THROW(makeDgc(0.01, bad), ConfigError) << bad;
  }
  for (const char* bad : {"-1", "inf", "nan"}) {
    EXPECT_THROW(makeDgc(0.01, 0, {{"clip", bad}}), ConfigError) << bad;
  }
  for (const char* bad : {"-1", "2.5", "1e300"}) {
    EXPECT_THROW(makeDgc(0.01, 0, {{"warmup", bad}}), ConfigError) << bad;
  }
  EXPECT_NO_THROW(makeDgc(0.001, 0.9, {{"warmup", "1000"}, {"clip", "5"}}));
  try {
    makeDgc(0.0);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dgc:R needs 0 < R <= 1"), std::string::npos);
  }
}

}  // namespace
}  // namespace gradsync
