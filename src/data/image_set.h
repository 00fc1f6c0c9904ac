// In-memory labelled image datasets (Fashion-MNIST, synthetic) and their conversion to the
// float inputs a model consumes. Torch-free on purpose: the torch layer wraps these buffers in
// tensors (torch::from_blob) without this code depending on LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace gradsync {

// Per-pixel statistics of the Fashion-MNIST training set after scaling to [0, 1] (x / 255):
// population mean and standard deviation over all 60,000 x 28 x 28 pixels, computed in double
// precision from the files of Debian's dataset-fashion-mnist (see docs/data.md; the test
// FashionMnist.NormalizationConstantsMatchTrainingSet recomputes them).
inline constexpr float kFashionMnistMean = 0.28604060f;
inline constexpr float kFashionMnistStd = 0.35302425f;
inline constexpr int kFashionMnistClasses = 10;

// A set of `count` single-channel images of rows x cols u8 pixels with one label each.
// Invariants (established by the readers and generators, relied on by the helpers below):
// pixels.size() == count * rows * cols (row-major, image after image) and
// labels.size() == count. A plain value type: copyable, no shared state.
struct ImageSet {
  int64_t count = 0;
  int rows = 0;
  int cols = 0;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;

  size_t imageSize() const { return static_cast<size_t>(rows) * static_cast<size_t>(cols); }
};

// Mean and standard deviation applied as (x / 255 - mean) / std.
struct Normalization {
  float mean = kFashionMnistMean;
  float std = kFashionMnistStd;
};

// Writes every pixel of `set` as (x / 255 - mean) / std into `out` (resized to
// count * rows * cols). std must be positive (ConfigError otherwise). Each of the 256 possible
// values is computed once, so the result is bit-identical whatever the compiler vectorises.
void normalizeInto(const ImageSet& set, float mean, float std, std::vector<float>& out);

// Gathers the images at `indices` (in that order) into `pixels` as normalised floats and their
// labels into `labels` as int64 (the dtype torch's cross-entropy expects). The caller owns both
// buffers; their sizes must be indices.size() * imageSize() and indices.size(), and every index
// must be < set.count (a violation is a bug in the caller: InternalError via GS_CHECK).
void gatherBatch(const ImageSet& set, std::span<const size_t> indices, Normalization norm,
                 std::span<float> pixels, std::span<int64_t> labels);

}  // namespace gradsync
