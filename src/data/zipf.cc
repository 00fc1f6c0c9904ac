#include "data/zipf.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {
namespace {

// log(1 + x) / x and (exp(x) - 1) / x, accurate near 0 (Commons RNG's helper1 and helper2).
double log1pOverX(double x) {
  if (std::abs(x) > 1e-8) return std::log1p(x) / x;
  return 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

double expm1OverX(double x) {
  if (std::abs(x) > 1e-8) return std::expm1(x) / x;
  return 1 + x * 0.5 * (1 + x / 3 * (1 + 0.25 * x));
}

}  // namespace

ZipfDistribution::ZipfDistribution(uint64_t n, double s) : n_(n), s_(s) {
  if (n < 1 || !(s >= 0) || !std::isfinite(s)) {
    throw ConfigError(
        fmt::format("a Zipf distribution needs n >= 1 and s >= 0, not n={} s={}", n, s));
  }
  hIntegralX1_ = hIntegral(1.5) - 1;
  hIntegralN_ = hIntegral(static_cast<double>(n) + 0.5);
  squeeze_ = 2 - hIntegralInverse(hIntegral(2.5) - h(2));
}

// h(x) = x^-s, the density the discrete distribution is drawn under.
double ZipfDistribution::h(double x) const {
  return std::exp(-s_ * std::log(x));
}

// The integral of h: (x^(1-s) - 1) / (1 - s), log(x) at s = 1.
double ZipfDistribution::hIntegral(double x) const {
  const double logX = std::log(x);
  return expm1OverX((1 - s_) * logX) * logX;
}

double ZipfDistribution::hIntegralInverse(double x) const {
  double t = x * (1 - s_);
  if (t < -1) t = -1;  // rounding near the lower end
  return std::exp(log1pOverX(t) * x);
}

uint64_t ZipfDistribution::draw(const std::function<double()>& uniform) const {
  if (s_ == 0) {
    const auto k = static_cast<uint64_t>(uniform() * static_cast<double>(n_));
    return std::min(k, n_ - 1) + 1;
  }
  for (;;) {
    const double u = hIntegralN_ + uniform() * (hIntegralX1_ - hIntegralN_);
    const double x = hIntegralInverse(u);
    double k = std::floor(x + 0.5);
    if (k < 1) k = 1;
    if (k > static_cast<double>(n_)) k = static_cast<double>(n_);
    if (k - x <= squeeze_ || u >= hIntegral(k + 0.5) - h(k)) return static_cast<uint64_t>(k);
  }
}

double ZipfDistribution::probability(uint64_t k) const {
  if (k < 1 || k > n_) return 0;
  double total = 0;
  for (uint64_t i = 1; i <= n_; ++i) total += h(static_cast<double>(i));
  return h(static_cast<double>(k)) / total;
}

double ZipfDistribution::headMass(uint64_t count) const {
  double head = 0, total = 0;
  for (uint64_t i = 1; i <= n_; ++i) {
    const double p = h(static_cast<double>(i));
    total += p;
    if (i <= count) head += p;
  }
  return head / total;
}

}  // namespace gradsync
