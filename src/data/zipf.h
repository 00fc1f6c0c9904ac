// Zipf (power-law) draws over {1, ..., n}: P(k) proportional to 1 / k^s, the skewed access of
// production recommendation logs. Rejection-inversion (Hörmann and Derflinger, "Rejection-
// inversion to generate variates from monotone discrete distributions", 1996), as in Apache
// Commons RNG's RejectionInversionZipfSampler: O(1) time and memory per draw for any n, so tables
// of millions of rows need no cumulative table. s = 0 is the uniform distribution.
//
// Deterministic: the caller supplies the uniform variates, so a draw is a pure function of its
// inputs. Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <functional>

namespace gradsync {

class ZipfDistribution {
 public:
  // n >= 1, s >= 0 (ConfigError otherwise).
  ZipfDistribution(uint64_t n, double s);

  uint64_t n() const { return n_; }
  double exponent() const { return s_; }
  // A draw in [1, n]; `uniform` returns independent doubles in [0, 1) (rejection may take a few).
  uint64_t draw(const std::function<double()>& uniform) const;
  // P(k), exactly (a sum over n terms: for tests and planning, not for drawing).
  double probability(uint64_t k) const;
  // The probability mass of the `count` most likely values, 1..count (a sum over n terms).
  double headMass(uint64_t count) const;

 private:
  double h(double x) const;
  double hIntegral(double x) const;
  double hIntegralInverse(double x) const;

  uint64_t n_;
  double s_;
  double hIntegralX1_ = 0;
  double hIntegralN_ = 0;
  double squeeze_ = 0;
};

}  // namespace gradsync
