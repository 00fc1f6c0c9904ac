// powersgd:RANK against a deliberately naive reference: the same subspace iteration in double
// with plain loops (P = ΣM·Q, Gram-Schmidt, Q = ΣMᵀ·P / world, M̂ = P·Qᵀ, warm start), seeded as
// the compressor documents; plus the exact path (RANK >= min(rows, cols), biases), convergence
// of the warm start to the best rank-RANK approximation, agreement of ranks, error feedback,
// parameter validation and mismatched units.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "common/random.h"
#include "compress/error_feedback.h"
#include "compress/impl/methods.h"
#include "exchange_harness.h"
#include "gradsync/error.h"
#include "support/transports.h"

namespace gradsync {
namespace {

using testing::gaussian;
using testing::maxAbs;
using testing::runExchange;

constexpr uint64_t kSeed = 7;  // runExchange's default seed

std::unique_ptr<Compressor> makePowerSgd(double rank, const std::vector<TensorShape>& unit) {
  MethodArgs args;
  args.value = rank;
  args.hasValue = true;
  return methods::makePowerSgd(args, unit);
}

TensorShape shape(std::vector<int64_t> dims) {
  size_t elements = 1;
  for (int64_t d : dims) elements *= static_cast<size_t>(d);
  return testing::tensorShape(elements, std::move(dims));
}

size_t unitSize(const std::vector<TensorShape>& unit) {
  size_t n = 0;
  for (const TensorShape& t : unit) n += t.elements;
  return n;
}

// Naive PowerSGD for one compressed tensor (rows x cols), in double.
class NaivePowerSgd {
 public:
  // Q starts as the compressor documents: Qᵀ row-major, uniform in [-1, 1), drawn from
  // mt19937_64 seeded with mixSeed(seed, index of the tensor in the unit).
  NaivePowerSgd(size_t rows, size_t cols, size_t rank, size_t tensorIndex)
      : n_(rows), m_(cols), r_(rank), q_(cols * rank) {
    std::mt19937_64 engine(rng::mixSeed(kSeed, tensorIndex));
    for (size_t k = 0; k < r_; ++k) {
      for (size_t j = 0; j < m_; ++j) q_[j * r_ + k] = 2.0 * rng::unitFloat(engine()) - 1.0;
    }
  }

  // One exchange: inputs[rank] points at each rank's rows x cols values; returns M̂.
  std::vector<double> step(const std::vector<const float*>& inputs) {
    std::vector<double> p(n_ * r_, 0.0), q(m_ * r_, 0.0), out(n_ * m_, 0.0);
    for (const float* x : inputs) {
      for (size_t i = 0; i < n_; ++i) {
        for (size_t j = 0; j < m_; ++j) {
          for (size_t k = 0; k < r_; ++k) p[i * r_ + k] += x[i * m_ + j] * q_[j * r_ + k];
        }
      }
    }
    for (size_t k = 0; k < r_; ++k) {  // classical Gram-Schmidt, twice
      for (int pass = 0; pass < 2; ++pass) {
        for (size_t l = 0; l < k; ++l) {
          double d = 0;
          for (size_t i = 0; i < n_; ++i) d += p[i * r_ + l] * p[i * r_ + k];
          for (size_t i = 0; i < n_; ++i) p[i * r_ + k] -= d * p[i * r_ + l];
        }
      }
      double norm = 0;
      for (size_t i = 0; i < n_; ++i) norm += p[i * r_ + k] * p[i * r_ + k];
      for (size_t i = 0; i < n_; ++i) p[i * r_ + k] /= std::sqrt(norm);
    }
    for (const float* x : inputs) {
      for (size_t i = 0; i < n_; ++i) {
        for (size_t j = 0; j < m_; ++j) {
          for (size_t k = 0; k < r_; ++k) {
            q[j * r_ + k] += x[i * m_ + j] * p[i * r_ + k] / static_cast<double>(inputs.size());
          }
        }
      }
    }
    for (size_t i = 0; i < n_; ++i) {
      for (size_t j = 0; j < m_; ++j) {
        for (size_t k = 0; k < r_; ++k) out[i * m_ + j] += p[i * r_ + k] * q[j * r_ + k];
      }
    }
    q_ = q;
    return out;
  }

 private:
  size_t n_, m_, r_;
  std::vector<double> q_;  // cols x rank
};

// Ranks' inputs of the unit at one step: uniform in [-0.1, 0.1), different per rank and step
// (a hash per element, so that megabyte inputs stay cheap to build).
std::vector<float> input(size_t n, uint64_t step, int rank) {
  std::vector<float> out(n);
  const uint64_t seed = rng::mixSeed(1000 * step + rank, 17);
  for (size_t i = 0; i < n; ++i) out[i] = 0.2f * rng::unitFloat(rng::splitMix64(seed + i)) - 0.1f;
  return out;
}

// Every step of a mixed unit against the naive reference: conv-shaped [8,3,3,3] (8 x 27), a
// bias [8] (exact), a matrix [10,20], a wide matrix that stays exact at this rank [3,50]
// (rank 2 < 3 rows, but 2·(3 + 50) floats would not halve its 150).
TEST(PowerSgd, MatchesTheNaiveSubspaceIterationOnAMixedUnit) {
  const std::vector<TensorShape> unit = {shape({8, 3, 3, 3}), shape({8}), shape({10, 20}),
                                         shape({3, 50})};
  const size_t n = unitSize(unit), rank = 2, steps = 4;
  EXPECT_EQ(makePowerSgd(rank, unit)->encodedBytes(n),
            4 * ((8 * 2 + 27 * 2) + 8 + (10 * 2 + 20 * 2) + 150));
  for (int ranks : {1, 2, 3}) {
    SCOPED_TRACE(ranks);
    std::vector<std::vector<float>> results(steps);
    testing::runWithTransports(testing::TransportKind::kLoopback, ranks, [&](Transport& t) {
      auto compressor = makePowerSgd(rank, unit);
      ExchangeStats stats;
      for (size_t s = 0; s < steps; ++s) {
        auto grad = input(n, s, t.rank());
        std::vector<float> sent(n);
        ExchangeContext context{t, {}, s, kSeed};
        compressor->exchange(context, grad, sent, stats);
        if (t.rank() == ranks - 1) results[s] = grad;
        auto mine = input(n, s, t.rank());
        for (size_t i = 0; i < n; ++i) {
          bool exact = (i >= 216 && i < 224) || i >= 424;  // the bias and the [3,50] matrix
          ASSERT_EQ(sent[i], exact ? mine[i] : grad[i]) << "sent at " << i;
        }
      }
    });
    NaivePowerSgd conv(8, 27, rank, 0), matrix(10, 20, rank, 2);
    for (size_t s = 0; s < steps; ++s) {
      std::vector<std::vector<float>> in;
      std::vector<const float*> convIn, matrixIn;
      for (int r = 0; r < ranks; ++r) in.push_back(input(n, s, r));
      for (auto& x : in) convIn.push_back(x.data()), matrixIn.push_back(x.data() + 224);
      auto convOut = conv.step(convIn), matrixOut = matrix.step(matrixIn);
      const double tolerance = 1e-5 * maxAbs(in[0]) * ranks;
      for (size_t i = 0; i < n; ++i) {
        double expected = 0;
        if (i < 216) {
          expected = convOut[i];
        } else if (i >= 224 && i < 424) {
          expected = matrixOut[i - 224];
        } else {
          for (auto& x : in) expected += x[i];
          expected /= ranks;
        }
        ASSERT_NEAR(results[s][i], expected, tolerance) << "step " << s << " element " << i;
      }
    }
  }
}

// RANK >= min(rows, cols) and one-dim tensors: the exact average, at sizes 0, 1, odd, large.
TEST(PowerSgd, ExactAverageWhenNothingIsCompressed) {
  for (int ranks : {1, 2, 3}) {
    for (auto dims : std::vector<std::vector<int64_t>>{
             {0}, {1}, {0, 5}, {1, 1}, {7, 13}, {13, 7}, {5, 3, 2}, {(1 << 20) + 3}}) {
      SCOPED_TRACE(::testing::Message()
                   << ranks << " ranks, " << dims.size() << " dims, " << dims[0]);
      const std::vector<TensorShape> unit = {shape(dims)};
      const size_t n = unit[0].elements;
      if (n > 1000 && ranks < 3) continue;  // large: the 3-rank case is enough (and fast)
      auto out = runExchange(
          ranks, [&] { return makePowerSgd(7, unit); },
          [&](int s, int r) { return input(n, s, r); }, 2);
      EXPECT_EQ(makePowerSgd(7, unit)->encodedBytes(n), 4 * n);
      std::vector<std::vector<float>> in;
      for (int r = 0; r < ranks; ++r) in.push_back(input(n, 1, r));
      for (int r = 0; r < ranks; ++r) {
        ASSERT_EQ(out[r].result, out[0].result);
        ASSERT_EQ(out[r].sent, in[r]);
      }
      for (size_t i = 0; i < n; ++i) {
        double sum = 0, magnitude = 0;
        for (auto& x : in) sum += x[i], magnitude += std::fabs(x[i]);
        ASSERT_NEAR(out[0].result[i], sum / ranks, 1e-6 * magnitude) << i;
      }
    }
  }
}

// A random n x m matrix U·diag(sigma)·Vᵀ (U, V orthonormal), keeping only the first `keep`
// singular pairs when given.
std::vector<float> lowRank(size_t n, size_t m, const std::vector<double>& sigma, uint64_t seed,
                           size_t keep = SIZE_MAX) {
  auto orthonormal = [](size_t rows, size_t cols, uint64_t s) {
    auto g = gaussian(rows * cols, s);
    std::vector<double> v(g.begin(), g.end());
    for (size_t k = 0; k < cols; ++k) {
      for (size_t l = 0; l < k; ++l) {
        double d = 0;
        for (size_t i = 0; i < rows; ++i) d += v[i * cols + l] * v[i * cols + k];
        for (size_t i = 0; i < rows; ++i) v[i * cols + k] -= d * v[i * cols + l];
      }
      double norm = 0;
      for (size_t i = 0; i < rows; ++i) norm += v[i * cols + k] * v[i * cols + k];
      for (size_t i = 0; i < rows; ++i) v[i * cols + k] /= std::sqrt(norm);
    }
    return v;
  };
  const size_t r = sigma.size();
  auto u = orthonormal(n, r, seed), v = orthonormal(m, r, seed + 1);
  std::vector<float> out(n * m);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < m; ++j) {
      double sum = 0;
      for (size_t k = 0; k < std::min(r, keep); ++k) sum += u[i * r + k] * sigma[k] * v[j * r + k];
      out[i * m + j] = static_cast<float>(sum);
    }
  }
  return out;
}

// Rank r's share of `target`: shares differ per rank and average to `target`.
std::vector<float> share(const std::vector<float>& target, int rank, int ranks) {
  std::vector<float> out(target);
  const float weight = 2.0f * static_cast<float>(rank + 1) / static_cast<float>(ranks + 1);
  for (float& x : out) x *= weight;
  return out;
}

// A matrix is compressed only where RANK·(rows + cols) at most halves rows·cols.
TEST(PowerSgd, CompressesOnlyWhereItHalvesTheBytes) {
  EXPECT_EQ(makePowerSgd(4, {shape({16, 16})})->encodedBytes(256), 4u * 4 * 32);  // 128 <= 128
  EXPECT_EQ(makePowerSgd(4, {shape({15, 16})})->encodedBytes(240), 4u * 240);     // 124 > 120
  EXPECT_EQ(makePowerSgd(4, {shape({6, 5})})->encodedBytes(30), 4u * 30);
}

TEST(PowerSgd, RepeatedExchangesOfALowRankMatrixReproduceIt) {
  const size_t n = 64, m = 48;
  const auto target = lowRank(n, m, {3.0, 1.0, 0.5, 0.1}, 5);
  const std::vector<TensorShape> unit = {shape({64, 48})};
  for (int ranks : {1, 3}) {
    for (int steps : {1, 10}) {
      auto out = runExchange(
          ranks, [&] { return makePowerSgd(4, unit); },
          [&](int, int r) { return share(target, r, ranks); }, steps);
      for (size_t i = 0; i < n * m; ++i) {
        ASSERT_NEAR(out[0].result[i], target[i], 1e-4) << ranks << " ranks, step " << steps;
      }
    }
  }
}

// With a spectrum beyond RANK, one exchange is a poor approximation; the warm start makes the
// iterations converge to the best rank-RANK approximation (the truncated SVD).
TEST(PowerSgd, WarmStartConvergesToTheDominantSubspace) {
  const size_t n = 60, m = 40;
  const std::vector<double> sigma = {8, 4, 1, 0.5, 0.25};
  const auto target = lowRank(n, m, sigma, 9);
  const auto best = lowRank(n, m, sigma, 9, 2);  // the truncated SVD
  const std::vector<TensorShape> unit = {shape({60, 40})};
  for (int ranks : {1, 2, 3}) {
    double first = 0, last = 0;
    for (int steps : {1, 20}) {
      auto out = runExchange(
          ranks, [&] { return makePowerSgd(2, unit); },
          [&](int, int r) { return share(target, r, ranks); }, steps);
      double error = 0;
      for (size_t i = 0; i < n * m; ++i) {
        error = std::max(error, std::fabs(static_cast<double>(out[0].result[i]) - best[i]));
      }
      (steps == 1 ? first : last) = error;
    }
    EXPECT_GT(first, 1e-2) << ranks;  // a random start is not yet the dominant subspace
    EXPECT_LT(last, 1e-4) << ranks;
  }
}

// A large tensor: every rank ends bitwise identical, `sent` is the aggregated M̂, and M̂ is an
// orthogonal projection of the average onto RANK directions: <M̂, Ā - M̂> = 0.
TEST(PowerSgd, LargeTensorAgreesOnEveryRankAndProjectsTheAverage) {
  const size_t rows = 1024, cols = 1025, n = rows * cols;
  const std::vector<TensorShape> unit = {shape({1024, 1025})};
  auto out = runExchange(
      3, [&] { return makePowerSgd(4, unit); }, [&](int s, int r) { return input(n, s, r); }, 2);
  double inner = 0, norm = 0;
  std::vector<std::vector<float>> in;
  for (int r = 0; r < 3; ++r) in.push_back(input(n, 1, r));
  for (size_t i = 0; i < n; ++i) {
    const double mean = (static_cast<double>(in[0][i]) + in[1][i] + in[2][i]) / 3;
    inner += out[0].result[i] * (mean - out[0].result[i]);
    norm += mean * mean;
  }
  EXPECT_NEAR(inner / norm, 0.0, 1e-5);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[r].result, out[0].result) << "rank " << r;
    EXPECT_EQ(out[r].sent, out[0].result) << "rank " << r;
  }
}

// Error feedback around PowerSGD: residual + everything sent == everything input.
TEST(PowerSgd, ErrorFeedbackKeepsWhatTheApproximationMissed) {
  const std::vector<TensorShape> unit = {shape({12, 9}), shape({5})};
  const size_t n = unitSize(unit);
  testing::runWithTransports(testing::TransportKind::kLoopback, 2, [&](Transport& t) {
    ErrorFeedback ef(makePowerSgd(2, unit), n);
    std::vector<double> inputs(n, 0), sent(n, 0);
    ExchangeStats stats;
    for (int s = 0; s < 6; ++s) {
      auto grad = input(n, s, t.rank());
      for (size_t i = 0; i < n; ++i) inputs[i] += grad[i];
      std::vector<float> mine(n);
      ExchangeContext context{t, {}, static_cast<uint64_t>(s), kSeed};
      ef.exchange(context, grad, mine, stats);
      for (size_t i = 0; i < n; ++i) sent[i] += mine[i];
    }
    for (size_t i = 0; i < n; ++i) {
      EXPECT_NEAR(ef.residual()[i] + sent[i], inputs[i], 1e-5) << i;
      if (i >= 108) {
        EXPECT_EQ(ef.residual()[i], 0.0f) << "the bias is sent exactly";
      }
    }
  });
}

// A zero gradient gives Q = 0; the next step must still approximate (Q is redrawn).
TEST(PowerSgd, RecoversFromAZeroGradient) {
  const auto target = lowRank(20, 30, {2.0, 1.0}, 3);
  const std::vector<TensorShape> unit = {shape({20, 30})};
  auto out = runExchange(
      2, [&] { return makePowerSgd(2, unit); },
      [&](int s, int) { return s == 0 ? std::vector<float>(600, 0.0f) : target; }, 2);
  for (size_t i = 0; i < target.size(); ++i) ASSERT_NEAR(out[0].result[i], target[i], 1e-4);
}

TEST(PowerSgd, RejectsInvalidParameters) {
  const std::vector<TensorShape> unit = {shape({8, 8})};
  for (double rank : {0.0, -1.0, 2.5, 1e9, std::nan("")}) {
    EXPECT_THROW(makePowerSgd(rank, unit), ConfigError) << rank;
  }
  EXPECT_NO_THROW(makePowerSgd(1, unit));
  EXPECT_NO_THROW(methods::makePowerSgd({}, unit));  // the registry's default RANK
  const std::vector<TensorShape> inconsistent = {{"w", {3, 4}, 11}};
  EXPECT_THROW(makePowerSgd(2, inconsistent), ConfigError);
  try {
    makePowerSgd(0, unit);
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd:RANK needs"), std::string::npos) << e.what();
  }
}

// Ranks built for different units disagree on the size of Q: ProtocolError, not a hang.
TEST(PowerSgd, MismatchedUnitsFailWithProtocolError) {
  testing::runWithTransports(
      testing::TransportKind::kLoopback, 2,
      [](Transport& t) {
        const std::vector<TensorShape> unit = {shape({10, t.rank() == 0 ? 20 : 21})};
        auto compressor = makePowerSgd(4, unit);
        std::vector<float> grad(unit[0].elements, 1.0f), sent(grad.size());
        ExchangeStats stats;
        ExchangeContext context{t, {}, 0, kSeed};
        EXPECT_THROW(compressor->exchange(context, grad, sent, stats), ProtocolError);
      },
      TransportOptions{.timeout = std::chrono::milliseconds(2000)});
}

}  // namespace
}  // namespace gradsync
