// Every model's chain (Model::pipelineLayers), which the pipeline cuts into stages, computes its
// forward and owns its parameters.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "torch/models/gpt_config.h"
#include "torch/models/models.h"
#include "torch/pipeline/setup.h"

namespace gradsync {
namespace {

TEST(PipelineLayers, ComposeToTheModelsForwardBitwise) {
  torch::manual_seed(3);
  const torch::Tensor x = torch::randn({3, 1, 28, 28});
  for (const std::string& name : modelNames()) {
    if (gptContextOf(name) > 0) continue;  // tokens in, and not split into stages (models.md)
    std::shared_ptr<Model> model = makeModel(name);
    initializeParameters(*model, 1);
    model->eval();  // BatchNorm's running statistics: the same in both paths
    torch::NoGradGuard noGrad;
    torch::Tensor chained = x;
    std::vector<PipelineLayer> layers = model->pipelineLayers();
    ASSERT_FALSE(layers.empty()) << name;
    for (const PipelineLayer& layer : layers) chained = layer.forward(chained);
    EXPECT_TRUE(torch::equal(chained, model->forward(x))) << name;

    // The layers' parameters, in order, are the model's, each once.
    std::vector<torch::Tensor> owned;
    std::vector<std::string> names;
    for (const auto& item : model->named_modules()) {
      for (const PipelineLayer& layer : layers) {
        if (item.value().get() == layer.module.get()) names.push_back(item.key());
      }
    }
    for (const PipelineLayer& layer : layers) {
      for (const torch::Tensor& p : layer.module->parameters()) owned.push_back(p);
    }
    const std::vector<torch::Tensor> parameters = model->parameters();
    ASSERT_EQ(owned.size(), parameters.size()) << name;
    for (size_t i = 0; i < owned.size(); ++i) EXPECT_TRUE(owned[i].is_same(parameters[i])) << name;
    // Each layer's name is its module's name in named_modules() (profiles match by it).
    ASSERT_EQ(names.size(), layers.size()) << name;
    for (size_t i = 0; i < layers.size(); ++i) EXPECT_EQ(layers[i].name, names[i]) << name;
  }
}

TEST(PipelineLayers, GroupNormModelsTrainOnOneSample) {
  for (const char* name : {"cnn-gn", "vgg11-gn"}) {
    std::shared_ptr<Model> model = makeModel(name);
    model->train();
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward(torch::randn({1, 1, 28, 28})), torch::tensor({3}, torch::kLong));
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item<float>())) << name;
    EXPECT_EQ(model->pipelineLayers().size(), std::string(name) == "cnn-gn" ? 11u : 30u) << name;
  }
}

TEST(PipelineLayers, EstimatedCostsFollowTheMultiplyAccumulates) {
  std::shared_ptr<Model> cnn = makeModel("cnn");
  const std::vector<double> costs = estimatedLayerCosts(*cnn);
  ASSERT_EQ(costs.size(), 4u);
  EXPECT_DOUBLE_EQ(costs[0], 32.0 * 28 * 28 * 25);  // conv1 before its link's pool: 5x5 taps
  EXPECT_DOUBLE_EQ(costs[1], 64.0 * 14 * 14 * 32 * 25);
  EXPECT_DOUBLE_EQ(costs[2], 512.0 * 3136);  // fc1: out x in
  EXPECT_DOUBLE_EQ(costs[3], 10.0 * 512);
}

}  // namespace
}  // namespace gradsync
