// Quality metrics of a click model on a labelled set: ROC AUC (the probability that a random
// click scores above a random non-click, ties counting half) and log-loss (the mean binary
// cross-entropy of the predicted probabilities). Torch-free, pure.
#pragma once

#include <span>

namespace gradsync {

// From any scores that order the samples (logits or probabilities) and 0/1 labels: the
// Mann-Whitney rank sum with tied scores given their mean rank, O(n log n). 0.5 when all labels
// are equal (no pair to compare). Sizes must match (GS_CHECK).
double rocAuc(std::span<const float> scores, std::span<const float> labels);
// Mean of -[y log p + (1 - y) log(1 - p)], p clamped to [1e-7, 1 - 1e-7] (as sklearn clips) so a
// confident mistake costs a bounded amount. 0 for no samples.
double logLoss(std::span<const float> probabilities, std::span<const float> labels);

}  // namespace gradsync
