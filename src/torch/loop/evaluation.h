// How good a data-parallel model is on the held-out data, shared by `gradsync train`'s
// trainers: a classifier's test-set accuracy, a language model's held-out loss.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradsync/transport.h"
#include "torch/loop/data_source.h"
#include "torch/models/models.h"

namespace gradsync {

// The sum of every rank's `sum` over the sum of their `count`s (0 if those are 0), through one
// allreduce of two floats on the trainers' tag (counts up to 2^24 are exact). Collective.
double meanOverRanks(Transport& transport, double sum, double count);

// Accuracy of `net` (in evaluation mode, without gradients) on the first `samples` test samples
// (all of them by default): each rank of `transport` evaluates every size()-th one and the counts
// are summed across ranks. Collective; leaves `net` in evaluation mode.
double testAccuracy(Model& net, const DataSource& data, Transport& transport,
                    size_t samples = SIZE_MAX);

// A language model's mean loss in nats per token on the first `samples` held-out windows (all
// of them by default), split across the ranks as testAccuracy's samples. Collective; leaves
// `net` in evaluation mode.
double heldOutLoss(Model& net, const DataSource& data, Transport& transport,
                   size_t samples = SIZE_MAX);

// testAccuracy or heldOutLoss, as `data` is images or text (Quality: torch/loop/options.h).
Quality evaluateModel(Model& net, const DataSource& data, Transport& transport,
                      size_t samples = SIZE_MAX);

}  // namespace gradsync
