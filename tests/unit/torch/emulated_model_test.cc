// Emulated accelerator compute (src/torch/emulated_model.h) at the model's level: its parameters
// are the profile's, its forward and backward take the profile's times on the device, and its
// gradients reach autograd's hooks layer by layer at the times backward would produce them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "sim/model_profile.h"
#include "torch/emulated_model.h"

namespace gradsync {
namespace {

using Clock = std::chrono::steady_clock;

double msSince(Clock::time_point start, Clock::time_point end = Clock::now()) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Five layers, one without parameters, times of 0.5 to 6 ms (21.5 ms per step).
ModelProfile smallProfile() {
  ModelProfile p;
  p.name = "small";
  p.batchSize = 8;
  p.updateSeconds = 0.001;
  p.layers = {
      {"features.0",
       {tensorShape("features.0.weight", {16, 1, 3, 3}), tensorShape("features.0.bias", {16})},
       0.002,
       0.004},
      {"features.3",
       {tensorShape("features.3.weight", {32, 16, 3, 3}), tensorShape("features.3.bias", {32})},
       0.003,
       0.006},
      {"act", {}, 0.001, 0.001},
      {"classifier.0",
       {tensorShape("classifier.0.weight", {64, 1568}), tensorShape("classifier.0.bias", {64})},
       0.001,
       0.002},
      {"classifier.2",
       {tensorShape("classifier.2.weight", {10, 64}), tensorShape("classifier.2.bias", {10})},
       0.0005,
       0.001},
  };
  return p;
}

void expectProfileParameters(const ModelProfile& profile, torch::nn::Module& model) {
  const std::vector<TensorShape> expected = profile.tensors();
  auto parameters = model.named_parameters();
  ASSERT_EQ(parameters.size(), expected.size()) << profile.name;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(parameters[i].key(), expected[i].name) << profile.name << " #" << i;
    EXPECT_EQ(parameters[i].value().sizes().vec(), expected[i].dims) << expected[i].name;
  }
}

// The built-in profiles' names, shapes and registration order, as the simulator sees them.
TEST(EmulatedModel, ParametersAreTheProfilesInItsOrder) {
  for (const std::string& name : builtinProfileNames()) {
    ModelProfile profile = builtinProfile(name);
    std::shared_ptr<Model> model = makeEmulatedModel(profile, 0, 0);
    expectProfileParameters(profile, *model);
  }
  ModelProfile small = smallProfile();
  expectProfileParameters(small, *makeEmulatedModel(small, 0, 0));
}

TEST(EmulatedModel, ForwardAndBackwardTakeTheProfilesTimes) {
  const ModelProfile profile = smallProfile();
  std::shared_ptr<Model> model = makeEmulatedModel(profile, 0, 0);
  model->train();
  torch::Tensor x = torch::zeros({8, 1, 28, 28});
  torch::Tensor y = torch::zeros({8}, torch::kLong);
  std::vector<double> forwardMs, backwardMs;
  for (int step = 0; step < 9; ++step) {
    const auto start = Clock::now();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    const auto forwardEnd = Clock::now();
    loss.backward();
    forwardMs.push_back(msSince(start, forwardEnd));
    backwardMs.push_back(msSince(forwardEnd));
  }
  // Deadlines chain from one another: a step never ends early, and late only by one sleep's
  // overshoot and the host's few microseconds per layer (the median drops steps that a busy
  // machine descheduled).
  EXPECT_GE(median(forwardMs), 1e3 * profile.forwardSeconds());
  EXPECT_LT(median(forwardMs), 1e3 * profile.forwardSeconds() + 0.3);
  EXPECT_GE(median(backwardMs), 1e3 * profile.backwardSeconds() - 0.05);
  EXPECT_LT(median(backwardMs), 1e3 * profile.backwardSeconds() + 0.3);

  // Gradient mode's optimizer step is the profile's update time, and leaves no gradient behind.
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  const auto start = Clock::now();
  model->optimizerStep(sgd);
  EXPECT_NEAR(msSince(start), 1e3 * profile.updateSeconds, 0.3);
  for (const torch::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_FALSE(model->predicts());
}

// Each layer's gradients reach autograd's hooks (where DistributedModel hands them to the engine)
// after that layer's backward time, in backward order, with the parameter's shape, and with
// content that changes from step to step and rank to rank. Medians over steps: a loaded machine
// may wake a sleeping thread late now and then.
TEST(EmulatedModel, GradientsArriveLayerByLayerAtBackwardsTimes) {
  const ModelProfile profile = smallProfile();
  std::shared_ptr<Model> model = makeEmulatedModel(profile, 0, 0);
  std::shared_ptr<Model> other = makeEmulatedModel(profile, 1, 0);
  model->train();
  other->train();
  std::map<std::string, std::vector<double>> arrivedMs;
  std::map<std::string, torch::Tensor> seen;
  Clock::time_point backwardStart;
  for (auto& item : model->named_parameters()) {
    const std::string name = item.key();
    item.value().register_hook([&, name](torch::Tensor grad) {
      arrivedMs[name].push_back(msSince(backwardStart));
      seen[name] = grad.clone();
    });
  }
  torch::Tensor x = torch::zeros({8, 1, 28, 28});
  model->forward(x).sum().backward();  // the first step also initialises autograd
  arrivedMs.clear();
  torch::Tensor first;
  for (int step = 0; step < 7; ++step) {
    // The device runs backward right after forward: measured from the forward's end.
    torch::Tensor loss = model->forward(x).sum();
    backwardStart = Clock::now();
    loss.backward();
    if (step == 0) first = seen["classifier.0.weight"];
  }
  // Backward order: the last layer first; each layer ends the sum of the backward times so far
  // (less the last forward sleep's overshoot, at most, which the device does not wait for).
  double readyMs = 0;
  double previous = -1;
  for (auto layer = profile.layers.rbegin(); layer != profile.layers.rend(); ++layer) {
    readyMs += 1e3 * layer->backwardSeconds;
    for (const TensorShape& tensor : layer->tensors) {
      ASSERT_EQ(arrivedMs[tensor.name].size(), 7u) << tensor.name;
      const double arrived = median(arrivedMs[tensor.name]);
      EXPECT_GE(arrived, readyMs - 0.2) << tensor.name;
      EXPECT_LT(arrived, readyMs + 0.5) << tensor.name;
      EXPECT_GE(arrived, previous) << tensor.name;
      previous = arrived;
      EXPECT_EQ(seen[tensor.name].sizes().vec(), tensor.dims);
      EXPECT_GT(seen[tensor.name].abs().sum().item<float>(), 0.0f) << tensor.name;
    }
  }
  // Another step, and another rank, send other values.
  EXPECT_FALSE(torch::equal(first, seen["classifier.0.weight"]));
  torch::Tensor otherGrad;
  other->named_parameters()["classifier.0.weight"].register_hook(
      [&](torch::Tensor grad) { otherGrad = grad.clone(); });
  other->forward(x).sum().backward();
  EXPECT_FALSE(torch::equal(first, otherGrad));
}

// Update mode: the pre-forward hook sees each layer's parameter-holding modules in forward
// order before the layer's device time, and a wait there delays the device (as a GPU's kernels
// wait for their parameters).
TEST(EmulatedModel, ForwardWaitsForEachLayersParametersFirst) {
  const ModelProfile profile = smallProfile();
  std::shared_ptr<Model> model = makeEmulatedModel(profile, 0, 0);
  model->train();
  std::vector<std::string> order;
  Clock::time_point start;
  std::vector<double> atMs;
  std::map<const torch::nn::Module*, std::string> names;
  for (const auto& item : model->named_modules("", /*include_self=*/false))
    names[item.value().get()] = item.key();
  model->setPreForwardHook([&](const torch::nn::Module& layer) {
    order.push_back(names[&layer]);
    atMs.push_back(msSince(start));
    if (names[&layer] == "classifier.0") std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  torch::Tensor x = torch::zeros({8, 1, 28, 28});
  model->forward(x).sum().backward();  // the first step also initialises autograd
  std::vector<double> second, third, forwardMs;
  for (int step = 0; step < 7; ++step) {
    order.clear();
    atMs.clear();
    start = Clock::now();
    torch::Tensor out = model->forward(x);
    forwardMs.push_back(msSince(start));
    ASSERT_EQ(atMs.size(), 4u);
    second.push_back(atMs[1]);
    third.push_back(atMs[2]);
    out.sum().backward();
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"features.0", "features.3", "classifier.0", "classifier.2"}));
  EXPECT_NEAR(median(second), 2.0, 0.3);  // after features.0's forward
  EXPECT_NEAR(median(third), 6.0, 0.3);   // then features.3's and the activation's
  EXPECT_GE(median(forwardMs), 1e3 * profile.forwardSeconds() + 2.0);
  EXPECT_LT(median(forwardMs), 1e3 * profile.forwardSeconds() + 2.5);
  // With the hook set (update mode), backward leaves no gradient in .grad: nothing reads it.
  for (const torch::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace gradsync
