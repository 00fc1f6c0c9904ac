// FusedSGD (gradsync/torch/fused_sgd.h) against torch's per-tensor SGD (bitwise) and a naive
// double-precision LARS reference, on odd shapes (1, 0, non-power-of-two elements).
#include "gradsync/torch/fused_sgd.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace gradsync {
namespace {

const std::vector<std::vector<int64_t>> kShapes = {{16, 3, 3, 3}, {16}, {1}, {0}, {10, 7}, {1003}};

std::vector<torch::Tensor> makeParameters(int seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> params;
  for (const auto& shape : kShapes) params.push_back(torch::randn(shape).requires_grad_(true));
  return params;
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// Gives both parameter lists the same fresh random gradients.
void setGradients(std::vector<torch::Tensor>& a, std::vector<torch::Tensor>& b, int step) {
  torch::manual_seed(1000 + step);
  for (size_t i = 0; i < a.size(); ++i) {
    torch::Tensor g = torch::randn(a[i].sizes());
    if (i == 2 && step == 1) g.zero_();  // a zero gradient: LARS's factor is 1
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

void expectBitwiseEqual(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  }
}

TEST(FusedSGD, MomentumMatchesTorchSgdBitwise) {
  std::vector<torch::Tensor> fusedParams = makeParameters(1), plainParams = clones(fusedParams);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  FusedSGD fused(fusedParams, options);
  torch::optim::SGD plain(plainParams, options);
  for (int step = 0; step < 4; ++step) {
    setGradients(fusedParams, plainParams, step);
    fused.step();
    plain.step();
    expectBitwiseEqual(fusedParams, plainParams);
  }
  EXPECT_EQ(fused.fusedSteps(), 4);
  // The parameters now live in one buffer, one after the other.
  EXPECT_EQ(fusedParams[1].data_ptr<float>(), fusedParams[0].data_ptr<float>() + 16 * 27);
}

TEST(FusedSGD, GroupsWithOwnRatesAndNoMomentumMatchTorch) {
  std::vector<torch::Tensor> fusedParams = makeParameters(2), plainParams = clones(fusedParams);
  auto groups = [](const std::vector<torch::Tensor>& p) {
    std::vector<torch::optim::OptimizerParamGroup> g;
    g.emplace_back(
        std::vector<torch::Tensor>(p.begin(), p.begin() + 3),
        std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.05).momentum(0.8)));
    g.emplace_back(std::vector<torch::Tensor>(p.begin() + 3, p.end()),
                   std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.3)));
    return g;
  };
  FusedSGD fused(groups(fusedParams), torch::optim::SGDOptions(0.1));
  torch::optim::SGD plain(groups(plainParams), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    setGradients(fusedParams, plainParams, step);
    fused.step();
    plain.step();
    expectBitwiseEqual(fusedParams, plainParams);
  }
  EXPECT_EQ(fused.fusedSteps(), 6);  // two groups, three steps
}

TEST(FusedSGD, MissingGradientOrOutsideStateFallsBackOrIsAdopted) {
  std::vector<torch::Tensor> fusedParams = makeParameters(3), plainParams = clones(fusedParams);
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  FusedSGD fused(fusedParams, options);
  torch::optim::SGD plain(plainParams, options);
  setGradients(fusedParams, plainParams, 0);
  fused.step();
  plain.step();
  // A parameter without a gradient: torch skips it (its momentum too), so must the step.
  setGradients(fusedParams, plainParams, 1);
  fusedParams[4].mutable_grad() = torch::Tensor();
  plainParams[4].mutable_grad() = torch::Tensor();
  fused.step();
  plain.step();
  expectBitwiseEqual(fusedParams, plainParams);
  EXPECT_EQ(fused.fusedSteps(), 1);
  // Momentum replaced from outside (as a load does): the next fused step adopts it.
  for (auto* opt : {static_cast<torch::optim::Optimizer*>(&fused),
                    static_cast<torch::optim::Optimizer*>(&plain)}) {
    for (auto& [key, state] : opt->state()) {
      auto& sgd = static_cast<torch::optim::SGDParamState&>(*state);
      sgd.momentum_buffer(torch::full_like(sgd.momentum_buffer(), 0.25));
    }
  }
  setGradients(fusedParams, plainParams, 2);
  fused.step();
  plain.step();
  expectBitwiseEqual(fusedParams, plainParams);
  EXPECT_EQ(fused.fusedSteps(), 2);
}

// Naive LARS + momentum SGD in double precision, one tensor at a time.
struct NaiveLars {
  double lr, momentum, lars;
  std::vector<std::vector<double>> buffers;
  void step(std::vector<torch::Tensor>& params) {
    if (buffers.empty()) buffers.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      float* p = params[i].data_ptr<float>();
      const float* g = params[i].grad().data_ptr<float>();
      const int64_t n = params[i].numel();
      double pn = 0, gn = 0;
      for (int64_t j = 0; j < n; ++j) pn += double(p[j]) * p[j], gn += double(g[j]) * g[j];
      pn = std::sqrt(pn), gn = std::sqrt(gn);
      const double factor = pn == 0 || gn == 0 ? 1 : lars * pn / gn;
      const bool first = buffers[i].empty();
      buffers[i].resize(n);
      for (int64_t j = 0; j < n; ++j) {
        const double scaled = factor * g[j];
        buffers[i][j] = first ? scaled : momentum * buffers[i][j] + scaled;
        p[j] = static_cast<float>(p[j] - lr * buffers[i][j]);
      }
    }
  }
};

void expectClose(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

TEST(FusedSGD, LarsFusedAndPerTensorMatchNaiveReference) {
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9);
  std::vector<torch::Tensor> fusedParams = makeParameters(4), perTensorParams = clones(fusedParams),
                             naiveParams = clones(fusedParams);
  FusedSGD fused(fusedParams, options, {.lars = 0.02});
  FusedSGD perTensor(perTensorParams, options, {.lars = 0.02, .fused = false});
  NaiveLars naive{.lr = 0.1, .momentum = 0.9, .lars = 0.02};
  for (int step = 0; step < 4; ++step) {
    setGradients(fusedParams, perTensorParams, step);
    for (size_t i = 0; i < naiveParams.size(); ++i) {
      naiveParams[i].mutable_grad() = fusedParams[i].grad().clone();
    }
    fused.step();
    perTensor.step();
    torch::NoGradGuard noGrad;
    naive.step(naiveParams);
    expectClose(fusedParams, naiveParams);
    expectClose(perTensorParams, naiveParams);
  }
  EXPECT_EQ(fused.fusedSteps(), 4);
  EXPECT_EQ(perTensor.fusedSteps(), 0);
  // LARS changed the step: plain SGD from the same start ends elsewhere.
  std::vector<torch::Tensor> plainParams = makeParameters(4);
  torch::optim::SGD plain(plainParams, options);
  std::vector<torch::Tensor> unused = clones(plainParams);
  for (int step = 0; step < 4; ++step) {
    setGradients(plainParams, unused, step);
    plain.step();
  }
  EXPECT_FALSE(torch::allclose(plainParams[0], fusedParams[0], 1e-3, 1e-4));
}

TEST(FusedSGD, ModuleParametersFollowTheFlatBuffer) {
  torch::nn::Linear layer(5, 3);
  FusedSGD fused(layer->parameters(), torch::optim::SGDOptions(0.5));
  torch::Tensor before = layer->weight.detach().clone();
  layer->forward(torch::ones({2, 5})).sum().backward();
  fused.step();
  EXPECT_EQ(fused.fusedSteps(), 1);
  // The module's own parameter saw the update: set_data kept it the same tensor.
  EXPECT_TRUE(torch::allclose(layer->weight.detach(), before - 0.5 * 2 * torch::ones({3, 5})));
  layer->zero_grad();
  layer->forward(torch::ones({1, 5})).sum().backward();
  EXPECT_TRUE(layer->weight.grad().defined());
}

}  // namespace
}  // namespace gradsync
