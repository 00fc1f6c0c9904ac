// Small dense linear algebra for the linear compressors (PowerSGD's power iteration, GradiVeQ's
// PCA): row-major float matrix views, three products, Gram-Schmidt and a symmetric eigensolver.
// Self-contained on purpose: the core library must build without BLAS/LAPACK, and these shapes
// (one side of 1..64) are far from where a BLAS pays off.
//
// Contract: views do not own their memory; the output of a product must not overlap its inputs.
// Shapes are checked (GS_CHECK: a mismatch is a bug in the caller). Every function is
// deterministic (a fixed summation order), so ranks that feed identical inputs get bitwise
// identical outputs. No state: calls on distinct outputs may run concurrently.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace gradsync::linalg {

// Element (i, j) lives at data[i * cols + j].
struct MatrixView {
  float* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;

  float* row(size_t i) const { return data + i * cols; }
  float& operator()(size_t i, size_t j) const { return data[i * cols + j]; }
};

struct ConstMatrixView {
  const float* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;

  ConstMatrixView() = default;
  ConstMatrixView(const float* data, size_t rows, size_t cols)
      : data(data), rows(rows), cols(cols) {}
  ConstMatrixView(MatrixView m) : data(m.data), rows(m.rows), cols(m.cols) {}  // NOLINT

  const float* row(size_t i) const { return data + i * cols; }
  float operator()(size_t i, size_t j) const { return data[i * cols + j]; }
};

// Sum of a[i] * b[i] in float with eight interleaved partial sums (so the loop vectorises).
float dot(const float* a, const float* b, size_t count);

// C = A·B: A is n×p, B is p×m, C is n×m.
void multiply(ConstMatrixView a, ConstMatrixView b, MatrixView c);
// C = Aᵀ·B: A is n×p, B is n×m, C is p×m.
void multiplyTransposedA(ConstMatrixView a, ConstMatrixView b, MatrixView c);
// C = A·Bᵀ: A is n×m, B is p×m, C is n×p.
void multiplyTransposedB(ConstMatrixView a, ConstMatrixView b, MatrixView c);
// C = Aᵀ·A (p×p, symmetric): A is n×p. Half the work of multiplyTransposedA(a, a, c): the upper
// triangle is computed and mirrored, so C is exactly symmetric.
void gram(ConstMatrixView a, MatrixView c);

// Orthonormalises the columns of `a` in place, left to right (modified Gram-Schmidt, dot
// products in double, a second projection pass when the first cancelled most of a column).
// A column that is zero or numerically dependent on the columns before it (less than
// kDependentColumn of its norm survives the projections) becomes zero instead of normalised
// rounding noise, so callers see "orthonormal or zero" columns and never a division by zero.
inline constexpr double kDependentColumn = 1e-6;
void orthonormalizeColumns(MatrixView a);

// Eigen-decomposition of the symmetric n×n matrix `a` (row-major, double; only the upper
// triangle is read) by cyclic Jacobi rotations. On return `values` holds the n eigenvalues in
// descending order (ties keep the lower index first) and row k of `vectors` (n×n, row-major)
// the unit eigenvector of values[k], its largest-magnitude component positive (the first one
// on ties): a sign convention, so the result is a function of `a` alone.
void symmetricEigen(std::span<const double> a, size_t n, std::vector<double>& values,
                    std::vector<double>& vectors);

}  // namespace gradsync::linalg
