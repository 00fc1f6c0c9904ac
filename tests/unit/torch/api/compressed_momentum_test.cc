// SyncOptions::compressMomentum (1-bit Adam's exchange, torch/api/compressed_momentum.h) through
// the public API, ranks as threads (api_fixture.h's model): with a lossless codec it is AdamW on
// the global batch with the second moment frozen after the warm-up, against a naive replay, in
// gradient mode and with p3 (the engine's update rule);
// with 1-bit codes every rank still ends with the same bits; what it cannot do is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "api_fixture.h"

namespace gradsync::testing {
namespace {

constexpr int64_t kMomentumWarmup = 2;
constexpr int64_t kMomentumSteps = 6;
// The auxiliary head stays unused (no gradient, no Adam state) on every rank: the parity no step
// has. Partly used parameters are the engine's business, tested in distributed_optimizer_test.
constexpr int kAuxiliaryParity = 2;
constexpr bool kAuxiliaryNever = false;

SyncOptions momentumOptions(const std::string& compress) {
  return {.compress = compress,
          .compressMinElements = 1,
          .compressWarmup = kMomentumWarmup,
          .compressMomentum = true,
          .guard = false};
}

// One model on the whole global batch: AdamW for the warm-up steps, then AdamW's update with
// the second moment, and its bias correction, left as the warm-up's last step made them (v only
// rising where the momentum outgrows it), written out.
SequenceClassifier naiveFrozenAdamW() {
  SequenceClassifier model = freshModel();
  auto optimizer = makeOptimizer("adamw", model);
  auto& adamw = static_cast<torch::optim::AdamW&>(*optimizer);
  const auto& o = static_cast<const torch::optim::AdamWOptions&>(adamw.defaults());
  const double lr = o.lr(), beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  for (int64_t step = 0; step < kMomentumSteps; ++step) {
    auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
    optimizer->zero_grad();
    torch::nn::functional::cross_entropy(model->forward(tokens, kAuxiliaryNever), labels)
        .backward();
    if (step < kMomentumWarmup) {
      optimizer->step();
      continue;
    }
    torch::NoGradGuard noGrad;
    for (torch::Tensor& p : model->parameters()) {
      auto found = adamw.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (found == adamw.state().end()) continue;  // the auxiliary head, never used
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      torch::Tensor grad = p.grad();
      state.exp_avg(state.exp_avg() * beta1 + grad * (1 - beta1));
      const torch::Tensor& m = state.exp_avg();
      state.exp_avg_sq(
          torch::maximum(state.exp_avg_sq(), state.exp_avg_sq() * beta2 + m * m * (1 - beta2)));
      state.step(state.step() + 1);
      p.mul_(1 - lr * o.weight_decay());
      const double bias1 = 1 - std::pow(beta1, static_cast<double>(state.step()));
      const double bias2 = 1 - std::pow(beta2, static_cast<double>(kMomentumWarmup));
      p.sub_(lr / bias1 * state.exp_avg() /
             (state.exp_avg_sq().sqrt() / std::sqrt(bias2) + o.eps()));
    }
  }
  return model;
}

// topk:1 sends every value: the average of the ranks' momenta β1·m + (1 − β1)·g_r is β1·m plus
// (1 − β1) times the averaged gradient, the global batch's up to rounding (1e-5 as the other
// API tests). One worker has no engine: its gradients are turned into momenta in step().
TEST(CompressedMomentum, LosslessExchangeIsAdamWWithTheSecondMomentFrozen) {
  SequenceClassifier reference = naiveFrozenAdamW();
  for (int workers : {1, 3}) {
    std::vector<SequenceClassifier> many =
        trained(workers, "adamw", momentumOptions("topk:1"), kMomentumSteps, kAuxiliaryParity);
    for (int r = 0; r < workers; ++r) {
      const double difference = maxRelativeDifference(reference, many[static_cast<size_t>(r)]);
      if (r == 0) std::printf("%d workers: %.3g from the naive replay\n", workers, difference);
      EXPECT_LT(difference, 1e-5) << workers << " workers, rank " << r;
    }
  }
  // Without the freeze (plain AdamW after the warm-up) the parameters end elsewhere: the check
  // above sees the mode.
  std::vector<SequenceClassifier> plain =
      trained(1, "adamw", {.compressMinElements = 1}, kMomentumSteps, kAuxiliaryParity);
  EXPECT_GT(maxRelativeDifference(reference, plain[0]), 1e-4);
}

// With 1-bit codes and error feedback the update is no longer the global batch's, but every rank
// applies the same averaged momentum: the replicas stay bitwise equal.
TEST(CompressedMomentum, OneBitMomentaKeepEveryReplicaTheSame) {
  std::vector<SequenceClassifier> many =
      trained(3, "adamw", momentumOptions("onebit"), kMomentumSteps, kAuxiliaryParity);
  for (size_t r = 1; r < many.size(); ++r) {
    EXPECT_EQ(maxRelativeDifference(many[0], many[r]), 0.0) << "rank " << r;
  }
  SequenceClassifier reference = naiveFrozenAdamW();
  const double difference = maxRelativeDifference(reference, many[0]);
  std::printf("onebit momenta: %.3g from the lossless replay\n", difference);
  EXPECT_GT(difference, 0.0);  // compressed: not the lossless run
}

// The parameters of `a` and `b` but the auxiliary head's, as maxRelativeDifference.
double differenceButAuxiliary(SequenceClassifier& a, SequenceClassifier& b) {
  double worst = 0;
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  for (const auto& item : pa) {
    if (item.key().rfind("auxiliary.", 0) == 0) continue;
    const torch::Tensor& x = item.value();
    const torch::Tensor& y = pb[item.key()];
    torch::Tensor scale = torch::maximum(x.abs(), y.abs()).clamp_min(1e-2);
    worst = std::max(worst, ((x - y).abs() / scale).max().item<double>());
  }
  return worst;
}

// With p3 the engine applies the update slice by slice (UpdateRule::varianceFrozenAfter): the
// same lossless replay, and the same bits on every rank with 1-bit codes. The auxiliary head,
// never used, is left out: the engine cannot tell it from a zero average and applies AdamW's
// decay to it every step (DistributedOptimizer.WorldSizesGiveOneWorkersParameters), torch skips
// it.
TEST(CompressedMomentum, P3RunsItInTheEngine) {
  SequenceClassifier reference = naiveFrozenAdamW();
  SyncOptions lossless = momentumOptions("topk:1");
  lossless.schedule = "p3";
  std::vector<SequenceClassifier> many =
      trained(3, "adamw", lossless, kMomentumSteps, kAuxiliaryParity);
  for (size_t r = 0; r < many.size(); ++r) {
    const double difference = differenceButAuxiliary(reference, many[r]);
    if (r == 0) std::printf("p3, 3 workers: %.3g from the naive replay\n", difference);
    EXPECT_LT(difference, 1e-5) << "rank " << r;
  }
  // Plain AdamW in the engine after the warm-up ends elsewhere: the check sees the mode.
  SyncOptions plain{.schedule = "p3", .compressMinElements = 1};
  std::vector<SequenceClassifier> adamw =
      trained(3, "adamw", plain, kMomentumSteps, kAuxiliaryParity);
  EXPECT_GT(differenceButAuxiliary(reference, adamw[0]), 1e-4);

  SyncOptions onebit = momentumOptions("onebit");
  onebit.schedule = "p3";
  std::vector<SequenceClassifier> coded =
      trained(3, "adamw", onebit, kMomentumSteps, kAuxiliaryParity);
  for (size_t r = 1; r < coded.size(); ++r) {
    EXPECT_EQ(maxRelativeDifference(coded[0], coded[r]), 0.0) << "rank " << r;
  }
  EXPECT_GT(differenceButAuxiliary(reference, coded[0]), 0.0);
}

TEST(CompressedMomentum, RefusesWhatItCannotDo) {
  expectRefused("sgd", momentumOptions("onebit"), "needs an Adam or AdamW optimizer");
  expectRefused("amsgrad", momentumOptions("onebit"), "amsgrad");
  SyncOptions noWarmup = momentumOptions("onebit");
  noWarmup.compressWarmup = 0;
  expectRefused("adamw", noWarmup, "dense warm-up");
  expectRefused("adamw", momentumOptions("none"), "compresses the momentum");
  SyncOptions local = momentumOptions("onebit");
  local.sync = "diloco:2";
  expectRefused("adamw", local, "is for ssgd");
  SyncOptions sharded = momentumOptions("onebit");
  sharded.sync = "sharded";
  expectRefused("adamw", sharded, "is for ssgd");
  SyncOptions servers = momentumOptions("onebit");
  servers.parameterServers = true;
  expectRefused("adamw", servers, "parameter servers apply SGD");
}

}  // namespace
}  // namespace gradsync::testing
