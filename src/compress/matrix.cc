// Dense kernels of compress/matrix.h. The products run over column blocks so that the block of
// the output (or input) reused across the short dimension stays in L1, and their inner loops
// are unit-stride axpys or eight-way dot products that g++ vectorises at -O2/-O3.
#include "compress/matrix.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/check.h"

namespace gradsync::linalg {
namespace {

// Budgets, in floats, for data reused across the rows of a product: 16 KiB for what the inner
// loops reuse (half the smallest L1 data cache we run on), 256 KiB for what every row reuses
// (within a 512 KiB L2).
constexpr size_t kL1Floats = 4096;
constexpr size_t kL2Floats = 65536;

// Columns per block when `reused` rows of the block must fit `budget` floats.
size_t blockColumns(size_t reused, size_t budget) {
  size_t columns = budget / std::max<size_t>(reused, 1);
  return std::max<size_t>(columns & ~size_t{7}, 64);
}

// y += alpha * x
void axpy(float* __restrict y, float alpha, const float* __restrict x, size_t count) {
  for (size_t i = 0; i < count; ++i) y[i] += alpha * x[i];
}

// y = alpha * x
void scaled(float* __restrict y, float alpha, const float* __restrict x, size_t count) {
  for (size_t i = 0; i < count; ++i) y[i] = alpha * x[i];
}

double columnDot(MatrixView a, size_t j, size_t k) {
  double sum = 0;
  for (size_t i = 0; i < a.rows; ++i) sum += static_cast<double>(a(i, j)) * a(i, k);
  return sum;
}

// Column k -= (column j · column k) * column j, in double.
void projectOut(MatrixView a, size_t j, size_t k) {
  const double d = columnDot(a, j, k);
  for (size_t i = 0; i < a.rows; ++i) {
    a(i, k) = static_cast<float>(a(i, k) - d * a(i, j));
  }
}

// Applies the Jacobi rotation (c, s) on (p, q) that zeroes a[p][q]: A <- Jᵀ·A·J, and the
// eigenvector rows vt[p], vt[q] <- their rotation. A is kept symmetric and read along rows p and
// q only (contiguous), so a sweep touches each column once, not once per rotation.
void rotate(std::vector<double>& a, std::vector<double>& vt, size_t n, size_t p, size_t q, double c,
            double s, double t) {
  const double apq = a[p * n + q];
  double* rowP = &a[p * n];
  double* rowQ = &a[q * n];
  for (size_t k = 0; k < n; ++k) {
    if (k == p || k == q) continue;
    const double akp = rowP[k], akq = rowQ[k];
    rowP[k] = a[k * n + p] = c * akp - s * akq;
    rowQ[k] = a[k * n + q] = s * akp + c * akq;
  }
  rowP[p] -= t * apq;
  rowQ[q] += t * apq;
  rowP[q] = rowQ[p] = 0;
  double* vp = &vt[p * n];
  double* vq = &vt[q * n];
  for (size_t k = 0; k < n; ++k) {
    const double x = vp[k], y = vq[k];
    vp[k] = c * x - s * y;
    vq[k] = s * x + c * y;
  }
}

// One cyclic sweep of Jacobi rotations over the upper triangle of `a` (n×n). Golub & Van Loan,
// Matrix Computations, §8.5 (sym.schur2), with the updates of Numerical Recipes §11.1.
void jacobiSweep(std::vector<double>& a, std::vector<double>& vt, size_t n, bool late) {
  for (size_t p = 0; p + 1 < n; ++p) {
    for (size_t q = p + 1; q < n; ++q) {
      const double apq = a[p * n + q];
      if (apq == 0) continue;
      const double app = a[p * n + p];
      const double aqq = a[q * n + q];
      // Past the first sweeps an element below the diagonal's rounding is dropped outright
      // (Numerical Recipes' rule), so convergence ends in exact zeros instead of noise.
      const double g = 100.0 * std::fabs(apq);
      if (late && std::fabs(app) + g == std::fabs(app) && std::fabs(aqq) + g == std::fabs(aqq)) {
        a[p * n + q] = a[q * n + p] = 0;
        continue;
      }
      const double tau = (aqq - app) / (2.0 * apq);
      const double t = (tau >= 0 ? 1.0 : -1.0) / (std::fabs(tau) + std::sqrt(1.0 + tau * tau));
      const double c = 1.0 / std::sqrt(1.0 + t * t);
      rotate(a, vt, n, p, q, c, t * c, t);
    }
  }
}

double offDiagonal(const std::vector<double>& a, size_t n) {
  double sum = 0;
  for (size_t p = 0; p < n; ++p) {
    for (size_t q = p + 1; q < n; ++q) sum += a[p * n + q] * a[p * n + q];
  }
  return 2 * sum;
}

}  // namespace

float dot(const float* a, const float* b, size_t count) {
  float acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    for (size_t l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (size_t l = 0; i < count; ++i, ++l) acc[l] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// The products run over column blocks at two levels: an outer block sized so that the part of
// the operand every row reuses (B's p rows, or C's p rows) stays in L2, and inner blocks sized
// so that what the innermost loops reuse across p stays in L1. Each row of the other operand
// then streams from memory once. A matrix narrower than a block is one block, row by row.

void multiply(ConstMatrixView a, ConstMatrixView b, MatrixView c) {
  GS_CHECK_EQ(a.cols, b.rows);
  GS_CHECK_EQ(c.rows, a.rows);
  GS_CHECK_EQ(c.cols, b.cols);
  const size_t p = a.cols, m = b.cols;
  const size_t outer = blockColumns(p, kL2Floats), inner = blockColumns(1, kL1Floats);
  for (size_t j0 = 0; j0 < m; j0 += outer) {
    const size_t end = std::min(j0 + outer, m);
    for (size_t i = 0; i < a.rows; ++i) {
      const float* ai = a.row(i);
      for (size_t j = j0; j < end; j += inner) {
        const size_t len = std::min(inner, end - j);
        float* out = c.row(i) + j;  // accumulates p times: in L1
        if (p == 0) {
          std::fill(out, out + len, 0.0f);
          continue;
        }
        scaled(out, ai[0], b.row(0) + j, len);
        for (size_t k = 1; k < p; ++k) axpy(out, ai[k], b.row(k) + j, len);
      }
    }
  }
}

void multiplyTransposedA(ConstMatrixView a, ConstMatrixView b, MatrixView c) {
  GS_CHECK_EQ(a.rows, b.rows);
  GS_CHECK_EQ(c.rows, a.cols);
  GS_CHECK_EQ(c.cols, b.cols);
  const size_t p = a.cols, m = b.cols;
  const size_t outer = blockColumns(p, kL2Floats), inner = blockColumns(1, kL1Floats);
  for (size_t j0 = 0; j0 < m; j0 += outer) {
    const size_t end = std::min(j0 + outer, m);
    for (size_t k = 0; k < p; ++k) std::fill(c.row(k) + j0, c.row(k) + end, 0.0f);
    for (size_t i = 0; i < a.rows; ++i) {
      const float* ai = a.row(i);
      for (size_t j = j0; j < end; j += inner) {
        const size_t len = std::min(inner, end - j);
        const float* bi = b.row(i) + j;  // read p times: in L1
        for (size_t k = 0; k < p; ++k) axpy(c.row(k) + j, ai[k], bi, len);
      }
    }
  }
}

void multiplyTransposedB(ConstMatrixView a, ConstMatrixView b, MatrixView c) {
  GS_CHECK_EQ(a.cols, b.cols);
  GS_CHECK_EQ(c.rows, a.rows);
  GS_CHECK_EQ(c.cols, b.rows);
  const size_t p = b.rows, m = a.cols;
  const size_t outer = blockColumns(p, kL2Floats), inner = blockColumns(1, kL1Floats);
  for (size_t i = 0; i < a.rows; ++i) std::fill(c.row(i), c.row(i) + p, 0.0f);
  for (size_t j0 = 0; j0 < m; j0 += outer) {
    const size_t end = std::min(j0 + outer, m);
    for (size_t i = 0; i < a.rows; ++i) {
      const float* ai = a.row(i);
      float* ci = c.row(i);
      for (size_t j = j0; j < end; j += inner) {
        const size_t len = std::min(inner, end - j);  // ai[j, j + len) is read p times: in L1
        for (size_t k = 0; k < p; ++k) ci[k] += dot(ai + j, b.row(k) + j, len);
      }
    }
  }
}

void gram(ConstMatrixView a, MatrixView c) {
  GS_CHECK_EQ(c.rows, a.cols);
  GS_CHECK_EQ(c.cols, a.cols);
  const size_t p = a.cols;
  std::fill(c.data, c.data + p * p, 0.0f);
  for (size_t i = 0; i < a.rows; ++i) {
    const float* ai = a.row(i);
    for (size_t k = 0; k < p; ++k) axpy(c.row(k) + k, ai[k], ai + k, p - k);
  }
  for (size_t k = 0; k < p; ++k) {
    for (size_t j = 0; j < k; ++j) c(k, j) = c(j, k);
  }
}

void orthonormalizeColumns(MatrixView a) {
  // Below this ratio a projection cancelled enough digits that one more pass is needed to
  // restore orthogonality ("twice is enough", Parlett's criterion).
  constexpr double kReorthogonalize = 0.7071067811865476;
  for (size_t k = 0; k < a.cols; ++k) {
    const double original = std::sqrt(columnDot(a, k, k));
    double norm = original;
    for (int pass = 0; pass < 2 && k > 0 && norm > 0; ++pass) {
      for (size_t j = 0; j < k; ++j) projectOut(a, j, k);
      const double after = std::sqrt(columnDot(a, k, k));
      const bool again = after < kReorthogonalize * norm;
      norm = after;
      if (!again) break;
    }
    // Written so that a NaN norm normalises (and propagates) instead of hiding as zero.
    const bool dependent = norm <= kDependentColumn * original;
    const double factor = dependent ? 0.0 : 1.0 / norm;
    for (size_t i = 0; i < a.rows; ++i) a(i, k) = static_cast<float>(a(i, k) * factor);
  }
}

void symmetricEigen(std::span<const double> input, size_t n, std::vector<double>& values,
                    std::vector<double>& vectors) {
  GS_CHECK_EQ(input.size(), n * n);
  std::vector<double> a(n * n), vt(n * n, 0.0);  // vt: row k is the k-th eigenvector
  double total = 0;
  for (size_t p = 0; p < n; ++p) {
    vt[p * n + p] = 1;
    for (size_t q = p; q < n; ++q) {
      a[p * n + q] = a[q * n + p] = input[p * n + q];
      total += (p == q ? 1 : 2) * input[p * n + q] * input[p * n + q];
    }
  }
  // Cyclic Jacobi converges quadratically; 64 sweeps is a cap for non-finite input only.
  constexpr int kMaxSweeps = 64;
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    const double off = offDiagonal(a, n);
    if (!(off > 1e-30 * total)) break;
    jacobiSweep(a, vt, n, sweep >= 4);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // NaN sorts last, so the comparison stays a strict weak order.
  auto key = [&](size_t i) {
    double d = a[i * n + i];
    return std::isnan(d) ? -std::numeric_limits<double>::infinity() : d;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return key(x) > key(y); });
  values.resize(n);
  vectors.resize(n * n);
  for (size_t k = 0; k < n; ++k) {
    const double* v = &vt[order[k] * n];
    values[k] = a[order[k] * n + order[k]];
    size_t largest = 0;
    for (size_t i = 1; i < n; ++i) {
      if (std::fabs(v[i]) > std::fabs(v[largest])) largest = i;
    }
    const double sign = v[largest] < 0 ? -1.0 : 1.0;
    for (size_t i = 0; i < n; ++i) vectors[k * n + i] = sign * v[i];
  }
}

}  // namespace gradsync::linalg
