// The DGC compressor's class (impl/dgc.cc), declared so that its tests can read the velocity and
// momentum buffers and the warm-up schedule, and raise the threshold's sample to the whole
// tensor. Everything else builds it through methods::makeDgc, which validates the options.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "compress/compressor.h"
#include "compress/select.h"

namespace gradsync::methods {

struct DgcOptions {
  double density = 0.001;        // R: the target fraction of elements sent after the warm-up
  double momentum = 0;           // m: the optimizer's momentum, applied here instead
  double clip = 0;               // bound on the L2 norm of this unit's gradient; 0 = off
  uint64_t warmupSteps = 0;      // steps over which the density falls from 0.25 to R
  double sampleFraction = 0.01;  // share of the elements sampled to estimate the threshold
};

class Dgc final : public CodecCompressor {
 public:
  Dgc(const DgcOptions& options, size_t elements);

  // An upper bound: at most twice the target count of the densest step is ever sent.
  size_t encodedBytes(size_t elements) const override;
  // Records the step (the warm-up is indexed by context.step), then all-gathers as any codec.
  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;
  // Updates the momentum and velocity with `x`, encodes the selected velocity values and clears
  // both buffers there. Uses the step of the exchange in progress.
  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t seed) override;
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override;

  // The target density of the given step (the warm-up schedule, then R); the step targets
  // k = max(1, round(density * n)) elements.
  double density(uint64_t step) const;

  // The buffers (zeros before the first encode or load, which allocate them).
  std::span<const float> velocity() {
    allocate();
    return velocity_;
  }
  std::span<const float> momentumBuffer() {
    allocate();
    return momentum_;
  }
  void saveState(StateWriter& out) const override;
  void loadState(StateReader& in) override;

 private:
  // momentum_ and velocity_ (8 bytes per element, zeroed) come with the first encode or load,
  // not the constructor: simulate and tune build a compressor per candidate and unit only to
  // ask its sizes, and vgg19's 143 M elements zeroed 1.1 GB each time.
  void allocate();
  float clipScale(std::span<const float> x) const;
  void accumulate(std::span<const float> x, float scale);
  uint32_t sampledThreshold(double density, uint64_t seed);
  void selectAtLeast(uint32_t threshold);

  const DgcOptions options_;
  const size_t elements_;
  uint64_t step_ = 0;
  std::vector<float> momentum_;  // u: momentum-corrected gradient
  std::vector<float> velocity_;  // v: accumulated u, cleared where sent
  std::vector<uint32_t> sample_;
  std::vector<uint32_t> selected_;
  std::vector<float> selectedValues_;
  std::vector<uint32_t> chosen_;
  TopKSelector selector_;
};

}  // namespace gradsync::methods
