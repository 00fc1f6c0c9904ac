// randomk:R — k = max(1, round(R n)) elements at indices drawn uniformly without replacement
// from a seed every rank shares, so all ranks pick the same indices and the k values are summed
// inside the ring (a linear code of length k: 4k bytes per rank through the ring, no index on
// the wire). The values go as they are, not scaled by n/k: error feedback (on by default) keeps
// what was not sent, and an unbiased n/k scaling would inflate the sent part while the residual
// still holds the rest, counting it twice.
//
// The seed is the exchange's (run seed, step) mixed with a hash of the unit's tensor names and
// sizes, so units of equal size do not select the same positions at the same step. Indices come
// from Floyd's algorithm (k draws, each a portable rng::uniformBelow) into a bitmap of n bits,
// read back in ascending order; they are cached per seed, since an exchange encodes and decodes
// twice with the same one.
#include <algorithm>
#include <bit>
#include <random>

#include "common/check.h"
#include "common/random.h"
#include "compress/impl/methods.h"
#include "compress/select.h"
#include "compress/sparse_selection.h"

namespace gradsync::methods {
namespace {

// FNV-1a over the names and sizes: identical on every rank and platform (std::hash is not).
uint64_t unitSalt(std::span<const TensorShape> unit) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](uint64_t byte) { h = (h ^ byte) * 0x100000001b3ull; };
  for (const TensorShape& t : unit) {
    for (char c : t.name) mix(static_cast<unsigned char>(c));
    for (int shift = 0; shift < 64; shift += 8) mix((t.elements >> shift) & 0xff);
  }
  return h;
}

class RandomK final : public LinearCompressor {
 public:
  RandomK(double density, uint64_t salt) : density_(density), salt_(salt) {}

  size_t codeLength(size_t elements) const override { return selectionCount(elements, density_); }

  void encode(std::span<const float> x, std::span<float> code, uint64_t seed) override {
    const std::vector<uint32_t>& indices = indicesFor(x.size(), seed);
    GS_CHECK_EQ(code.size(), indices.size());
    for (size_t j = 0; j < indices.size(); ++j) code[j] = x[indices[j]];
  }

  void decode(std::span<const float> code, std::span<float> out, uint64_t seed) const override {
    const std::vector<uint32_t>& indices = indicesFor(out.size(), seed);
    GS_CHECK_EQ(code.size(), indices.size());
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t j = 0; j < indices.size(); ++j) out[indices[j]] = code[j];
  }

 private:
  const std::vector<uint32_t>& indicesFor(size_t elements, uint64_t seed) const;

  double density_;
  uint64_t salt_;
  // The cache of the last draw. Mutable because decode() is const; compressors are used by
  // one thread (compressor.h), so this is not a race.
  mutable std::vector<uint64_t> bitmap_;
  mutable std::vector<uint32_t> indices_;
  mutable uint64_t cachedSeed_ = 0;
  mutable size_t cachedElements_ = 0;
  mutable bool cached_ = false;
};

const std::vector<uint32_t>& RandomK::indicesFor(size_t elements, uint64_t seed) const {
  if (cached_ && cachedSeed_ == seed && cachedElements_ == elements) return indices_;
  GS_CHECK_LE(elements, size_t{UINT32_MAX});
  const size_t k = codeLength(elements);
  bitmap_.assign((elements + 63) / 64, 0);
  std::mt19937_64 engine(rng::mixSeed(seed, salt_));
  // Floyd: for j = n-k .. n-1 draw t in [0, j] and take t, or j if t is taken already. Every
  // k-subset comes out with the same probability, in exactly k draws.
  for (uint64_t j = elements - k; j < elements; ++j) {
    uint64_t t = rng::uniformBelow(engine, j + 1);
    if (bitmap_[t >> 6] >> (t & 63) & 1) t = j;
    bitmap_[t >> 6] |= uint64_t{1} << (t & 63);
  }
  indices_.resize(k);
  size_t taken = 0;
  for (size_t w = 0; w < bitmap_.size(); ++w) {
    for (uint64_t bits = bitmap_[w]; bits != 0; bits &= bits - 1) {
      indices_[taken++] = static_cast<uint32_t>(w * 64 + std::countr_zero(bits));
    }
  }
  GS_CHECK_EQ(taken, k);
  cached_ = true;
  cachedSeed_ = seed;
  cachedElements_ = elements;
  return indices_;
}

}  // namespace

std::unique_ptr<Compressor> makeRandomK(const MethodArgs& args, std::span<const TensorShape> unit) {
  return std::make_unique<RandomK>(checkedDensity(args, "randomk"), unitSalt(unit));
}

}  // namespace gradsync::methods
