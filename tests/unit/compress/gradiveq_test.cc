// gradiveq:D against a deliberately naive reference: the average of the dense steps, its slice
// covariance summed in double loops, its top-D eigenvectors, and the projection U·Uᵀ of every
// slice; plus the schedule of dense steps, linearity (Σ U·c_i = U·Σ c_i), exactness for D = M and
// for gradients in a D-dimensional subspace, agreement of ranks on U, error feedback, sizes 0,
// 1, odd and large, parameter validation and mismatched units.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include "common/random.h"
#include "compress/error_feedback.h"
#include "compress/impl/methods.h"
#include "compress/matrix.h"
#include "exchange_harness.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::maxAbs;
using testing::RankExchange;

struct Config {
  double dims = 4;
  double slice = 32;
  double train = 100;
  double refresh = 1000;
};

std::unique_ptr<Compressor> makeGradiVeQ(const Config& c, size_t elements) {
  MethodArgs args;
  args.value = c.dims;
  args.hasValue = true;
  args.keys = {{"slice", std::to_string(c.slice)},
               {"train", std::to_string(c.train)},
               {"refresh", std::to_string(c.refresh)}};
  TensorShape unit = testing::tensorShape(elements);
  return methods::makeGradiVeQ(args, {&unit, 1});
}

// Uniform in [-scale, scale), hashed per element: cheap for megabyte inputs.
std::vector<float> uniform(size_t n, uint64_t seed, float scale = 1.0f) {
  std::vector<float> out(n);
  const uint64_t base = rng::mixSeed(seed, 23);
  for (size_t i = 0; i < n; ++i) {
    out[i] = scale * (2.0f * rng::unitFloat(rng::splitMix64(base + i)) - 1.0f);
  }
  return out;
}

// Slices of m values in the span of the columns of `basis` (m x d), plus `noise` uniform.
std::vector<float> inSubspace(size_t n, size_t m, const std::vector<float>& basis, size_t d,
                              uint64_t seed, float noise) {
  std::vector<float> out = noise == 0 ? std::vector<float>(n, 0.0f) : uniform(n, seed + 1, noise);
  const std::vector<float> coefficients = uniform((n + m - 1) / m * d, seed);
  for (size_t i = 0; i < n; ++i) {
    const size_t s = i / m, j = i % m;
    for (size_t k = 0; k < d; ++k) out[i] += basis[j * d + k] * coefficients[s * d + k];
  }
  return out;
}

uint64_t seedOf(int step, int rank) {
  return 1000 * static_cast<uint64_t>(step) + rank;
}

// Runs `steps` exchanges per rank; returns every step's outputs, indexed [step][rank].
std::vector<std::vector<RankExchange>> runSteps(
    int ranks, const std::function<std::unique_ptr<Compressor>()>& make,
    const std::function<std::vector<float>(int step, int rank)>& inputs, int steps) {
  std::vector<std::vector<RankExchange>> out(steps, std::vector<RankExchange>(ranks));
  testing::runWithTransports(testing::TransportKind::kLoopback, ranks, [&](Transport& t) {
    auto compressor = make();
    ExchangeStats stats;
    for (int s = 0; s < steps; ++s) {
      std::vector<float> grad = inputs(s, t.rank());
      std::vector<float> sent(grad.size());
      ExchangeContext context{t, {}, static_cast<uint64_t>(s), 7};
      compressor->exchange(context, grad, sent, stats);
      out[s][t.rank()] = {std::move(grad), std::move(sent)};
    }
  });
  return out;
}

std::vector<double> average(const std::vector<std::vector<float>>& inputs) {
  std::vector<double> mean(inputs[0].size(), 0.0);
  for (const auto& x : inputs) {
    for (size_t i = 0; i < x.size(); ++i) mean[i] += x[i];
  }
  for (double& v : mean) v /= static_cast<double>(inputs.size());
  return mean;
}

// Naive GradiVeQ: covariance of the averaged dense gradients (slices zero-padded), top-d
// eigenvectors, and the projection of each slice onto them.
class NaiveGradiVeQ {
 public:
  NaiveGradiVeQ(size_t m, size_t d) : m_(m), d_(d), covariance_(m * m, 0.0) {}

  void train(const std::vector<double>& g) {
    for (size_t s = 0; s * m_ < g.size(); ++s) {
      for (size_t i = 0; i < m_; ++i) {
        for (size_t j = 0; j < m_; ++j) covariance_[i * m_ + j] += at(g, s, i) * at(g, s, j);
      }
    }
  }
  void finish() {
    std::vector<double> values;
    linalg::symmetricEigen(covariance_, m_, values, u_);  // row k: k-th eigenvector
  }
  std::vector<double> project(const std::vector<double>& g) const {
    std::vector<double> out(g.size(), 0.0);
    for (size_t s = 0; s * m_ < g.size(); ++s) {
      for (size_t k = 0; k < d_; ++k) {
        double c = 0;
        for (size_t j = 0; j < m_; ++j) c += u_[k * m_ + j] * at(g, s, j);
        for (size_t j = 0; j < m_ && s * m_ + j < g.size(); ++j)
          out[s * m_ + j] += c * u_[k * m_ + j];
      }
    }
    return out;
  }

 private:
  double at(const std::vector<double>& g, size_t s, size_t j) const {
    return s * m_ + j < g.size() ? g[s * m_ + j] : 0.0;
  }
  size_t m_, d_;
  std::vector<double> covariance_, u_;
};

void expectNear(const std::vector<float>& actual, const std::vector<double>& expected,
                double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance) << what << " element " << i;
  }
}

TEST(GradiVeQ, MatchesANaivePcaReference) {
  const size_t n = 1000, m = 32, d = 4;  // 31 slices and a partial one of 8
  const Config config{.dims = 4, .slice = 32, .train = 3, .refresh = 0};
  const auto basis = uniform(m * d, 99);
  auto inputs = [&](int s, int r) { return inSubspace(n, m, basis, d, seedOf(s, r), 0.01f); };
  for (int ranks : {1, 2, 3}) {
    SCOPED_TRACE(ranks);
    auto out = runSteps(
        ranks, [&] { return makeGradiVeQ(config, n); }, inputs, 5);
    NaiveGradiVeQ naive(m, d);
    for (int s = 0; s < 5; ++s) {
      std::vector<std::vector<float>> in;
      for (int r = 0; r < ranks; ++r) in.push_back(inputs(s, r));
      const auto mean = average(in);
      const double scale = maxAbs(in[0]);
      if (s < 3) {
        naive.train(mean);
        if (s == 2) naive.finish();
        for (int r = 0; r < ranks; ++r) {
          expectNear(out[s][r].result, mean, 1e-6 * scale, "dense result");
          ASSERT_EQ(out[s][r].sent, in[r]);
        }
        continue;
      }
      for (int r = 0; r < ranks; ++r) {
        expectNear(out[s][r].result, naive.project(mean), 1e-5 * scale, "result");
        std::vector<double> mine(in[r].begin(), in[r].end());
        expectNear(out[s][r].sent, naive.project(mine), 1e-5 * scale, "sent");
        ASSERT_EQ(out[s][r].result, out[s][0].result) << "ranks disagree";
      }
    }
  }
}

// Step s is dense iff the exchange sent the input itself (a compressed step sends U·Uᵀ·s).
std::set<int> denseSteps(const Config& config, int steps) {
  const size_t n = 100;
  auto out = runSteps(
      2, [&] { return makeGradiVeQ(config, n); },
      [&](int s, int r) { return uniform(n, seedOf(s, r)); }, steps);
  std::set<int> dense;
  for (int s = 0; s < steps; ++s) {
    auto in0 = uniform(n, seedOf(s, 0)), in1 = uniform(n, seedOf(s, 1));
    if (out[s][0].sent != in0) continue;
    EXPECT_EQ(out[s][1].sent, in1) << s;
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(out[s][0].result[i], (in0[i] + in1[i]) / 2, 1e-7) << "step " << s;
    }
    dense.insert(s);
  }
  return dense;
}

TEST(GradiVeQ, DenseStepsHappenExactlyAtTheDocumentedSteps) {
  // train T, then max(1, T/10) dense steps every `refresh` steps (0: never).
  EXPECT_EQ(denseSteps({.train = 5, .refresh = 20}, 45), (std::set<int>{0, 1, 2, 3, 4, 20, 40}));
  std::set<int> expected;
  for (int s = 0; s < 30; ++s) expected.insert(s);
  expected.insert({50, 51, 52, 100, 101, 102});
  EXPECT_EQ(denseSteps({.train = 30, .refresh = 50}, 110), expected);
  EXPECT_EQ(denseSteps({.train = 3, .refresh = 0}, 12), (std::set<int>{0, 1, 2}));
  EXPECT_EQ(denseSteps({.train = 1, .refresh = 2}, 7), (std::set<int>{0, 2, 4, 6}));
}

// Linearity at every size: the decoded sum of codes equals the sum of each rank's decoding.
TEST(GradiVeQ, CompressedSumEqualsTheSumOfDecompressions) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{1000}, (size_t{1} << 20) + 5}) {
    for (int ranks : {1, 2, 3}) {
      if (n > 1000 && ranks < 3) continue;  // large: the 3-rank case is enough (and fast)
      SCOPED_TRACE(::testing::Message() << n << " elements, " << ranks << " ranks");
      auto out = runSteps(
          ranks, [&] { return makeGradiVeQ({.train = 2, .refresh = 0}, n); },
          [&](int s, int r) { return uniform(n, seedOf(s, r)); }, 3);
      std::vector<std::vector<float>> sent;
      for (int r = 0; r < ranks; ++r) sent.push_back(out[2][r].sent);
      const auto mean = average(sent);
      for (int r = 0; r < ranks; ++r) {
        expectNear(out[2][r].result, mean, 1e-5, "result");
        ASSERT_EQ(out[2][r].result, out[2][0].result) << "ranks disagree";
      }
    }
  }
}

TEST(GradiVeQ, FullDimensionalBasisIsExact) {
  const size_t n = 1001;
  for (int ranks : {1, 3}) {
    auto out = runSteps(
        ranks, [&] { return makeGradiVeQ({.dims = 8, .slice = 8, .train = 2}, n); },
        [&](int s, int r) { return uniform(n, seedOf(s, r)); }, 4);
    for (int s = 2; s < 4; ++s) {
      std::vector<std::vector<float>> in;
      for (int r = 0; r < ranks; ++r) in.push_back(uniform(n, seedOf(s, r)));
      for (int r = 0; r < ranks; ++r) {
        expectNear(out[s][r].result, average(in), 1e-5, "result");
        expectNear(out[s][r].sent, std::vector<double>(in[r].begin(), in[r].end()), 1e-5, "sent");
      }
    }
  }
}

// A unit of one element: the covariance has one non-zero entry, whose eigenvector is exact.
TEST(GradiVeQ, SingleElementIsExact) {
  for (int ranks : {1, 2, 3}) {
    auto out = runSteps(
        ranks, [&] { return makeGradiVeQ({.train = 1, .refresh = 0}, 1); },
        [&](int s, int r) {
          return std::vector<float>{0.5f * static_cast<float>(s) - static_cast<float>(r)};
        },
        3);
    double mean = 0;
    for (int r = 0; r < ranks; ++r) mean += 1.0 - r;
    EXPECT_NEAR(out[2][0].result[0], mean / ranks, 1e-6);
  }
}

// Gradients whose slices lie in a D-dimensional subspace are reproduced once U is trained.
TEST(GradiVeQ, TrainedOnASubspaceCompressesExactly) {
  const size_t m = 32, d = 4;
  const auto basis = uniform(m * d, 5);
  for (size_t n : {m * 1000, m * 32768}) {
    for (int ranks : {1, 3}) {
      if (n > m * 1000 && ranks < 3) continue;
      SCOPED_TRACE(::testing::Message() << n << " elements, " << ranks << " ranks");
      auto inputs = [&](int s, int r) { return inSubspace(n, m, basis, d, seedOf(s, r), 0); };
      auto out = runSteps(
          ranks, [&] { return makeGradiVeQ({.train = 5, .refresh = 0}, n); }, inputs, 7);
      for (int s = 5; s < 7; ++s) {
        std::vector<std::vector<float>> in;
        for (int r = 0; r < ranks; ++r) in.push_back(inputs(s, r));
        expectNear(out[s][0].result, average(in), 1e-4, "result");
        expectNear(out[s][0].sent, std::vector<double>(in[0].begin(), in[0].end()), 1e-4, "sent");
        ASSERT_NE(out[s][0].sent, in[0]) << "step " << s << " should be a compressed one";
      }
    }
  }
}

// Every rank computes U from the aggregated gradient: fed one probe, all ranks project it
// bitwise identically (their own `sent` uses their own U).
TEST(GradiVeQ, EveryRankEndsWithTheSameBasis) {
  const size_t n = 4000;
  auto out = runSteps(
      3, [&] { return makeGradiVeQ({.train = 4, .refresh = 0}, n); },
      [&](int s, int r) { return uniform(n, s < 4 ? seedOf(s, r) : 12345); }, 5);
  ASSERT_NE(out[4][0].sent, uniform(n, 12345)) << "step 4 should be a compressed one";
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(out[4][r].sent, out[4][0].sent) << "rank " << r;
    EXPECT_EQ(out[4][r].result, out[4][0].result) << "rank " << r;
  }
}

// Error feedback: a compressed step keeps s - U·Uᵀ·s; a dense step flushes the residual.
TEST(GradiVeQ, ErrorFeedbackKeepsTheProjectionErrorAndDenseStepsFlushIt) {
  const size_t n = 300;
  testing::runWithTransports(testing::TransportKind::kLoopback, 2, [&](Transport& t) {
    ErrorFeedback ef(makeGradiVeQ({.train = 2, .refresh = 4}, n), n);  // dense: 0, 1, 4, 8
    std::vector<double> inputs(n, 0), sent(n, 0);
    ExchangeStats stats;
    for (int s = 0; s < 9; ++s) {
      auto grad = uniform(n, seedOf(s, t.rank()));
      for (size_t i = 0; i < n; ++i) inputs[i] += grad[i];
      std::vector<float> mine(n);
      ExchangeContext context{t, {}, static_cast<uint64_t>(s), 7};
      ef.exchange(context, grad, mine, stats);
      for (size_t i = 0; i < n; ++i) sent[i] += mine[i];
      const bool dense = s < 2 || s % 4 == 0;
      EXPECT_EQ(maxAbs({ef.residual().begin(), ef.residual().end()}) == 0.0, dense) << s;
      for (size_t i = 0; i < n; ++i) ASSERT_NEAR(ef.residual()[i] + sent[i], inputs[i], 1e-5);
    }
  });
}

TEST(GradiVeQ, EncodedBytesAreTheCompressedSize) {
  EXPECT_EQ(makeGradiVeQ({}, 1000)->encodedBytes(1000), 4u * 4 * 32);
  EXPECT_EQ(makeGradiVeQ({.dims = 3, .slice = 16}, 64)->encodedBytes(64), 4u * 3 * 4);
  EXPECT_EQ(makeGradiVeQ({}, 0)->encodedBytes(0), 0u);
  EXPECT_EQ(makeGradiVeQ({}, 1)->encodedBytes(1), 16u);
}

TEST(GradiVeQ, RejectsInvalidParameters) {
  const std::vector<Config> bad = {
      {.dims = 0},      {.dims = 33},    {.dims = 2.5},   {.dims = 9, .slice = 8},
      {.slice = 0},     {.slice = 129},  {.slice = 1.5},  {.train = 0},
      {.train = -3},    {.refresh = 10}, {.refresh = -1}, {.train = 1, .refresh = 1},
      {.refresh = 20.5}};
  for (const Config& c : bad) {
    EXPECT_THROW(makeGradiVeQ(c, 64), ConfigError)
        << c.dims << " " << c.slice << " " << c.train << " " << c.refresh;
  }
  for (const Config& c : std::vector<Config>{{},
                                             {.refresh = 0},
                                             {.refresh = 11},
                                             {.dims = 1, .slice = 1},
                                             {.dims = 128, .slice = 128},
                                             {.train = 1, .refresh = 2}}) {
    EXPECT_NO_THROW(makeGradiVeQ(c, 64));
  }
  TensorShape unit = testing::tensorShape(64);
  EXPECT_NO_THROW(methods::makeGradiVeQ({}, {&unit, 1}));  // the registry's default D
  try {
    makeGradiVeQ({.dims = 40}, 64);
    ADD_FAILURE() << "D > slice accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("gradiveq:D needs an integer 1 <= D <= 32"),
              std::string::npos)
        << e.what();
  }
}

// Ranks that disagree on the unit's size (dense step) or the slice (compressed step).
TEST(GradiVeQ, MismatchedUnitsFailWithProtocolError) {
  for (bool compressed : {false, true}) {
    testing::runWithTransports(
        testing::TransportKind::kLoopback, 2,
        [&](Transport& t) {
          const size_t n = compressed ? 64 : (t.rank() == 0 ? 64 : 96);
          const double slice = compressed && t.rank() == 1 ? 16 : 32;
          auto compressor = makeGradiVeQ({.slice = slice, .train = 1, .refresh = 0}, n);
          ExchangeStats stats;
          auto exchange = [&](uint64_t step) {
            std::vector<float> grad(n, 1.0f), sent(n);
            ExchangeContext context{t, {}, step, 7};
            compressor->exchange(context, grad, sent, stats);
          };
          if (compressed) exchange(0);
          EXPECT_THROW(exchange(1), ProtocolError);
        },
        TransportOptions{.timeout = std::chrono::milliseconds(2000)});
  }
}

}  // namespace
}  // namespace gradsync
