// The public LibTorch API (include/gradsync/torch/) on a model gradsync has never seen
// (api_fixture.h), ranks as threads: the ring strategies, broadcasts, join and collectives.
#include "gradsync/torch/distributed_optimizer.h"  // first: it includes all it needs

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "api_fixture.h"
#include "gradsync/error.h"
#include "gradsync/torch/collectives.h"
#include "optim/update_rule.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

// W workers with batch B/W average W mean gradients, which is the mean gradient of the batch B
// that one worker sees: the same parameters up to float rounding, for every schedule, with SGD
// and AdamW (applied by torch in gradient mode, by the engine's update rules in p3 and sharded).
// The sums differ only in their grouping (a few ulps per step, 6e-8 relative each), so 1e-5
// after 4 steps is a wide margin that one wrong average (a factor of W) or a skipped update
// would exceed by orders.
//
// The update modes see the auxiliary head from the first step on: before any rank has used a
// parameter, torch on one worker skips it (no gradient), while the engine, which cannot tell
// "unused everywhere" from "a zero average", updates it with a zero gradient; for AdamW that
// counts a step in its bias correction (0.32 apart after 4 steps). docs/api.md states it.
TEST(DistributedOptimizer, WorldSizesGiveOneWorkersParameters) {
  struct Case {
    const char* schedule;
    const char* sync;
    const char* optimizer;
  };
  const std::vector<Case> cases = {{"fifo", "ssgd", "sgd"},       {"wfbp", "ssgd", "sgd"},
                                   {"fusion:0.5", "ssgd", "sgd"}, {"p3", "ssgd", "sgd"},
                                   {"wfbp", "sharded", "sgd"},    {"fifo", "ssgd", "adamw"},
                                   {"wfbp", "ssgd", "adamw"},     {"fusion:0.5", "ssgd", "adamw"},
                                   {"p3", "ssgd", "adamw"},       {"wfbp", "sharded", "adamw"}};
  for (const char* optimizer : {"sgd", "adamw"}) {
    std::vector<SequenceClassifier> oneOdd = trained(1, optimizer, {}, kSteps, 1);
    std::vector<SequenceClassifier> oneEven = trained(1, optimizer, {}, kSteps, 0);
    for (const Case& c : cases) {
      if (std::string(c.optimizer) != optimizer) continue;
      const bool updateMode = std::string(c.schedule) == "p3" || std::string(c.sync) == "sharded";
      std::vector<SequenceClassifier>& one = updateMode ? oneEven : oneOdd;
      for (int workers : {2, 3}) {
        SyncOptions sync{.schedule = c.schedule, .sync = c.sync};
        std::vector<SequenceClassifier> many =
            trained(workers, optimizer, sync, kSteps, updateMode ? 0 : 1);
        for (int r = 0; r < workers; ++r) {
          double difference = maxRelativeDifference(one[0], many[static_cast<size_t>(r)]);
          if (r == 0)
            std::printf("%s %s %s, %d workers: %.3g\n", c.schedule, c.sync, optimizer, workers,
                        difference);
          EXPECT_LT(difference, 1e-5) << c.schedule << " " << c.sync << " " << optimizer << " on "
                                      << workers << " workers, rank " << r;
        }
      }
    }
  }
}

// The same check must fail when the math is wrong: one update missing moves the parameters far
// beyond the bound.
TEST(DistributedOptimizer, ComparisonCatchesAMissingUpdate) {
  std::vector<SequenceClassifier> one = trained(1, "sgd", {});
  std::vector<SequenceClassifier> short2 = trained(2, "sgd", {}, kSteps - 1);
  double difference = maxRelativeDifference(one[0], short2[0]);
  std::printf("one update missing: %.3g\n", difference);
  EXPECT_GT(difference, 1e-3);
}

// Gradient accumulation (SyncOptions::backwardPassesPerStep): two workers, each running two
// backward passes per step on halves of its share with the loss halved (the passes sum to the
// share's mean gradient), end with one worker's parameters on the whole batch, in gradient mode
// and in update mode. A third pass before step() is refused, naming the option.
TEST(DistributedOptimizer, BackwardPassesPerStepAccumulateBeforeAveraging) {
  constexpr int kWorkers = 2;
  constexpr int64_t kHalf = kGlobalBatch / kWorkers / 2;
  std::vector<SequenceClassifier> one = trained(1, "sgd", {}, kSteps, 0);
  for (const char* schedule : {"wfbp", "p3"}) {
    std::vector<SequenceClassifier> models = {freshModel(), freshModel()};
    runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& transport) {
      SequenceClassifier& model = models[static_cast<size_t>(transport.rank())];
      auto optimizer = makeOptimizer("sgd", model);
      DistributedOptimizer distributed(*optimizer, model.ptr(), transport,
                                       {.schedule = schedule, .backwardPassesPerStep = 2});
      for (int64_t step = 0; step < kSteps; ++step) {
        auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
        distributed.zeroGrad();
        for (int64_t pass = 0; pass < 2; ++pass) {
          const int64_t first = (transport.rank() * 2 + pass) * kHalf;
          torch::Tensor logits = model->forward(tokens.narrow(0, first, kHalf), step % 2 == 0);
          (0.5 * torch::nn::functional::cross_entropy(logits, labels.narrow(0, first, kHalf)))
              .backward();
        }
        distributed.step();
      }
      distributed.waitForParameters();
    });
    for (auto& model : models) {
      double difference = maxRelativeDifference(one[0], model);
      std::printf("%s, 2 workers x 2 passes: %.3g\n", schedule, difference);
      EXPECT_LT(difference, 1e-5) << schedule;
    }
  }
  std::string message;
  runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& transport) {
    SequenceClassifier model = freshModel();
    auto optimizer = makeOptimizer("sgd", model);
    DistributedOptimizer distributed(*optimizer, model.ptr(), transport,
                                     {.backwardPassesPerStep = 2});
    auto [tokens, labels] = example::taskBatch(3, 0, 4);
    distributed.zeroGrad();
    try {
      for (int pass = 0; pass < 3; ++pass)
        torch::nn::functional::cross_entropy(model->forward(tokens), labels).backward();
    } catch (const std::exception& e) {
      if (transport.rank() == 0) message = e.what();
    }
    distributed.step();
  });
  EXPECT_NE(message.find("more than 2 backward pass"), std::string::npos) << message;
}

TEST(DistributedOptimizer, CompressedGradientsStillTrainTogether) {
  std::vector<SequenceClassifier> models =
      trained(3, "adamw", {.compress = "topk:0.1", .compressMinElements = 16});
  EXPECT_EQ(maxRelativeDifference(models[0], models[1]), 0);  // one average: identical replicas
  EXPECT_EQ(maxRelativeDifference(models[0], models[2]), 0);
}

TEST(DistributedOptimizer, RefusesWhatItCannotRunWithTheReason) {
  expectRefused("rmsprop", {.schedule = "p3"}, "implements SGD, Adam and AdamW");
  expectRefused("amsgrad", {.sync = "sharded"}, "no amsgrad");
  expectRefused("groups", {.schedule = "p3"}, "groups differ");
  expectRefused("sgd", {.compress = "dgc:0.01"}, "applies momentum itself");
  expectRefused("sgd", {.schedule = "sideways"}, "sideways");
}

// In update mode the engine applies the rule it was given: a learning-rate schedule would be
// silently ignored, so a changed rate is refused at the next step.
TEST(DistributedOptimizer, UpdateModeRefusesAChangedLearningRate) {
  auto body = [](Transport& transport) {
    SequenceClassifier model = freshModel();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
    DistributedOptimizer distributed(optimizer, model.ptr(), transport, {.schedule = "p3"});
    auto [tokens, labels] = example::taskBatch(3, 0, 4);
    distributed.zeroGrad();
    torch::nn::functional::cross_entropy(model->forward(tokens), labels).backward();
    optimizer.param_groups()[0].options().set_lr(0.05);
    distributed.step();
  };
  EXPECT_THROW(runWithTransports(TransportKind::kLoopback, 2, body), ConfigError);
}

TEST(DistributedOptimizer, RanksWithDifferentParametersAreRefusedNamingTheDifference) {
  std::vector<std::string> messages(3);
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& transport) {
    int hidden = transport.rank() == 2 ? 24 : 16;  // rank 2 was built differently
    SequenceClassifier model(example::kVocabulary, hidden, example::kClasses);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
    try {
      DistributedOptimizer distributed(optimizer, model.ptr(), transport);
    } catch (const ConfigError& e) {
      messages[static_cast<size_t>(transport.rank())] = e.what();
    }
  });
  for (const std::string& message : messages) {
    EXPECT_NE(message.find("rank 2"), std::string::npos) << message;
    EXPECT_NE(message.find("lstm.weight_ih_l0"), std::string::npos) << message;
  }
}

TEST(DistributedOptimizer, AnOptimizerOverForeignTensorsIsRefused) {
  SequenceClassifier model = freshModel();
  torch::Tensor stranger = torch::zeros({3}, torch::requires_grad());
  torch::optim::SGD optimizer({stranger}, torch::optim::SGDOptions(0.1));
  runWithTransports(TransportKind::kLoopback, 1, [&](Transport& transport) {
    EXPECT_THROW(DistributedOptimizer(optimizer, model.ptr(), transport), ConfigError);
  });
}

std::string key(const torch::Tensor& parameter) {
  return c10::guts::to_string(parameter.unsafeGetTensorImpl());
}

TEST(DistributedOptimizer, BroadcastGivesEveryRankRootsParametersAndOptimizerState) {
  std::vector<SequenceClassifier> models;
  for (int r = 0; r < 3; ++r) models.push_back(SequenceClassifier(example::kVocabulary, 16, 3));
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers;
  for (auto& model : models) optimizers.push_back(makeOptimizer("adamw", model));
  // Rank 0 has taken a step: its AdamW moments exist; the others have none.
  auto [tokens, labels] = example::taskBatch(5, 0, 6);
  torch::nn::functional::cross_entropy(models[0]->forward(tokens), labels).backward();
  optimizers[0]->step();
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& transport) {
    auto r = static_cast<size_t>(transport.rank());
    broadcastParameters(*models[r], transport);
    broadcastOptimizerState(*optimizers[r], transport);
  });
  for (size_t r = 1; r < 3; ++r) {
    EXPECT_EQ(maxRelativeDifference(models[0], models[r]), 0);
    ASSERT_EQ(optimizers[r]->state().size(), optimizers[0]->state().size());
    auto p0 = models[0]->parameters();
    auto pr = models[r]->parameters();
    for (size_t i = 0; i < p0.size(); ++i) {
      auto found0 = optimizers[0]->state().find(key(p0[i]));
      auto foundR = optimizers[r]->state().find(key(pr[i]));
      // The auxiliary head took no part in rank 0's step: no state, on any rank.
      ASSERT_EQ(found0 == optimizers[0]->state().end(), foundR == optimizers[r]->state().end());
      if (found0 == optimizers[0]->state().end()) continue;
      auto& s0 = static_cast<torch::optim::AdamWParamState&>(*found0->second);
      auto& sr = static_cast<torch::optim::AdamWParamState&>(*foundR->second);
      EXPECT_EQ(sr.step(), s0.step());
      EXPECT_TRUE(torch::equal(sr.exp_avg(), s0.exp_avg()));
      EXPECT_TRUE(torch::equal(sr.exp_avg_sq(), s0.exp_avg_sq()));
    }
  }
}

// Ranks with unequal numbers of batches (Horovod's and DDP's join): rank `shortRank` of 3 has
// data for 2 of 4 steps, then joins. Steps 1-2 average over all 12 samples, steps 3-4 over the
// 8 of the other two ranks: one worker given exactly those samples ends with the same
// parameters. Every rank returns from join (no hang).
TEST(DistributedOptimizer, JoinAveragesOverTheRanksThatHaveData) {
  constexpr int kWorkers = 3;
  constexpr int64_t kShare = kGlobalBatch / kWorkers;
  for (int shortRank : {0, 2}) {
    for (const char* optimizer : {"sgd", "adamw"}) {
      std::vector<SequenceClassifier> models;
      for (int r = 0; r < kWorkers; ++r) models.push_back(freshModel());
      runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& transport) {
        const int rank = transport.rank();
        SequenceClassifier& model = models[static_cast<size_t>(rank)];
        auto opt = makeOptimizer(optimizer, model);
        DistributedOptimizer distributed(*opt, model.ptr(), transport, {.join = true});
        const int64_t steps = rank == shortRank ? kSteps / 2 : kSteps;
        for (int64_t step = 0; step < steps; ++step) {
          auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
          distributed.zeroGrad();
          torch::nn::functional::cross_entropy(
              model->forward(tokens.narrow(0, rank * kShare, kShare)),
              labels.narrow(0, rank * kShare, kShare))
              .backward();
          distributed.step();
        }
        distributed.join();
      });
      // One worker with the samples of the ranks that had data at each step.
      SequenceClassifier one = freshModel();
      auto opt = makeOptimizer(optimizer, one);
      for (int64_t step = 0; step < kSteps; ++step) {
        auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
        std::vector<torch::Tensor> keptTokens, keptLabels;
        for (int r = 0; r < kWorkers; ++r) {
          if (step >= kSteps / 2 && r == shortRank) continue;
          keptTokens.push_back(tokens.narrow(0, r * kShare, kShare));
          keptLabels.push_back(labels.narrow(0, r * kShare, kShare));
        }
        opt->zero_grad();
        torch::nn::functional::cross_entropy(one->forward(torch::cat(keptTokens)),
                                             torch::cat(keptLabels))
            .backward();
        opt->step();
      }
      for (int r = 0; r < kWorkers; ++r) {
        double difference = maxRelativeDifference(one, models[static_cast<size_t>(r)]);
        EXPECT_LT(difference, 1e-5) << optimizer << ", rank " << shortRank << " short; rank " << r;
      }
    }
  }
}

TEST(DistributedOptimizer, JoinNeedsTheOptionAndGradientMode) {
  expectRefused("sgd", {.schedule = "p3", .join = true}, "join works in gradient mode only");
  runWithTransports(TransportKind::kLoopback, 1, [&](Transport& transport) {
    SequenceClassifier model = freshModel();
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1));
    DistributedOptimizer distributed(optimizer, model.ptr(), transport);
    EXPECT_THROW(distributed.join(), ConfigError);
  });
}

// The engine's update rules against torch's optimizers, the naive reference: five steps of
// random gradients on 1,000 elements, every option each rule has. Only rounding may differ
// (torch's kernels may fuse a multiply-add): a few ulps of the largest element.
TEST(UpdateRules, MatchTorchOptimizers) {
  struct Case {
    std::string name;
    UpdateRule rule;
    std::function<std::unique_ptr<torch::optim::Optimizer>(torch::Tensor)> torchOptimizer;
  };
  using namespace torch::optim;
  const std::vector<Case> cases = {
      {"sgd", UpdateRule::sgd(0.1),
       [](torch::Tensor p) { return std::make_unique<SGD>(std::vector{p}, SGDOptions(0.1)); }},
      {"sgd momentum dampening decay",
       {.lr = 0.1, .momentum = 0.9, .dampening = 0.2, .weightDecay = 0.01},
       [](torch::Tensor p) {
         return std::make_unique<SGD>(
             std::vector{p}, SGDOptions(0.1).momentum(0.9).dampening(0.2).weight_decay(0.01));
       }},
      {"sgd nesterov",
       {.lr = 0.1, .momentum = 0.9, .nesterov = true, .weightDecay = 0.01},
       [](torch::Tensor p) {
         return std::make_unique<SGD>(
             std::vector{p}, SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.01));
       }},
      {"adam",
       {.kind = UpdateRule::Kind::kAdam, .lr = 0.01, .weightDecay = 0.01},
       [](torch::Tensor p) {
         return std::make_unique<Adam>(std::vector{p}, AdamOptions(0.01).weight_decay(0.01));
       }},
      {"adamw",
       {.kind = UpdateRule::Kind::kAdamW,
        .lr = 0.01,
        .beta1 = 0.8,
        .beta2 = 0.99,
        .eps = 1e-6,
        .weightDecay = 0.05},
       [](torch::Tensor p) {
         return std::make_unique<AdamW>(
             std::vector{p}, AdamWOptions(0.01).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.05));
       }},
  };
  for (const Case& c : cases) {
    torch::manual_seed(11);
    torch::Tensor reference = torch::randn({1000}).requires_grad_();
    std::vector<float> mine(reference.data_ptr<float>(), reference.data_ptr<float>() + 1000);
    std::vector<float> first(1000, 0.0f), second(1000, 0.0f);
    auto optimizer = c.torchOptimizer(reference);
    for (uint64_t step = 1; step <= 5; ++step) {
      torch::Tensor gradient = torch::randn({1000});
      reference.mutable_grad() = gradient.clone();
      optimizer->step();
      UpdateState state{c.rule.stateSlots() >= 1 ? std::span(first) : std::span<float>{},
                        c.rule.stateSlots() == 2 ? std::span(second) : std::span<float>{}};
      applyUpdate(c.rule, mine, {gradient.data_ptr<float>(), 1000}, state, step);
    }
    torch::Tensor ours = torch::from_blob(mine.data(), {1000});
    // Relative to the largest element: an element near zero carries the rounding of the larger
    // values it passed through (an ulp of 1 is 1.2e-7).
    double worst =
        ((ours - reference.detach()).abs().max() / reference.detach().abs().max()).item<double>();
    std::printf("%s (%s): %.3g\n", c.name.c_str(), c.rule.describe().c_str(), worst);
    EXPECT_LT(worst, 1e-6) << c.name;
  }
}

// Tensor collectives at sizes 0, 1, non-divisible and large, on an odd world size.
TEST(DistributedOptimizer, TensorCollectives) {
  for (int64_t n : {0, 1, 7, 1 << 18}) {
    runWithTransports(TransportKind::kTcp, 3, [&](Transport& transport) {
      const float mine = static_cast<float>(transport.rank() + 1);
      torch::Tensor t = torch::full({n}, mine);
      allreduce(transport, t);
      EXPECT_TRUE(torch::allclose(t, torch::full({n}, 2.0f))) << n;
      torch::Tensor s = torch::full({n}, mine);
      allreduce(transport, s, ReduceOp::kSum);
      EXPECT_TRUE(torch::equal(s, torch::full({n}, 6.0f))) << n;
      torch::Tensor b = torch::full({n}, mine);
      broadcast(transport, b, 2);
      EXPECT_TRUE(torch::equal(b, torch::full({n}, 3.0f))) << n;
      torch::Tensor all = allgather(transport, torch::full({n, 2}, mine));
      ASSERT_EQ(all.sizes().vec(), (std::vector<int64_t>{3, n, 2}));
      for (int r = 0; r < 3; ++r) EXPECT_TRUE(torch::equal(all[r], torch::full({n, 2}, r + 1.0f)));
    });
  }
  runWithTransports(TransportKind::kLoopback, 2, [&](Transport& transport) {
    torch::Tensor doubles = torch::zeros({4}, torch::kDouble);
    EXPECT_THROW(allreduce(transport, doubles), ConfigError);
  });
}

}  // namespace
}  // namespace gradsync::testing
