// demo:K[,side=N] — DeMo's codec (Peng et al. 2024, "DeMo: Decoupled Momentum Optimization"):
// each tensor of the unit is cut into chunks of N² elements (default N = 64: 4,096), each chunk
// read as an N×N matrix (row-major; the last chunk of a tensor zero-padded) and taken to the
// frequency domain by the orthonormal 2-D DCT-II, Y = D X Dᵀ; the K (default 32) coefficients of
// largest magnitude are sent (topk's selection and ties), each as its index in the chunk (bit
// width of N² − 1 bits: 12) and its float32 value. Decoding adds Σ y_uv D[u]ᵀ D[v] over the sent
// coefficients (each the outer product of two basis rows, N² multiply-adds) and drops what
// lands in the padding. Error feedback is on by default: with ef_decay=β its residual is DeMo's
// momentum (δ ← βδ + g, δ −= what was sent), and `--optimizer sign` steps by the sign of the
// ranks' average (docs/algorithms.md, "DeMo").
//
// Wire, little-endian: [every chunk's indices, packed as bit_pack.h's wide codes, chunk by chunk,
// ascending within a chunk][their float32 values, in the same order]: ⌈K_t w / 8⌉ + 4 K_t bytes
// for K_t = K per chunk in all. Deterministic: a fixed order of every sum, so every rank decodes
// the same encodings to the same bits; the seed is not used.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>

#include <fmt/format.h>

#include "compress/bit_pack.h"
#include "compress/bucket_codec.h"
#include "compress/impl/methods.h"
#include "compress/matrix.h"
#include "compress/select.h"

namespace gradsync::methods {
namespace {

constexpr size_t kMaxSide = 256;  // indices of at most 16 bits

// The orthonormal DCT-II matrix: D[k][i] = s_k cos(π (2i + 1) k / 2N), s_0 = √(1/N), else √(2/N).
std::vector<float> dctMatrix(size_t n) {
  std::vector<float> d(n * n);
  for (size_t k = 0; k < n; ++k) {
    const double scale = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(n));
    for (size_t i = 0; i < n; ++i) {
      d[k * n + i] = static_cast<float>(
          scale * std::cos(std::numbers::pi * static_cast<double>((2 * i + 1) * k) /
                           static_cast<double>(2 * n)));
    }
  }
  return d;
}

class DctTopK final : public CodecCompressor {
 public:
  DctTopK(size_t k, size_t side, std::span<const TensorShape> unit)
      : side_(side),
        k_(k),
        indexBits_(std::max(1, static_cast<int>(std::bit_width(side * side - 1)))),
        layout_(unit, side * side),
        dct_(dctMatrix(side)),
        block_(side * side),
        product_(side * side),
        coefficients_(side * side) {}

  size_t encodedBytes(size_t elements) const override {
    const size_t sent = layout_.count(elements) * k_;
    return packedBytes(sent, indexBits_) + sent * sizeof(float);
  }

  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t) override {
    out.assign(encodedBytes(x.size()), 0);
    WideWriter indices(indexBits_, out.data());
    uint8_t* values = out.data() + packedBytes(layout_.count(x.size()) * k_, indexBits_);
    layout_.forEachOrEstimate(x.size(), [&](size_t begin, size_t size) {
      std::fill(block_.begin(), block_.end(), 0.0f);
      std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(begin), size, block_.begin());
      // Y = D X Dᵀ, in two products.
      linalg::multiply(matrix(dct_), matrix(block_), view(product_));
      linalg::multiplyTransposedB(matrix(product_), matrix(dct_), view(coefficients_));
      selector_.selectByMagnitude(coefficients_, k_, selected_);
      for (uint32_t index : selected_) {
        indices.put(index);
        std::memcpy(values, &coefficients_[index], sizeof(float));
        values += sizeof(float);
      }
    });
    indices.finish();
  }

  // Validates the whole encoding (size, every index inside the chunk and strictly ascending)
  // before adding anything, so a malformed one throws ProtocolError with `out` untouched.
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override {
    if (in.size() != encodedBytes(out.size())) {
      throw ProtocolError(fmt::format("demo encoding of {} elements has {} bytes, not {}",
                                      out.size(), in.size(), encodedBytes(out.size())));
    }
    const size_t sent = layout_.count(out.size()) * k_;
    {
      WideReader indices(indexBits_, in.data());
      for (size_t j = 0, previous = 0; j < sent; ++j) {
        const size_t index = indices.get();
        if (index >= side_ * side_ || (j % k_ > 0 && index <= previous)) {
          throw ProtocolError(fmt::format(
              "demo encoding: coefficient index {} of a {}x{} chunk {}", index, side_, side_,
              index >= side_ * side_ ? "is outside it" : "is not above the one before"));
        }
        previous = index;
      }
    }
    WideReader indices(indexBits_, in.data());
    const uint8_t* values = in.data() + packedBytes(sent, indexBits_);
    std::vector<float> block(side_ * side_);
    layout_.forEachOrEstimate(out.size(), [&](size_t begin, size_t size) {
      std::fill(block.begin(), block.end(), 0.0f);
      for (size_t j = 0; j < k_; ++j) {
        const uint32_t index = indices.get();
        float value;
        std::memcpy(&value, values, sizeof(float));
        values += sizeof(float);
        addBasis(index / side_, index % side_, value, block);
      }
      for (size_t i = 0; i < size; ++i) out[begin + i] += block[i];
    });
  }

 private:
  // block += value · D[u]ᵀ D[v]: element (i, j) gains value · D[u][i] · D[v][j].
  void addBasis(size_t u, size_t v, float value, std::vector<float>& block) const {
    const float* du = dct_.data() + u * side_;
    const float* dv = dct_.data() + v * side_;
    for (size_t i = 0; i < side_; ++i) {
      const float a = value * du[i];
      float* row = block.data() + i * side_;
      for (size_t j = 0; j < side_; ++j) row[j] += a * dv[j];
    }
  }

  linalg::ConstMatrixView matrix(const std::vector<float>& m) const {
    return {m.data(), side_, side_};
  }
  linalg::MatrixView view(std::vector<float>& m) const { return {m.data(), side_, side_}; }

  size_t side_;
  size_t k_;
  int indexBits_;
  BucketLayout layout_;
  std::vector<float> dct_;  // D, row-major
  std::vector<float> block_, product_, coefficients_;
  TopKSelector selector_;
  std::vector<uint32_t> selected_;
};

}  // namespace

std::unique_ptr<Compressor> makeDemo(const MethodArgs& args, std::span<const TensorShape> unit) {
  const double side = args.number("side", 64);
  if (!(side >= 1 && side <= static_cast<double>(kMaxSide)) || side != std::floor(side)) {
    throw ConfigError(
        fmt::format("demo side needs a whole number 1 <= side <= {}, got {}", kMaxSide, side),
        {.hint = "side=64 transforms chunks of 64x64 elements"});
  }
  const double k = args.value;
  if (!(k >= 1 && k <= side * side) || k != std::floor(k)) {
    throw ConfigError(
        fmt::format("demo:K needs a whole number 1 <= K <= side² = {}, got {}", side * side, k),
        {.hint = "demo:32 sends 32 of each chunk's 4,096 coefficients"});
  }
  return std::make_unique<DctTopK>(static_cast<size_t>(k), static_cast<size_t>(side), unit);
}

}  // namespace gradsync::methods
