// The model a run of `gradsync train` trains, whichever trainer runs it.
#pragma once

#include <memory>

#include "torch/loop/options.h"
#include "torch/models/models.h"

namespace gradsync {

// The model `gradsync train` trains on `rank`: --model's, initialised from --seed, or with
// --compute emulate:PROFILE the profile's emulated model.
std::shared_ptr<Model> makeTrainingModel(const TrainOptions& options, int rank);

}  // namespace gradsync
