// SignDescent (gradsync/torch/sign_descent.h): each step is p·(1 − lr·wd) − lr·sign(g) on odd
// shapes (0 and 1 elements included), sign(0) = 0, a parameter without a gradient untouched, and
// a learning rate set from outside (a schedule) taking effect.
#include "gradsync/torch/sign_descent.h"

#include <gtest/gtest.h>

#include <vector>

namespace gradsync {
namespace {

TEST(SignDescent, StepsBySignWithDecoupledWeightDecay) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> params;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{7, 3}, {1}, {0}, {5}})
    params.push_back(torch::randn(shape).requires_grad_(true));
  SignDescent optimizer(params, SignDescentOptions(0.1).weight_decay(0.5));
  std::vector<torch::Tensor> before;
  for (const torch::Tensor& p : params) before.push_back(p.detach().clone());
  params[0].mutable_grad() = torch::randn({7, 3});
  params[0].mutable_grad()[0][0] = 0;  // sign(0) = 0: only the decay moves it
  params[1].mutable_grad() = torch::full({1}, -2.0);
  params[2].mutable_grad() = torch::zeros({0});
  // params[3] has no gradient: untouched.
  optimizer.step();
  for (size_t i = 0; i < 3; ++i) {
    const torch::Tensor expected = before[i] * (1 - 0.1 * 0.5) - 0.1 * params[i].grad().sign();
    EXPECT_TRUE(torch::equal(params[i].detach(), expected)) << "parameter " << i;
  }
  EXPECT_FLOAT_EQ(params[0][0][0].item<float>(), before[0][0][0].item<float>() * 0.95f);
  EXPECT_TRUE(torch::equal(params[3].detach(), before[3]));

  for (torch::optim::OptimizerParamGroup& group : optimizer.param_groups())
    group.options().set_lr(1);
  const torch::Tensor start = params[1].detach().clone();
  optimizer.step();
  EXPECT_TRUE(torch::equal(params[1].detach(), start * (1 - 1 * 0.5) + 1));
}

}  // namespace
}  // namespace gradsync
