// Error feedback (Seide et al. 2014; Karimireddy et al. 2019): what a compressor failed to send
// is kept per unit and added to the next step's gradient, so no gradient is lost, only delayed.
// Invariant after every exchange: residual + (sum of what was sent so far) == sum of inputs.
// With a decay β < 1 (SparseLoCo's accumulator, e <- βe + Δ) the residual is scaled by β before
// it is added: what waits too long fades instead of being sent in full, and β = 1 is the above.
#pragma once

#include <memory>
#include <vector>

#include "compress/compressor.h"

namespace gradsync {

class ErrorFeedback : public Compressor {
 public:
  ErrorFeedback(std::unique_ptr<Compressor> inner, size_t elements, float decay = 1);

  Aggregation aggregation() const override { return inner_->aggregation(); }
  size_t encodedBytes(size_t elements) const override { return inner_->encodedBytes(elements); }
  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;

  SparseBudget* sparseBudget() override { return inner_->sparseBudget(); }
  void saveState(StateWriter& out) const override;
  void loadState(StateReader& in) override;

  std::span<const float> residual() const { return residual_; }
  const Compressor& inner() const { return *inner_; }

 private:
  std::unique_ptr<Compressor> inner_;
  std::vector<float> residual_;
  float decay_;
};

}  // namespace gradsync
