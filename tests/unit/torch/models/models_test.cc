// The models match their specification (docs/models.md, benchmarks/peers/ddp_models.py).
#include <gtest/gtest.h>

#include <numeric>

#include "gradsync/error.h"
#include "torch/train/trainer.h"

namespace gradsync {
namespace {

size_t total(const std::vector<TensorShape>& tensors) {
  return std::accumulate(tensors.begin(), tensors.end(), size_t{0},
                         [](size_t sum, const TensorShape& t) { return sum + t.elements; });
}

// Counts from PyTorch for the same definitions (docs/models.md).
TEST(Models, ParameterCountsMatchThePyTorchDefinitions) {
  EXPECT_EQ(total(describeModel("mlp")), 669706u);
  EXPECT_EQ(total(describeModel("cnn")), 1663370u);
  EXPECT_EQ(total(describeModel("resnet20")), 272186u);
  EXPECT_EQ(total(describeModel("vgg11")), 9492618u);
  EXPECT_EQ(describeModel("resnet20").size(), 65u);
  EXPECT_EQ(describeModel("vgg11").size(), 36u);
}

TEST(Models, ParameterNamesFollowPyTorch) {
  auto cnn = describeModel("cnn");
  EXPECT_EQ(cnn.front().name, "conv1.weight");
  EXPECT_EQ(cnn.back().name, "fc2.bias");
  bool found = false;
  for (const auto& t : describeModel("resnet20")) found |= t.name == "layer2.0.shortcut.0.weight";
  EXPECT_TRUE(found);
  EXPECT_EQ(describeModel("vgg11").back().name, "classifier.2.bias");
}

TEST(Models, ForwardGivesTenLogitsPerImage) {
  for (const char* model : {"mlp", "cnn", "resnet20", "vgg11"}) {
    EXPECT_EQ(modelOutputShape(model, 3), (std::vector<int64_t>{3, 10})) << model;
  }
}

TEST(Models, UnknownModelListsTheChoices) {
  try {
    describeModel("resnet50");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("mlp, cnn, resnet20, vgg11"), std::string::npos);
  }
}

}  // namespace
}  // namespace gradsync
