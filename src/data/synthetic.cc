#include "data/synthetic.h"

#include <fmt/format.h>

#include "common/check.h"
#include "common/random.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// Streams of different purposes drawn from one sample must not coincide.
constexpr uint64_t kInputStream = 0x696E70757473ull;  // "inputs"
constexpr uint64_t kLabelStream = 0x6C6162656Cull;    // "label"
constexpr uint64_t kMaxSampleElements = uint64_t{1} << 30;

// A SplitMix64 sequence: each call returns the next mix of an incrementing counter.
class SplitMixStream {
 public:
  explicit SplitMixStream(uint64_t state) : state_(state) {}
  uint64_t next() { return rng::splitMix64(state_++); }

 private:
  uint64_t state_;
};

}  // namespace

SyntheticDataset::SyntheticDataset(SyntheticShape shape, uint64_t seed)
    : shape_(shape), seed_(seed), elements_(0) {
  if (shape.channels < 1 || shape.height < 1 || shape.width < 1 || shape.classes < 1) {
    throw ConfigError(fmt::format("synthetic data shape {}x{}x{} with {} classes: every "
                                  "dimension and the class count must be at least 1",
                                  shape.channels, shape.height, shape.width, shape.classes),
                      {.operation = "synthetic data"});
  }
  const uint64_t elements =
      uint64_t(shape.channels) * uint64_t(shape.height) * uint64_t(shape.width);
  if (elements > kMaxSampleElements) {
    throw ConfigError(fmt::format("synthetic sample of {} elements exceeds the limit of {}",
                                  elements, kMaxSampleElements),
                      {.operation = "synthetic data"});
  }
  elements_ = static_cast<size_t>(elements);
}

void SyntheticDataset::sample(uint64_t index, std::span<float> out) const {
  GS_CHECK_EQ(out.size(), elements_);
  SplitMixStream stream(rng::mixSeed(rng::mixSeed(seed_, kInputStream), index));
  size_t i = 0;
  for (; i + 1 < out.size(); i += 2) {  // two 24-bit floats per 64-bit draw
    const uint64_t bits = stream.next();
    out[i] = rng::unitFloat(bits) * 2.0f - 1.0f;
    out[i + 1] = rng::unitFloat(bits << 32) * 2.0f - 1.0f;
  }
  if (i < out.size()) out[i] = rng::unitFloat(stream.next()) * 2.0f - 1.0f;
}

int64_t SyntheticDataset::label(uint64_t index) const {
  const uint64_t bits = rng::mixSeed(rng::mixSeed(seed_, kLabelStream), index);
  // Multiply-shift maps 64 bits onto [0, classes) with negligible bias for small class counts.
  return static_cast<int64_t>(
      static_cast<uint64_t>((static_cast<__uint128_t>(bits) * uint64_t(shape_.classes)) >> 64));
}

void SyntheticDataset::batch(std::span<const size_t> indices, std::span<float> inputs,
                             std::span<int64_t> labels) const {
  GS_CHECK_EQ(inputs.size(), indices.size() * elements_);
  GS_CHECK_EQ(labels.size(), indices.size());
  for (size_t i = 0; i < indices.size(); ++i) {
    sample(indices[i], inputs.subspan(i * elements_, elements_));
    labels[i] = label(indices[i]);
  }
}

ImageSet SyntheticDataset::toImageSet(int64_t count) const {
  GS_CHECK_LE(int64_t{0}, count);
  if (shape_.classes > 256) {
    throw ConfigError(
        fmt::format("an ImageSet stores u8 labels: {} classes do not fit", shape_.classes),
        {.operation = "synthetic data"});
  }
  GS_CHECK_LE(uint64_t(count) * elements_, kMaxSampleElements);
  ImageSet set;
  set.count = count;
  set.rows = shape_.channels * shape_.height;
  set.cols = shape_.width;
  set.pixels.resize(static_cast<size_t>(count) * elements_);
  set.labels.resize(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) {
    SplitMixStream stream(rng::mixSeed(rng::mixSeed(seed_, kInputStream), uint64_t(n)));
    uint8_t* dst = set.pixels.data() + static_cast<size_t>(n) * elements_;
    for (size_t p = 0; p < elements_; p += 8) {  // eight pixels per 64-bit draw
      const uint64_t bits = stream.next();
      for (size_t b = 0; b < 8 && p + b < elements_; ++b) dst[p + b] = uint8_t(bits >> (8 * b));
    }
    set.labels[static_cast<size_t>(n)] = static_cast<uint8_t>(label(uint64_t(n)));
  }
  return set;
}

}  // namespace gradsync
