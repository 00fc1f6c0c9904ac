// Emulated accelerator compute (src/torch/models/emulated_model.h) at the model's level: its
// parameters are the profile's, its forward and backward take the profile's times on the device,
// and its gradients reach autograd's hooks layer by layer at the times backward would produce them.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>
#include <vector>

#include "sim/model_profile.h"
#include "torch/models/emulated_model.h"

namespace gradsync {
namespace {

using MonotonicClock = std::chrono::steady_clock;

double msSince(MonotonicClock::time_point start,
               MonotonicClock::time_point end = MonotonicClock::now()) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// Wall-clock checks: a step can never take less than the profile says (deadlines chain from the
// step's start), and one that a busy machine did not deschedule takes it within timer
// resolution: so each bound is checked on the step that came closest, the minimum over steps
// (on a 2-core machine under load 10, even medians of a sleeping thread's wake-ups ran ms late).
// Each test steps at least kSteps times and goes on, up to kMaxSteps, until a step came that
// close: beside another torch suite on 2 cores, all of 9 steps once ran 0.3 ms late.
double minimum(const std::vector<double>& values) {
  return *std::min_element(values.begin(), values.end());
}
constexpr double kResolutionMs = 0.3;
constexpr int kSteps = 7, kMaxSteps = 300;

// Whether another step is needed: fewer than kSteps so far, or the closest of `samples` is not
// yet within timer resolution of `expectedMs` (and kMaxSteps are not reached).
bool needMore(const std::vector<double>& samples, double expectedMs) {
  if (samples.size() < static_cast<size_t>(kSteps)) return true;
  return samples.size() < static_cast<size_t>(kMaxSteps) &&
         minimum(samples) >= expectedMs + kResolutionMs;
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
  const double forward = 1e3 * profile.forwardSeconds();
  const double step = forward + 1e3 * profile.backwardSeconds();
  std::vector<double> forwardMs, stepMs;
  while (needMore(forwardMs, forward) || needMore(stepMs, step)) {
    const auto start = MonotonicClock::now();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    forwardMs.push_back(msSince(start));
    loss.backward();
    stepMs.push_back(msSince(start));
  }
  for (double ms : forwardMs) EXPECT_GE(ms, forward - 0.01);
  for (double ms : stepMs) EXPECT_GE(ms, step - 0.01);
  EXPECT_LT(minimum(forwardMs), forward + kResolutionMs);
  EXPECT_LT(minimum(stepMs), step + kResolutionMs);

  // Gradient mode's optimizer step is the profile's update time, and leaves no gradient behind.
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.1));
  std::vector<double> updateMs;
  while (needMore(updateMs, 1e3 * profile.updateSeconds)) {
    const auto start = MonotonicClock::now();
    model->optimizerStep(sgd);
    updateMs.push_back(msSince(start));
    EXPECT_GE(updateMs.back(), 1e3 * profile.updateSeconds - 0.01);
  }
  EXPECT_LT(minimum(updateMs), 1e3 * profile.updateSeconds + kResolutionMs);
  for (const torch::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
  EXPECT_FALSE(model->predicts());
}

// Each layer's gradients reach autograd's hooks (where DistributedModel hands them to the engine)
// after the forward and that layer's backward time, in backward order, with the parameter's
// shape, and with content that changes from step to step and rank to rank.
TEST(EmulatedModel, GradientsArriveLayerByLayerAtBackwardsTimes) {
  const ModelProfile profile = smallProfile();
  std::shared_ptr<Model> model = makeEmulatedModel(profile, 0, 0);
  std::shared_ptr<Model> other = makeEmulatedModel(profile, 1, 0);
  model->train();
  other->train();
  std::map<std::string, std::vector<double>> arrivedMs;  // since the step's start
  std::map<std::string, torch::Tensor> seen;
  std::vector<std::string> order;
  MonotonicClock::time_point stepStart;
  bool keep = false;  // copy the gradients this step (a copy delays the next layer's hook)
  for (auto& item : model->named_parameters()) {
    const std::string name = item.key();
    item.value().register_hook([&, name](torch::Tensor grad) {
      arrivedMs[name].push_back(msSince(stepStart));
      order.push_back(name);
      if (keep) seen[name] = grad.clone();
    });
  }
  torch::Tensor x = torch::zeros({8, 1, 28, 28});
  torch::Tensor first;
  std::vector<std::string> backwardOrder;
  for (auto layer = profile.layers.rbegin(); layer != profile.layers.rend(); ++layer) {
    for (const TensorShape& tensor : layer->tensors) backwardOrder.push_back(tensor.name);
  }
  // Steps until every tensor's closest arrival is within resolution of its backward time.
  std::map<std::string, double> readyAt;  // ms since the step's start
  double readyMs = 1e3 * profile.forwardSeconds();
  for (auto layer = profile.layers.rbegin(); layer != profile.layers.rend(); ++layer) {
    readyMs += 1e3 * layer->backwardSeconds;
    for (const TensorShape& tensor : layer->tensors) readyAt[tensor.name] = readyMs;
  }
  const auto anyLate = [&] {
    return std::any_of(readyAt.begin(), readyAt.end(), [&](const auto& item) {
      return needMore(arrivedMs[item.first], item.second);
    });
  };
  int steps = 0;
  while (anyLate()) {
    const int step = steps++;
    order.clear();
    keep = step == 0 || step == kSteps - 1;
    stepStart = MonotonicClock::now();
    model->forward(x).sum().backward();
    if (step == 0) first = seen["classifier.0.weight"];
    // Layer by layer (a layer's tensors in the order autograd accumulates them).
    std::vector<std::string> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<std::string> expected = backwardOrder;
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(sorted, expected);
  }
  double previous = 0;
  for (auto layer = profile.layers.rbegin(); layer != profile.layers.rend(); ++layer) {
    for (const TensorShape& tensor : layer->tensors) {
      const double readyMs = readyAt[tensor.name];
      ASSERT_EQ(arrivedMs[tensor.name].size(), static_cast<size_t>(steps)) << tensor.name;
      for (double ms : arrivedMs[tensor.name]) EXPECT_GE(ms, readyMs - 0.01) << tensor.name;
      EXPECT_LT(minimum(arrivedMs[tensor.name]), readyMs + kResolutionMs) << tensor.name;
      EXPECT_GE(arrivedMs[tensor.name].back(), previous) << tensor.name;  // after the layer above
      EXPECT_EQ(seen[tensor.name].sizes().vec(), tensor.dims);
      EXPECT_GT(seen[tensor.name].abs().sum().item<float>(), 0.0f) << tensor.name;
    }
    if (!layer->tensors.empty()) previous = arrivedMs[layer->tensors.back().name].back();
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
// order before the layer's device time, and a wait there delays the device by the wait (as a
// GPU's kernels wait for their parameters).
TEST(EmulatedModel, ForwardWaitsForEachLayersParametersFirst) {
  const ModelProfile profile = smallProfile();
  std::shared_ptr<Model> model = makeEmulatedModel(profile, 0, 0);
  model->train();
  std::vector<std::string> order;
  MonotonicClock::time_point start;
  std::vector<double> atMs;
  double waitedMs = 0;  // how long the last wait in the hook took
  std::map<const torch::nn::Module*, std::string> names;
  for (const auto& item : model->named_modules("", /*include_self=*/false))
    names[item.value().get()] = item.key();
  model->setPreForwardHook([&](const torch::nn::Module& layer) {
    order.push_back(names[&layer]);
    atMs.push_back(msSince(start));
    if (names[&layer] != "classifier.0") return;
    const auto asleep = MonotonicClock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    waitedMs = msSince(asleep);
  });
  torch::Tensor x = torch::zeros({8, 1, 28, 28});
  const double forward = 1e3 * profile.forwardSeconds();
  std::vector<double> second, third, deviceMs;
  while (needMore(second, 2.0) || needMore(third, 6.0) || needMore(deviceMs, forward)) {
    order.clear();
    atMs.clear();
    start = MonotonicClock::now();
    torch::Tensor out = model->forward(x);
    deviceMs.push_back(msSince(start) - waitedMs);  // the forward less the wait
    ASSERT_EQ(atMs.size(), 4u);
    second.push_back(atMs[1]);
    third.push_back(atMs[2]);
    EXPECT_GE(atMs[1], 2.0 - 0.01);  // after features.0's forward
    EXPECT_GE(atMs[2], 6.0 - 0.01);  // then features.3's and the activation's
    EXPECT_GE(deviceMs.back(), forward - 0.01);
    out.sum().backward();
  }
  EXPECT_EQ(order,
            (std::vector<std::string>{"features.0", "features.3", "classifier.0", "classifier.2"}));
  EXPECT_LT(minimum(second), 2.0 + kResolutionMs);
  EXPECT_LT(minimum(third), 6.0 + kResolutionMs);
  EXPECT_LT(minimum(deviceMs), forward + kResolutionMs);
  // With the hook set (update mode), backward leaves no gradient in .grad: nothing reads it.
  for (const torch::Tensor& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace gradsync
