// powersgd:RANK (Vogels, Karimireddy, Jaggi, NeurIPS'19): one step of subspace iteration per
// exchange, warm-started from the previous step's Q, so a rank-RANK approximation of the
// averaged gradient costs two small all-reduces.
//
// Each tensor of the unit with at least two dims is viewed as a matrix M (dims[0] x the rest).
// Round 1: P = M·Q, all-reduced (summed) together with the tensors that go uncompressed (one
// dim, or where RANK·(rows + cols) > rows·cols / 2); P is orthonormalised. Round 2: Q = Mᵀ·P,
// all-reduced and divided by the world size; the result is M̂ = P·Qᵀ and that Q is the next step's
// warm start. `sent` is M̂ itself (the aggregated approximation, as in the authors' code and
// PyTorch's powerSGD hook), so error feedback keeps M - M̂; uncompressed tensors are sent exactly.
// Every rank computes the orthonormalisation and M̂ from the same summed vectors, so all ranks
// end bitwise identical. Q starts from the run seed (identical on all ranks); a column of Q
// that comes back exactly zero (a zero gradient, a dependent column of P) is redrawn from the
// seed and step, otherwise it would stay zero forever (P = M·0).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "collectives/reduce.h"
#include "common/check.h"
#include "common/random.h"
#include "compress/impl/methods.h"
#include "compress/matrix.h"
#include "gradsync/error.h"

namespace gradsync::methods {
namespace {

// Same default as the registry's row: used when the factory is called without a value.
constexpr double kDefaultRank = 4;
// A rank at or above every dimension only means "uncompressed"; the cap keeps sizes in range.
constexpr double kMaxRank = 65536;

// One tensor of the unit and where its pieces live in the exchange buffers.
struct Slot {
  size_t offset = 0;  // in the unit's buffer
  size_t rows = 0;
  size_t cols = 0;
  bool compressed = false;
  size_t round1 = 0;  // offset of its P (rows x rank) or of its raw values in round 1's vector
  size_t q = 0;       // offset of its Qᵀ (rank x cols) in q_, compressed tensors only
};

class PowerSgd final : public Compressor {
 public:
  PowerSgd(size_t rank, std::span<const TensorShape> unit) : rank_(rank) {
    size_t pFloats = 0, raw = 0, qFloats = 0;
    for (const TensorShape& t : unit) {
      Slot s{.offset = elements_};
      elements_ += t.elements;
      if (t.dims.size() >= 2) {
        s.rows = static_cast<size_t>(t.dims[0]);
        s.cols = s.rows == 0 ? 0 : t.elements / s.rows;
      }
      // Compressed only where it at least halves the bytes (PyTorch's hook, min rate 2): a
      // low-rank pair for a near-square small matrix would cost accuracy for nothing.
      s.compressed = t.dims.size() >= 2 && rank_ < std::min(s.rows, s.cols) &&
                     2 * rank_ * (s.rows + s.cols) <= s.rows * s.cols;
      if (s.compressed) {
        s.round1 = pFloats;
        s.q = qFloats;
        pFloats += s.rows * rank_;
        qFloats += rank_ * s.cols;
      } else {
        s.rows = 1;
        s.cols = t.elements;
        s.round1 = raw;  // rebased past the P's below
        raw += t.elements;
      }
      slots_.push_back(s);
    }
    for (Slot& s : slots_) {
      if (!s.compressed) s.round1 += pFloats;
    }
    round1_.resize(pFloats + raw);
    q_.resize(qFloats);
  }

  Aggregation aggregation() const override { return Aggregation::kAllreduce; }

  // Both rounds for the unit this compressor was built for; any other count is priced as one
  // flat tensor, which PowerSGD sends uncompressed.
  size_t encodedBytes(size_t elements) const override {
    if (elements != elements_) return elements * sizeof(float);
    return (round1_.size() + q_.size()) * sizeof(float);
  }

  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;

  void saveState(StateWriter& out) const override {
    out.write(uint64_t{started_});
    out.write(q_);
  }
  void loadState(StateReader& in) override {
    started_ = in.readU64() != 0;
    in.readExact(q_);
  }

 private:
  linalg::MatrixView matrix(std::span<float> unit, const Slot& s) const {
    return {unit.data() + s.offset, s.rows, s.cols};
  }
  linalg::MatrixView p(const Slot& s) { return {round1_.data() + s.round1, s.rows, rank_}; }
  linalg::MatrixView qT(const Slot& s) { return {q_.data() + s.q, rank_, s.cols}; }

  // Fills row `k` of every compressed tensor's Qᵀ for which `redraw(slot, k)` holds with
  // uniform values in [-1, 1) drawn from `seed` and the tensor's index.
  template <typename Predicate>
  void drawQ(uint64_t seed, Predicate redraw);

  size_t rank_;
  size_t elements_ = 0;
  std::vector<Slot> slots_;
  std::vector<float> round1_;  // P of every compressed tensor, then the uncompressed values
  std::vector<float> q_;       // Qᵀ of every compressed tensor: the warm start between steps
  bool started_ = false;
};

template <typename Predicate>
void PowerSgd::drawQ(uint64_t seed, Predicate redraw) {
  for (size_t t = 0; t < slots_.size(); ++t) {
    const Slot& s = slots_[t];
    if (!s.compressed) continue;
    std::mt19937_64 engine(rng::mixSeed(seed, t));
    linalg::MatrixView q = qT(s);
    for (size_t k = 0; k < rank_; ++k) {
      if (!redraw(s, k)) continue;
      for (size_t j = 0; j < s.cols; ++j) q(k, j) = 2.0f * rng::unitFloat(engine()) - 1.0f;
    }
  }
}

void PowerSgd::exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                        ExchangeStats& stats) {
  GS_CHECK_EQ(grad.size(), elements_);
  GS_CHECK_EQ(sent.size(), elements_);
  if (!started_) {
    drawQ(context.seed, [](const Slot&, size_t) { return true; });
    started_ = true;
  }
  Nanos start = context.clock->now();
  for (const Slot& s : slots_) {
    if (s.compressed) {
      linalg::multiplyTransposedB(matrix(grad, s), qT(s), p(s));  // P = M·Q
    } else {
      std::copy_n(grad.data() + s.offset, s.cols, round1_.data() + s.round1);
    }
  }
  stats.encodeSeconds += secondsSince(*context.clock, start);
  if (!round1_.empty()) allreduce(context.transport, round1_, ReduceOp::kSum, context.collective);
  start = context.clock->now();
  for (const Slot& s : slots_) {
    if (!s.compressed) continue;
    linalg::orthonormalizeColumns(p(s));
    linalg::multiplyTransposedA(p(s), matrix(grad, s), qT(s));  // Qᵀ = Pᵀ·M
  }
  stats.encodeSeconds += secondsSince(*context.clock, start);
  if (!q_.empty()) allreduce(context.transport, q_, ReduceOp::kSum, context.collective);
  start = context.clock->now();
  const float inverse = 1.0f / static_cast<float>(context.transport.size());
  scale(q_.data(), q_.size(), inverse);
  for (const Slot& s : slots_) {
    float* out = grad.data() + s.offset;
    const size_t n = s.rows * s.cols;
    if (s.compressed) {
      linalg::multiply(p(s), qT(s), matrix(grad, s));  // M̂ = P·Qᵀ
      std::copy_n(out, n, sent.data() + s.offset);
    } else {
      std::copy_n(out, n, sent.data() + s.offset);
      const float* sum = round1_.data() + s.round1;
      for (size_t i = 0; i < n; ++i) out[i] = sum[i] * inverse;
    }
  }
  drawQ(rng::mixSeed(context.seed, context.step), [this](const Slot& s, size_t k) {
    const float* row = q_.data() + s.q + k * s.cols;
    return std::all_of(row, row + s.cols, [](float v) { return v == 0.0f; });
  });
  stats.decodeSeconds += secondsSince(*context.clock, start);
}

}  // namespace

std::unique_ptr<Compressor> makePowerSgd(const MethodArgs& args,
                                         std::span<const TensorShape> unit) {
  const double rank = args.hasValue || args.value != 0 ? args.value : kDefaultRank;
  if (!(rank >= 1 && rank <= kMaxRank && rank == std::floor(rank))) {
    throw ConfigError(
        fmt::format("powersgd:RANK needs an integer 1 <= RANK <= {}, got {}", kMaxRank, rank));
  }
  for (const TensorShape& t : unit) {
    size_t product = 1;
    for (int64_t d : t.dims) product *= d < 0 ? 0 : static_cast<size_t>(d);
    if (product != t.elements) {
      throw ConfigError(fmt::format("powersgd: tensor '{}' has dims [{}] but {} elements", t.name,
                                    fmt::join(t.dims, ","), t.elements));
    }
  }
  return std::make_unique<PowerSgd>(static_cast<size_t>(rank), unit);
}

}  // namespace gradsync::methods
