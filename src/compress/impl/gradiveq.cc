// gradiveq:D (GradiVeQ, Yu et al., NeurIPS'18; docs/algorithms.md and the [design] of the seed
// notes §6.3): the unit's flat gradient is cut into slices of M elements and each slice s is
// sent as its D coefficients c = Uᵀ·s in a shared orthonormal basis U (M x D). The map is
// linear, so the ring all-reduce sums coefficients and each rank decodes once: ŝ = U·(Σc)/P.
//
// U is the top-D principal directions of the aggregated gradient's slices (uncentred: the
// reconstruction U·Uᵀ·s is what is optimised). It is trained on dense steps: the first `train`
// exchanges, and max(1, train/10) exchanges every `refresh` exchanges (0: never refresh). On a
// dense step the raw gradient is all-reduced and averaged, and its slices accumulate into an
// M x M covariance; when the next exchange is a compressed one, U is recomputed from it (a
// deterministic Jacobi eigensolver with a sign convention) and the covariance restarts. Every
// rank computes U from the same aggregated gradient, so all ranks hold the bitwise same U
// without sending it.
//
// Steps are counted from this compressor's first exchange: the basis is not checkpointed, so a
// resumed run retrains it before compressing again. `sent` is this rank's own projection
// U·Uᵀ·s on compressed steps (error feedback keeps s - U·Uᵀ·s) and the exact input on dense
// steps. The last partial slice is zero-padded in the computation, not on the wire.
#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "collectives/reduce.h"
#include "common/check.h"
#include "compress/impl/methods.h"
#include "compress/matrix.h"
#include "gradsync/error.h"

namespace gradsync::methods {
namespace {

// Same default as the registry's row: used when the factory is called without a value.
constexpr double kDefaultDims = 4;
// Option defaults: slices of 32 (the seed notes suggest 16-64) and 100 training steps
// refreshed every 1000 (their T_train and the low end of their L).
constexpr double kDefaultSlice = 32;
constexpr double kDefaultTrain = 100;
constexpr double kDefaultRefresh = 1000;
// The Jacobi eigensolver runs once at the end of every training phase, O(M^3) per sweep:
// measured 0.4 ms at M = 32, 1.5 ms at 64, 20 ms at 128, 0.3 s at 256. 128 keeps it a small
// fraction of a dense step.
constexpr double kMaxSlice = 128;
constexpr double kMaxSteps = 1e12;
// Slices summed in a float partial covariance before it is added to the double one: bounds
// the float rounding of long sums.
constexpr size_t kCovarianceBlock = 256;

struct Options {
  size_t dims = 4;
  size_t slice = 32;
  uint64_t train = 100;
  uint64_t refresh = 1000;
  uint64_t refreshLength() const { return std::max<uint64_t>(1, train / 10); }
};

class GradiVeQ final : public Compressor {
 public:
  GradiVeQ(Options options, size_t elements)
      : o_(options),
        elements_(elements),
        full_(elements / options.slice),
        tail_(elements % options.slice),
        covariance_(options.slice * options.slice, 0.0),
        partial_(options.slice * options.slice),
        code_(options.dims * (full_ + (tail_ > 0 ? 1 : 0))),
        padded_(options.slice, 0.0f) {}

  Aggregation aggregation() const override { return Aggregation::kAllreduce; }

  // The compressed steps' size; dense (training) steps send 4 bytes per element.
  size_t encodedBytes(size_t elements) const override {
    return sizeof(float) * o_.dims * ((elements + o_.slice - 1) / o_.slice);
  }

  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override {
    GS_CHECK_EQ(grad.size(), elements_);
    GS_CHECK_EQ(sent.size(), elements_);
    const uint64_t step = step_++;
    if (dense(step)) {
      exchangeDense(context, grad, sent, stats, !dense(step + 1));
    } else {
      exchangeCompressed(context, grad, sent, stats);
    }
  }

  // Mid-phase, the covariance accumulated so far is state too.
  void saveState(StateWriter& out) const override {
    out.write(step_);
    out.write(basis_);
    out.write(covariance_);
  }
  void loadState(StateReader& in) override {
    step_ = in.readU64();
    in.read(basis_);
    if (!basis_.empty() && basis_.size() != o_.dims * o_.slice) {
      throw DataError(fmt::format("{}: a basis of {} values where this run has {} x {}", in.what(),
                                  basis_.size(), o_.dims, o_.slice));
    }
    in.readExact(covariance_);
  }

 private:
  bool dense(uint64_t step) const {
    return step < o_.train || (o_.refresh > 0 && step % o_.refresh < o_.refreshLength());
  }

  void exchangeDense(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                     ExchangeStats& stats, bool lastOfPhase);
  void exchangeCompressed(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                          ExchangeStats& stats);
  void accumulate(std::span<const float> g);
  void train();
  void encode(std::span<const float> x);
  void decode(std::span<float> out);

  linalg::ConstMatrixView basis() const { return {basis_.data(), o_.dims, o_.slice}; }

  Options o_;
  size_t elements_;
  size_t full_;  // complete slices
  size_t tail_;  // elements of the last, partial slice (0 if none)
  uint64_t step_ = 0;
  std::vector<float> basis_;        // Uᵀ (D x M, row-major); empty until the first training
  std::vector<double> covariance_;  // Σ s·sᵀ over the current phase's slices (M x M)
  std::vector<float> partial_;      // one block's Σ s·sᵀ in float
  std::vector<float> code_;         // D coefficients per slice: what travels
  std::vector<float> padded_;       // the partial slice, zero-padded to M
  std::vector<double> values_, vectors_;
};

void GradiVeQ::exchangeDense(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                             ExchangeStats& stats, bool lastOfPhase) {
  std::copy(grad.begin(), grad.end(), sent.begin());
  if (!grad.empty()) allreduce(context.transport, grad, ReduceOp::kSum, context.collective);
  scale(grad.data(), grad.size(), 1.0f / static_cast<float>(context.transport.size()));
  Nanos start = context.clock->now();
  accumulate(grad);
  if (lastOfPhase) train();
  stats.encodeSeconds += secondsSince(*context.clock, start);
}

void GradiVeQ::exchangeCompressed(ExchangeContext& context, std::span<float> grad,
                                  std::span<float> sent, ExchangeStats& stats) {
  GS_CHECK(!basis_.empty());  // step 0 is always a dense (training) step
  Nanos start = context.clock->now();
  encode(grad);
  stats.encodeSeconds += secondsSince(*context.clock, start);
  start = context.clock->now();
  decode(sent);
  stats.decodeSeconds += secondsSince(*context.clock, start);
  if (!code_.empty()) allreduce(context.transport, code_, ReduceOp::kSum, context.collective);
  start = context.clock->now();
  scale(code_.data(), code_.size(), 1.0f / static_cast<float>(context.transport.size()));
  decode(grad);
  stats.decodeSeconds += secondsSince(*context.clock, start);
}

void GradiVeQ::accumulate(std::span<const float> g) {
  const size_t m = o_.slice;
  linalg::MatrixView partial{partial_.data(), m, m};
  for (size_t first = 0; first < full_; first += kCovarianceBlock) {
    linalg::ConstMatrixView block(g.data() + first * m, std::min(kCovarianceBlock, full_ - first),
                                  m);
    linalg::gram(block, partial);
    for (size_t i = 0; i < m * m; ++i) covariance_[i] += partial_[i];
  }
  if (tail_ == 0) return;
  const float* s = g.data() + full_ * m;
  for (size_t i = 0; i < tail_; ++i) {
    for (size_t j = 0; j < tail_; ++j) covariance_[i * m + j] += static_cast<double>(s[i]) * s[j];
  }
}

void GradiVeQ::train() {
  linalg::symmetricEigen(covariance_, o_.slice, values_, vectors_);
  basis_.assign(vectors_.data(), vectors_.data() + o_.dims * o_.slice);  // top D, as float
  std::fill(covariance_.begin(), covariance_.end(), 0.0);
}

void GradiVeQ::encode(std::span<const float> x) {
  const size_t m = o_.slice, d = o_.dims;
  linalg::multiplyTransposedB({x.data(), full_, m}, basis(), {code_.data(), full_, d});
  if (tail_ == 0) return;
  std::copy_n(x.data() + full_ * m, tail_, padded_.begin());
  std::fill(padded_.data() + tail_, padded_.data() + padded_.size(), 0.0f);
  linalg::multiplyTransposedB({padded_.data(), 1, m}, basis(), {code_.data() + full_ * d, 1, d});
}

void GradiVeQ::decode(std::span<float> out) {
  const size_t m = o_.slice, d = o_.dims;
  linalg::multiply({code_.data(), full_, d}, basis(), {out.data(), full_, m});
  if (tail_ == 0) return;
  linalg::multiply({code_.data() + full_ * d, 1, d}, basis(), {padded_.data(), 1, m});
  std::copy_n(padded_.begin(), tail_, out.data() + full_ * m);
}

// The parameter `name` as an integer in [low, high], or ConfigError naming the method, the
// parameter and the valid range ("gradiveq: slice needs an integer 1 <= slice <= 128").
uint64_t integerIn(double value, double low, double high, const char* label, const char* name,
                   const char* alternative = "") {
  if (!(value >= low && value <= high && value == std::floor(value))) {
    throw ConfigError(fmt::format("gradiveq{} needs {}an integer {} <= {} <= {}, got {}", label,
                                  alternative, low, name, high, value));
  }
  return static_cast<uint64_t>(value);
}

}  // namespace

std::unique_ptr<Compressor> makeGradiVeQ(const MethodArgs& args,
                                         std::span<const TensorShape> unit) {
  Options o;
  o.slice = integerIn(args.number("slice", kDefaultSlice), 1, kMaxSlice, ": slice", "slice");
  const double dims = args.hasValue || args.value != 0 ? args.value : kDefaultDims;
  o.dims = integerIn(dims, 1, static_cast<double>(o.slice), ":D", "D");
  o.train = integerIn(args.number("train", kDefaultTrain), 1, kMaxSteps, ": train", "train");
  const double refresh = args.number("refresh", kDefaultRefresh);
  if (refresh != 0) {
    // A period no longer than its dense phase would never compress.
    integerIn(refresh, static_cast<double>(o.refreshLength() + 1), kMaxSteps, ": refresh",
              "refresh", "0 (never refresh) or ");
  }
  o.refresh = static_cast<uint64_t>(refresh);
  size_t elements = 0;
  for (const TensorShape& t : unit) elements += t.elements;
  return std::make_unique<GradiVeQ>(o, elements);
}

}  // namespace gradsync::methods
