// Test-set accuracy of a data-parallel model, shared by `gradsync train`'s trainers.
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

}  // namespace gradsync
