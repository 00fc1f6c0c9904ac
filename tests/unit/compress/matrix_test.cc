// The dense kernels of compress/matrix.h against deliberately naive references: triple loops
// in double for the products, the defining identities (QᵀQ = I, A = Q·R with R upper
// triangular) for Gram-Schmidt, and matrices built from known eigenpairs for the eigensolver.
#include "compress/matrix.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "exchange_harness.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using linalg::ConstMatrixView;
using linalg::MatrixView;
using testing::gaussian;

// Naive C = op(A)·op(B) in double, with the bound sum |a||b| per element for the tolerance.
struct MatrixReference {
  std::vector<double> value, magnitude;
};

MatrixReference naiveProduct(const std::vector<float>& a, size_t aRows, size_t aCols, bool transA,
                             const std::vector<float>& b, size_t bRows, size_t bCols, bool transB) {
  auto at = [&](size_t i, size_t k) { return transA ? a[k * aCols + i] : a[i * aCols + k]; };
  auto bt = [&](size_t k, size_t j) { return transB ? b[j * bCols + k] : b[k * bCols + j]; };
  const size_t n = transA ? aCols : aRows, p = transA ? aRows : aCols;
  const size_t m = transB ? bRows : bCols;
  MatrixReference r{std::vector<double>(n * m, 0.0), std::vector<double>(n * m, 0.0)};
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < m; ++j) {
      for (size_t k = 0; k < p; ++k) {
        r.value[i * m + j] += static_cast<double>(at(i, k)) * bt(k, j);
        r.magnitude[i * m + j] += std::fabs(static_cast<double>(at(i, k)) * bt(k, j));
      }
    }
  }
  return r;
}

void expectClose(const std::vector<float>& c, const MatrixReference& r) {
  ASSERT_EQ(c.size(), r.value.size());
  for (size_t i = 0; i < c.size(); ++i) {
    // float accumulation: a few ulps per term of the longest sums here
    ASSERT_NEAR(c[i], r.value[i], 1e-6 * r.magnitude[i] + 1e-30) << "element " << i;
  }
}

struct MatrixShape {
  size_t n, p, m;
};

// Shapes: empty, scalar, odd sizes, tall-skinny and wide (several column blocks, dot tails).
const std::vector<MatrixShape> kShapes = {{3, 5, 70000}, {0, 3, 5},    {4, 0, 3},    {1, 1, 1},
                                          {7, 3, 13},    {3, 4, 5000}, {33, 32, 32}, {600, 4, 9},
                                          {700, 33, 2},  {2, 9, 4099}};

TEST(Matrix, DotMatchesDoubleSum) {
  for (size_t count : {0, 1, 7, 8, 9, 31, 32, 1001, 100003}) {
    auto a = gaussian(count, 1), b = gaussian(count, 2);
    double sum = 0, magnitude = 0;
    for (size_t i = 0; i < count; ++i) {
      sum += static_cast<double>(a[i]) * b[i];
      magnitude += std::fabs(static_cast<double>(a[i]) * b[i]);
    }
    EXPECT_NEAR(linalg::dot(a.data(), b.data(), count), sum, 1e-6 * magnitude) << count;
  }
}

TEST(Matrix, ProductsMatchNaiveTripleLoops) {
  for (const MatrixShape& s : kShapes) {
    SCOPED_TRACE(::testing::Message() << s.n << "x" << s.p << "x" << s.m);
    std::vector<float> c(s.n * s.m, 7.0f);  // stale contents must be overwritten
    auto a = gaussian(s.n * s.p, 3), b = gaussian(s.p * s.m, 4);
    linalg::multiply({a.data(), s.n, s.p}, {b.data(), s.p, s.m}, {c.data(), s.n, s.m});
    expectClose(c, naiveProduct(a, s.n, s.p, false, b, s.p, s.m, false));

    auto at = gaussian(s.p * s.n, 5);  // Aᵀ·B with A stored p x n
    std::fill(c.begin(), c.end(), 7.0f);
    linalg::multiplyTransposedA({at.data(), s.p, s.n}, {b.data(), s.p, s.m}, {c.data(), s.n, s.m});
    expectClose(c, naiveProduct(at, s.p, s.n, true, b, s.p, s.m, false));

    auto bt = gaussian(s.m * s.p, 6);  // A·Bᵀ with B stored m x p
    std::fill(c.begin(), c.end(), 7.0f);
    linalg::multiplyTransposedB({a.data(), s.n, s.p}, {bt.data(), s.m, s.p}, {c.data(), s.n, s.m});
    expectClose(c, naiveProduct(a, s.n, s.p, false, bt, s.m, s.p, true));

    std::vector<float> g(s.p * s.p, 7.0f);
    linalg::gram({a.data(), s.n, s.p}, {g.data(), s.p, s.p});
    expectClose(g, naiveProduct(a, s.n, s.p, true, a, s.n, s.p, false));
    for (size_t i = 0; i < s.p; ++i) {
      for (size_t j = 0; j < i; ++j) ASSERT_EQ(g[i * s.p + j], g[j * s.p + i]) << "asymmetric";
    }
  }
}

TEST(Matrix, ShapeMismatchIsABug) {
  std::vector<float> a(6), b(6), c(9);
  EXPECT_THROW(linalg::multiply({a.data(), 2, 3}, {b.data(), 2, 3}, {c.data(), 2, 3}),
               InternalError);
}

// Checks that q (n x r) has orthonormal or zero columns and that every column of `a` lies in
// the span of the columns of q up to its own index (A = Q·R, R upper triangular).
void expectGramSchmidtOf(const std::vector<float>& a, const std::vector<float>& q, size_t n,
                         size_t r, const std::vector<bool>& zero) {
  for (size_t j = 0; j < r; ++j) {
    for (size_t k = 0; k < r; ++k) {
      double d = 0;
      for (size_t i = 0; i < n; ++i) d += static_cast<double>(q[i * r + j]) * q[i * r + k];
      double expected = j == k && !zero[j] ? 1.0 : 0.0;
      EXPECT_NEAR(d, expected, 1e-5) << j << "," << k;
    }
  }
  for (size_t k = 0; k < r; ++k) {
    std::vector<double> rest(n);
    double norm = 0;
    for (size_t i = 0; i < n; ++i) {
      rest[i] = a[i * r + k];
      norm += rest[i] * rest[i];
    }
    for (size_t j = 0; j <= k; ++j) {
      double d = 0;
      for (size_t i = 0; i < n; ++i) d += q[i * r + j] * rest[i];
      for (size_t i = 0; i < n; ++i) rest[i] -= d * q[i * r + j];
    }
    double left = 0;
    for (double v : rest) left += v * v;
    EXPECT_LE(std::sqrt(left), 1e-5 * std::sqrt(norm) + 1e-30) << "column " << k;
  }
}

TEST(Matrix, GramSchmidtOrthonormalisesAndKeepsTheSpans) {
  for (auto [n, r] : std::vector<std::pair<size_t, size_t>>{{1, 1}, {5, 3}, {1000, 4}, {9, 9}}) {
    auto a = gaussian(n * r, 11 + n);
    auto q = a;
    linalg::orthonormalizeColumns({q.data(), n, r});
    expectGramSchmidtOf(a, q, n, r, std::vector<bool>(r, false));
  }
}

TEST(Matrix, GramSchmidtHandlesBadScalingZeroAndDependentColumns) {
  const size_t n = 300, r = 5;
  auto a = gaussian(n * r, 21);
  for (size_t i = 0; i < n; ++i) {
    a[i * r + 1] *= 1e6f;                                // scales 1e6 apart
    a[i * r + 2] = 0.0f;                                 // zero
    a[i * r + 3] = 2.0f * a[i * r + 0];                  // exactly dependent on column 0
    a[i * r + 4] = a[i * r + 0] + 1e-3f * a[i * r + 4];  // nearly parallel: needs two passes
  }
  auto q = a;
  linalg::orthonormalizeColumns({q.data(), n, r});
  expectGramSchmidtOf(a, q, n, r, {false, false, true, true, false});
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(q[i * r + 2], 0.0f);
    EXPECT_EQ(q[i * r + 3], 0.0f);
  }
}

// A random orthogonal n x n matrix (columns), by naive Gram-Schmidt in double.
std::vector<double> randomOrthogonal(size_t n, uint64_t seed) {
  auto g = gaussian(n * n, seed);
  std::vector<double> v(g.begin(), g.end());
  for (size_t k = 0; k < n; ++k) {
    for (size_t j = 0; j < k; ++j) {
      double d = 0;
      for (size_t i = 0; i < n; ++i) d += v[i * n + j] * v[i * n + k];
      for (size_t i = 0; i < n; ++i) v[i * n + k] -= d * v[i * n + j];
    }
    double norm = 0;
    for (size_t i = 0; i < n; ++i) norm += v[i * n + k] * v[i * n + k];
    for (size_t i = 0; i < n; ++i) v[i * n + k] /= std::sqrt(norm);
  }
  return v;
}

TEST(Matrix, SymmetricEigenRecoversKnownEigenpairs) {
  for (size_t n : {1, 2, 5, 32, 64}) {
    SCOPED_TRACE(n);
    auto v = randomOrthogonal(n, 40 + n);
    std::vector<double> lambda(n);
    for (size_t k = 0; k < n; ++k)
      lambda[k] = (k % 2 ? -1.0 : 1.0) * (1.0 + 3.0 * static_cast<double>(k));
    std::vector<double> a(n * n, 0.0);  // V·diag(λ)·Vᵀ
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) {
        for (size_t k = 0; k < n; ++k) a[i * n + j] += v[i * n + k] * lambda[k] * v[j * n + k];
      }
    }
    std::vector<double> values, vectors;
    linalg::symmetricEigen(a, n, values, vectors);
    std::vector<size_t> order(n);
    for (size_t k = 0; k < n; ++k) order[k] = k;
    std::sort(order.begin(), order.end(),
              [&](size_t x, size_t y) { return lambda[x] > lambda[y]; });
    for (size_t k = 0; k < n; ++k) {
      EXPECT_NEAR(values[k], lambda[order[k]], 1e-10 * 3 * n) << k;
      // Same direction as the known eigenvector, with the sign convention applied.
      double d = 0, largest = 0;
      for (size_t i = 0; i < n; ++i) {
        d += vectors[k * n + i] * v[i * n + order[k]];
        if (std::fabs(vectors[k * n + i]) > std::fabs(largest)) largest = vectors[k * n + i];
      }
      EXPECT_NEAR(std::fabs(d), 1.0, 1e-10) << k;
      EXPECT_GT(largest, 0.0) << k;
    }
  }
}

TEST(Matrix, SymmetricEigenOfDegenerateMatrices) {
  std::vector<double> values, vectors;
  linalg::symmetricEigen(std::vector<double>(9, 0.0), 3, values, vectors);
  EXPECT_EQ(values, std::vector<double>(3, 0.0));
  EXPECT_EQ(vectors, (std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  // Diagonal: sorted descending, ties keep index order.
  linalg::symmetricEigen(std::vector<double>{1, 0, 0, 0, 5, 0, 0, 0, 1}, 3, values, vectors);
  EXPECT_EQ(values, (std::vector<double>{5, 1, 1}));
  EXPECT_EQ(vectors, (std::vector<double>{0, 1, 0, 1, 0, 0, 0, 0, 1}));
  // A repeated eigenvalue: any orthonormal basis of its eigenspace, but a valid one.
  const size_t n = 6;
  auto v = randomOrthogonal(n, 77);
  std::vector<double> lambda = {4, 4, 4, 1, 0, 0}, a(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      for (size_t k = 0; k < n; ++k) a[i * n + j] += v[i * n + k] * lambda[k] * v[j * n + k];
    }
  }
  linalg::symmetricEigen(a, n, values, vectors);
  for (size_t k = 0; k < n; ++k) {
    EXPECT_NEAR(values[k], lambda[k], 1e-12);
    for (size_t i = 0; i < n; ++i) {
      double av = 0;
      for (size_t j = 0; j < n; ++j) av += a[i * n + j] * vectors[k * n + j];
      EXPECT_NEAR(av, values[k] * vectors[k * n + i], 1e-12);
    }
    for (size_t l = 0; l < n; ++l) {
      double d = 0;
      for (size_t i = 0; i < n; ++i) d += vectors[k * n + i] * vectors[l * n + i];
      EXPECT_NEAR(d, k == l ? 1.0 : 0.0, 1e-12);
    }
  }
  linalg::symmetricEigen({}, 0, values, vectors);
  EXPECT_TRUE(values.empty());
}

}  // namespace
}  // namespace gradsync
