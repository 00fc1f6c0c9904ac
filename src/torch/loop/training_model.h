// The model a run of `gradsync train` trains, whichever trainer runs it.
#pragma once

#include <memory>
#include <vector>

#include "torch/loop/options.h"
#include "torch/models/models.h"

namespace gradsync {

// The model `gradsync train` trains on `rank`: --model's, initialised from --seed, or with
// --compute emulate:PROFILE the profile's emulated model.
std::shared_ptr<Model> makeTrainingModel(const TrainOptions& options, int rank);

// `net`'s parameters, flattened in order: a TrainResult's `parameters`.
std::vector<float> flatParameters(Model& net);

}  // namespace gradsync
