// How good a data-parallel model is on the held-out data, shared by `gradsync train`'s
// trainers: a classifier's test-set accuracy, a language model's held-out loss.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gradsync/transport.h"
#include "torch/loop/data_source.h"
#include "torch/models/models.h"

namespace gradsync {

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

// What an evaluation measured: a classifier's accuracy or a language model's held-out loss (the
// other NaN).
struct Quality {
  double testAccuracy;
  double heldOutLoss;
};
// testAccuracy or heldOutLoss, as `data` is images or text.
Quality evaluateModel(Model& net, const DataSource& data, Transport& transport,
                      size_t samples = SIZE_MAX);

}  // namespace gradsync
