#include "data/image_set.h"

#include <fmt/format.h>

#include <array>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// Maps each u8 value to its normalised float. A table keeps the per-pixel cost at one load and
// makes the values independent of how the arithmetic would have been vectorised.
std::array<float, 256> normalizationTable(float mean, float std) {
  if (!(std > 0.0f)) {
    throw ConfigError(fmt::format("normalisation std must be positive, got {}", std),
                      {.operation = "normalize dataset"});
  }
  std::array<float, 256> table{};
  for (int v = 0; v < 256; ++v) table[v] = (static_cast<float>(v) / 255.0f - mean) / std;
  return table;
}

}  // namespace

void normalizeInto(const ImageSet& set, float mean, float std, std::vector<float>& out) {
  const auto table = normalizationTable(mean, std);
  GS_CHECK_EQ(set.pixels.size(), static_cast<size_t>(set.count) * set.imageSize());
  out.resize(set.pixels.size());
  for (size_t i = 0; i < set.pixels.size(); ++i) out[i] = table[set.pixels[i]];
}

void gatherBatch(const ImageSet& set, std::span<const size_t> indices, Normalization norm,
                 std::span<float> pixels, std::span<int64_t> labels) {
  const auto table = normalizationTable(norm.mean, norm.std);
  const size_t imageSize = set.imageSize();
  GS_CHECK_EQ(pixels.size(), indices.size() * imageSize);
  GS_CHECK_EQ(labels.size(), indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    const size_t index = indices[i];
    GS_CHECK_LT(index, static_cast<size_t>(set.count));
    const uint8_t* src = set.pixels.data() + index * imageSize;
    float* dst = pixels.data() + i * imageSize;
    for (size_t p = 0; p < imageSize; ++p) dst[p] = table[src[p]];
    labels[i] = set.labels[index];
  }
}

}  // namespace gradsync
