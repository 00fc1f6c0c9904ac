#include "torch/loop/training_model.h"

#include "torch/models/emulated_model.h"

namespace gradsync {

std::shared_ptr<Model> makeTrainingModel(const TrainOptions& options, int rank) {
  if (emulatesCompute(options)) {
    return makeEmulatedModel(emulatedProfile(options), rank, options.seed);
  }
  std::shared_ptr<Model> model = makeModel(options.model);
  initializeParameters(*model, options.seed);
  return model;
}

}  // namespace gradsync
