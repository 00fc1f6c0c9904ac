// Deterministic synthetic data for benchmarks and tests that must not depend on a dataset
// being installed: random inputs of any shape (C, H, W) and labels in [0, classes).
//
// Sample i is a pure function of (seed, i): its values come from a generator seeded with
// mix(seed, i), so any batch, in any order, on any rank, is reproducible without generating the
// samples before it, and costs one 64-bit mix per 2 floats (~2 ns per float).
// Thread safety: all methods are const and touch no shared state; call them concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "data/image_set.h"

namespace gradsync {

struct SyntheticShape {
  int channels = 1;
  int height = 28;
  int width = 28;
  int classes = 10;
};

class SyntheticDataset {
 public:
  // Throws ConfigError unless channels, height, width and classes are >= 1 and one sample has
  // at most 2^30 elements.
  SyntheticDataset(SyntheticShape shape, uint64_t seed);

  const SyntheticShape& shape() const { return shape_; }
  // channels * height * width.
  size_t sampleElements() const { return elements_; }

  // Sample `index`'s inputs, uniform in [-1, 1), into `out` (size sampleElements()).
  void sample(uint64_t index, std::span<float> out) const;
  // Sample `index`'s label, uniform in [0, classes); independent of its inputs (nothing to
  // learn: the data exercises compute and communication, not accuracy).
  int64_t label(uint64_t index) const;

  // The samples at `indices`, one after the other, into `inputs`
  // (indices.size() * sampleElements() floats) and their labels into `labels`; the caller owns
  // both buffers (sizes checked with GS_CHECK).
  void batch(std::span<const size_t> indices, std::span<float> inputs,
             std::span<int64_t> labels) const;

  // `count` samples as a u8 ImageSet (channels folded into rows: rows = channels * height), for
  // code paths that expect the dataset reader's output; pixels uniform in [0, 255].
  ImageSet toImageSet(int64_t count) const;

 private:
  SyntheticShape shape_;
  uint64_t seed_;
  size_t elements_;
};

}  // namespace gradsync
