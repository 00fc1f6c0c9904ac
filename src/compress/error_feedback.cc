#include "compress/error_feedback.h"

#include "common/check.h"

namespace gradsync {

ErrorFeedback::ErrorFeedback(std::unique_ptr<Compressor> inner, size_t elements, float decay)
    : inner_(std::move(inner)), residual_(elements, 0.0f), decay_(decay) {}

// The residual buffer holds the corrected input during the exchange, then input - sent.
void ErrorFeedback::exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                             ExchangeStats& stats) {
  GS_CHECK_EQ(grad.size(), residual_.size());
  // decay_ * r is r exactly at 1, so plain error feedback keeps its bits.
  for (size_t i = 0; i < grad.size(); ++i) {
    grad[i] += decay_ * residual_[i];
    residual_[i] = grad[i];
  }
  inner_->exchange(context, grad, sent, stats);
  for (size_t i = 0; i < residual_.size(); ++i) residual_[i] -= sent[i];
}

void ErrorFeedback::saveState(StateWriter& out) const {
  out.write(residual_);
  inner_->saveState(out);
}

void ErrorFeedback::loadState(StateReader& in) {
  in.readExact(residual_);
  inner_->loadState(in);
}

}  // namespace gradsync
