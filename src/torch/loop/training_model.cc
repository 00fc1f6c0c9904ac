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

std::vector<float> flatParameters(Model& net) {
  std::vector<float> flat;
  for (const torch::Tensor& p : net.parameters()) {
    const torch::Tensor values = p.detach().contiguous();
    const float* data = values.data_ptr<float>();
    flat.insert(flat.end(), data, data + values.numel());
  }
  return flat;
}

}  // namespace gradsync
