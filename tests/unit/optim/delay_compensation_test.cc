// SC and LWP (optim/delay_compensation.h) against their defining identities and hand
// computations.
#include "optim/delay_compensation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gradsync/error.h"
#include "optim/update_rule.h"

namespace gradsync {
namespace {

constexpr int kDelay = 5;
constexpr double kMomentum = 0.9;
constexpr double kLr = 0.1;

// A parameter vector and its velocity, moved by one rule step after step.
struct Trajectory {
  std::vector<float> weights;
  std::vector<float> velocity;
  explicit Trajectory(size_t n) : weights(n, 0.0f), velocity(n, 0.0f) {}
};

// Relative float accuracy for sums of a few dozen terms of one sign.
void expectClose(const std::vector<float>& a, const std::vector<float>& b, const char* what,
                 int step) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], 4e-7 * std::max(1e-3f, std::abs(b[i])))
        << what << " at step " << step << ", element " << i;
  }
}

const std::vector<float> kGradient = {1.0f, -0.5f, 3.0f, 1e-3f};

// One gradient, undelayed at step 0 or arriving D updates late with SC: from its arrival on,
// the summed updates are the same at every step (the first D + 1 steps' worth of momentum at
// once, then exactly the undelayed tail).
TEST(SpikeCompensation, ImpulseResponseMatchesUndelayedMomentumAfterTheDelayWindow) {
  const UpdateRule rule = UpdateRule::sgd(kLr, kMomentum);
  const std::vector<float> zero(kGradient.size(), 0.0f);
  Trajectory undelayed(kGradient.size());
  Trajectory spiked(kGradient.size());
  for (int step = 0; step < kDelay + 40; ++step) {
    applyDelayedSgd(rule, undelayed.weights, step == 0 ? kGradient : zero, undelayed.velocity, 0,
                    false);
    applyDelayedSgd(rule, spiked.weights, step == kDelay ? kGradient : zero, spiked.velocity,
                    kDelay, true);
    if (step < kDelay) {
      EXPECT_EQ(spiked.weights, zero) << "nothing arrived yet at step " << step;
    } else {
      expectClose(spiked.weights, undelayed.weights, "summed updates", step);
    }
  }
}

// A steady gradient arriving D updates late: from its first arrival, each SC update equals the
// undelayed momentum update of the same step (only the first D, before anything arrives, are
// missing), so SC's summed updates over the window after the delay equal undelayed SGD's. Each
// update is read on its own (applied to zero weights: without weight decay it does not depend
// on them), since differences of growing weights would lose the digits compared.
TEST(SpikeCompensation, ConstantGradientUpdatesEqualUndelayedOnesFromTheFirstArrival) {
  const UpdateRule rule = UpdateRule::sgd(kLr, kMomentum);
  const size_t n = kGradient.size();
  const std::vector<float> zero(n, 0.0f);
  std::vector<float> undelayedVelocity(n, 0.0f);
  std::vector<float> spikedVelocity(n, 0.0f);
  std::vector<float> undelayedSum(n, 0.0f);
  std::vector<float> spikedSum(n, 0.0f);
  for (int step = 0; step < kDelay + 30; ++step) {
    std::vector<float> update(n, 0.0f);
    std::vector<float> spikedUpdate(n, 0.0f);
    applyDelayedSgd(rule, update, kGradient, undelayedVelocity, 0, false);
    applyDelayedSgd(rule, spikedUpdate, step >= kDelay ? kGradient : zero, spikedVelocity, kDelay,
                    true);
    if (step < kDelay) {
      EXPECT_EQ(spikedUpdate, zero);
      continue;
    }
    for (size_t i = 0; i < n; ++i) {
      undelayedSum[i] += update[i];
      spikedSum[i] += spikedUpdate[i];
    }
    expectClose(spikedUpdate, update, "update", step);
  }
  expectClose(spikedSum, undelayedSum, "summed updates", kDelay + 30);
}

// Without the spike, a delayed gradient's impulse response is the undelayed one shifted by D:
// D + 1 steps' worth short once it has arrived (what SC fixes).
TEST(SpikeCompensation, WithoutItADelayedGradientFallsShort) {
  const UpdateRule rule = UpdateRule::sgd(kLr, kMomentum);
  const std::vector<float> g = {1.0f};
  const std::vector<float> zero = {0.0f};
  Trajectory undelayed(1);
  Trajectory plain(1);
  for (int step = 0; step <= kDelay; ++step) {
    applyDelayedSgd(rule, undelayed.weights, step == 0 ? g : zero, undelayed.velocity, 0, false);
    applyDelayedSgd(rule, plain.weights, step == kDelay ? g : zero, plain.velocity, kDelay, false);
  }
  EXPECT_FLOAT_EQ(plain.weights[0], -static_cast<float>(kLr));
  EXPECT_NEAR(undelayed.weights[0], -kLr * (1 - std::pow(kMomentum, kDelay + 1)) / (1 - kMomentum),
              1e-6);
}

TEST(SpikeCompensation, ZeroDelayAndZeroMomentumArePlainSgd) {
  const UpdateRule momentum = UpdateRule::sgd(kLr, kMomentum);
  std::vector<float> a = {0.5f, -1.0f, 2.0f};
  std::vector<float> b = a;
  std::vector<float> va(3, 0.25f);
  std::vector<float> vb = va;
  applyDelayedSgd(momentum, a, std::span(kGradient).first(3), va, 0, true);
  applyUpdate(momentum, b, std::span(kGradient).first(3), {vb, {}}, 2);
  EXPECT_EQ(a, b);  // bitwise: the same arithmetic
  EXPECT_EQ(va, vb);

  const UpdateRule plain = UpdateRule::sgd(kLr);
  std::vector<float> c = {0.5f, -1.0f, 2.0f};
  applyDelayedSgd(plain, c, std::span(kGradient).first(3), {}, kDelay, true);
  EXPECT_FLOAT_EQ(c[0], 0.5f - 0.1f * 1.0f);
  EXPECT_FLOAT_EQ(c[2], 2.0f - 0.1f * 3.0f);
  EXPECT_DOUBLE_EQ(spikeWeights(0, 3).velocity, 0.0);
  EXPECT_DOUBLE_EQ(spikeWeights(0, 3).gradient, 1.0);
  EXPECT_DOUBLE_EQ(spikeWeights(0.9, 0).velocity, 1.0);
  EXPECT_DOUBLE_EQ(spikeWeights(0.9, 0).gradient, 0.0);
}

TEST(SpikeCompensation, HandComputedStepWithWeightDecay) {
  UpdateRule rule = UpdateRule::sgd(0.5, 0.5);
  rule.weightDecay = 0.1;
  std::vector<float> w = {2.0f};
  std::vector<float> v = {1.0f};
  const std::vector<float> g = {1.0f};
  // g' = 1 + 0.1·2 = 1.2; v = 0.5·1 + 1.2 = 1.7; D = 2: a = 0.25, b = 0.75/0.5 = 1.5;
  // w = 2 − 0.5·(0.25·1.7 + 1.5·1.2) = 2 − 0.5·2.225 = 0.8875.
  applyDelayedSgd(rule, w, g, v, 2, true);
  EXPECT_FLOAT_EQ(v[0], 1.7f);
  EXPECT_FLOAT_EQ(w[0], 0.8875f);
}

TEST(SpikeCompensation, RefusesRulesItDoesNotCover) {
  std::vector<float> w(2), g(2), v(2);
  UpdateRule nesterov = UpdateRule::sgd(0.1, 0.9);
  nesterov.nesterov = true;
  EXPECT_THROW(applyDelayedSgd(nesterov, w, g, v, 1, true), ConfigError);
  UpdateRule adam{.kind = UpdateRule::Kind::kAdam, .lr = 0.1};
  EXPECT_THROW(applyDelayedSgd(adam, w, g, v, 1, true), ConfigError);
}

TEST(LinearWeightPrediction, HandComputation) {
  const std::vector<float> w = {1.0f, 2.0f, -3.0f};
  const std::vector<float> v = {0.5f, -1.0f, 2.0f};
  std::vector<float> predicted(3);
  predictWeights(w, v, 0.1, 4, predicted);  // w − 0.4·v
  EXPECT_FLOAT_EQ(predicted[0], 0.8f);
  EXPECT_FLOAT_EQ(predicted[1], 2.4f);
  EXPECT_FLOAT_EQ(predicted[2], -3.8f);
  predictWeights(w, {}, 0.1, 4, predicted);  // no momentum: no velocity to extrapolate
  EXPECT_EQ(predicted, w);
}

// In the steady state of a constant gradient the velocity no longer changes, so D plain updates
// land exactly on LWP_D's prediction (every value here is exact in float).
TEST(LinearWeightPrediction, IsWhereDSteadyUpdatesLead) {
  const UpdateRule rule = UpdateRule::sgd(0.125, 0.5);
  std::vector<float> w = {1.0f, -2.0f};
  std::vector<float> v = {2.0f, -4.0f};  // g/(1 − m) for g = (1, −2)
  const std::vector<float> g = {1.0f, -2.0f};
  std::vector<float> predicted(2);
  predictWeights(w, v, rule.lr, 4, predicted);
  for (int i = 0; i < 4; ++i) applyDelayedSgd(rule, w, g, v, 0, false);
  EXPECT_EQ(w, predicted);
  EXPECT_EQ(predicted, (std::vector<float>{0.0f, 0.0f}));
}

TEST(RecipeScaling, BatchOneFromTheUsualRecipe) {
  const SgdRecipe one = scaleRecipe({.batch = 128, .lr = 0.1, .momentum = 0.9}, 1);
  EXPECT_EQ(one.batch, 1u);
  EXPECT_NEAR(one.momentum, 0.99917721, 1e-8);
  EXPECT_NEAR(one.lr, 6.428e-6, 1e-9);
  // Each sample's total contribution, lr / ((1 − m)·B), is kept.
  EXPECT_NEAR(one.lr / ((1 - one.momentum) * 1), 0.1 / ((1 - 0.9) * 128), 1e-12);
  // The momentum's horizon in samples is kept: m^(1/B) per sample.
  EXPECT_NEAR(std::pow(one.momentum, 128), 0.9, 1e-12);
}

TEST(RecipeScaling, IdentityLinearRuleAndRefusals) {
  const SgdRecipe same = scaleRecipe({.batch = 64, .lr = 0.05, .momentum = 0.9}, 64);
  EXPECT_DOUBLE_EQ(same.lr, 0.05);
  EXPECT_DOUBLE_EQ(same.momentum, 0.9);
  const SgdRecipe linear = scaleRecipe({.batch = 64, .lr = 0.05, .momentum = 0}, 16);
  EXPECT_DOUBLE_EQ(linear.lr, 0.0125);
  EXPECT_DOUBLE_EQ(linear.momentum, 0);
  EXPECT_THROW(scaleRecipe({.batch = 0, .lr = 0.1}, 1), ConfigError);
  EXPECT_THROW(scaleRecipe({.batch = 8, .lr = 0.1, .momentum = 1}, 1), ConfigError);
}

TEST(DelayCompensationSpec, ParsesEveryChoiceAndNamesThem) {
  for (const char* spec : {"none", "sc", "lwp", "sc+lwp"}) {
    EXPECT_EQ(DelayCompensation::parse(spec).describe(), spec);
  }
  EXPECT_EQ(DelayCompensation::parse("lwp+sc").describe(), "sc+lwp");
  EXPECT_FALSE(DelayCompensation::parse("none").any());
  try {
    DelayCompensation::parse("spike");
    FAIL() << "accepted an unknown compensation";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sc+lwp"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradsync
