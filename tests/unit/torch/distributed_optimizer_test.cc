// The public LibTorch API (include/gradsync/torch/) on a model gradsync has never seen
// (examples/02_own_model's LSTM with an auxiliary head some steps skip), ranks as threads.
#include "gradsync/torch/distributed_optimizer.h"  // first: it includes all it needs

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "../../../examples/02_own_model/sequence_model.h"
#include "gradsync/error.h"
#include "gradsync/torch/collectives.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

using example::SequenceClassifier;

constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2 and 3 workers
constexpr int64_t kSteps = 4;

SequenceClassifier freshModel() {
  torch::manual_seed(7);
  return SequenceClassifier(example::kVocabulary, 16, example::kClasses);
}

// AdamW's eps is 1e-3 here, not 1e-8, so that the comparison is well-conditioned: Adam divides
// by sqrt(v) + eps, so where an element's gradient is near eps, a rounding difference d in the
// gradient moves the update by up to lr * d / eps. The gradients' rounding differences here are
// about 1e-9 (a sum of 12 terms grouped differently), so with eps = 1e-8 one element ended
// 8.9e-6 apart after 4 steps (3 workers), with eps = 1e-6 3.2e-5 and with 1e-4 4.1e-6; with 1e-3
// every element stays within 1e-6. The moments and the decoupled weight decay are AdamW's all
// the same.
std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& kind,
                                                       SequenceClassifier& model) {
  if (kind == "adamw") {
    return std::make_unique<torch::optim::AdamW>(model->parameters(),
                                                 torch::optim::AdamWOptions(1e-2).eps(1e-3));
  }
  return std::make_unique<torch::optim::SGD>(model->parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.9));
}

// Trains `models[r]` on rank r's share of each global batch; the auxiliary head is used on odd
// steps only (unused parameters on the others, including the first).
void trainOnRanks(std::vector<SequenceClassifier>& models, const std::string& optimizerKind,
                  const SyncOptions& sync, int64_t steps) {
  const int size = static_cast<int>(models.size());
  runWithTransports(TransportKind::kLoopback, size, [&](Transport& transport) {
    SequenceClassifier& model = models[static_cast<size_t>(transport.rank())];
    auto optimizer = makeOptimizer(optimizerKind, model);
    DistributedOptimizer distributed(*optimizer, model.ptr(), transport, sync);
    const int64_t share = kGlobalBatch / size;
    for (int64_t step = 0; step < steps; ++step) {
      auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
      distributed.zeroGrad();
      torch::Tensor logits =
          model->forward(tokens.narrow(0, transport.rank() * share, share), step % 2 == 1);
      torch::nn::functional::cross_entropy(logits,
                                           labels.narrow(0, transport.rank() * share, share))
          .backward();
      distributed.step();
    }
    distributed.waitForParameters();
  });
}

std::vector<SequenceClassifier> trained(int workers, const std::string& optimizer,
                                        const SyncOptions& sync, int64_t steps = kSteps) {
  std::vector<SequenceClassifier> models;
  for (int r = 0; r < workers; ++r) models.push_back(freshModel());
  trainOnRanks(models, optimizer, sync, steps);
  return models;
}

// The largest difference between two models' parameters, relative to the element (at least
// 1e-2, so that elements near zero do not dominate), as the trainer's tests measure it.
double maxRelativeDifference(SequenceClassifier& a, SequenceClassifier& b) {
  double worst = 0;
  auto pa = a->parameters();
  auto pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    torch::Tensor scale = torch::maximum(pa[i].abs(), pb[i].abs()).clamp_min(1e-2);
    worst = std::max(worst, ((pa[i] - pb[i]).abs() / scale).max().item<double>());
  }
  return worst;
}

// W workers with batch B/W average W mean gradients, which is the mean gradient of the batch B
// that one worker sees: the same parameters up to float rounding, for every gradient-mode
// schedule and any optimizer, and for the update modes with SGD. The sums differ only in their
// grouping (a few ulps per step, 6e-8 relative each), so 1e-5 after 4 steps is a wide margin
// that one wrong average (a factor of W) or a skipped update would exceed by orders.
TEST(DistributedOptimizer, WorldSizesGiveOneWorkersParameters) {
  struct Case {
    const char* schedule;
    const char* sync;
    const char* optimizer;
  };
  const std::vector<Case> cases = {{"fifo", "ssgd", "sgd"},       {"wfbp", "ssgd", "sgd"},
                                   {"fusion:0.5", "ssgd", "sgd"}, {"p3", "ssgd", "sgd"},
                                   {"wfbp", "sharded", "sgd"},    {"fifo", "ssgd", "adamw"},
                                   {"wfbp", "ssgd", "adamw"},     {"fusion:0.5", "ssgd", "adamw"}};
  for (const char* optimizer : {"sgd", "adamw"}) {
    std::vector<SequenceClassifier> one = trained(1, optimizer, {});
    for (const Case& c : cases) {
      if (std::string(c.optimizer) != optimizer) continue;
      for (int workers : {2, 3}) {
        SyncOptions sync{.schedule = c.schedule, .sync = c.sync};
        std::vector<SequenceClassifier> many = trained(workers, optimizer, sync);
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

TEST(DistributedOptimizer, CompressedGradientsStillTrainTogether) {
  std::vector<SequenceClassifier> models =
      trained(3, "adamw", {.compress = "topk:0.1", .compressMinElements = 16});
  EXPECT_EQ(maxRelativeDifference(models[0], models[1]), 0);  // one average: identical replicas
  EXPECT_EQ(maxRelativeDifference(models[0], models[2]), 0);
}

void expectRefused(const std::string& optimizer, const SyncOptions& sync,
                   const std::string& needle) {
  try {
    trained(2, optimizer, sync);
    FAIL() << "no ConfigError; expected one saying " << needle;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DistributedOptimizer, RefusesWhatItCannotRunWithTheReason) {
  expectRefused("adamw", {.schedule = "p3"}, "implements SGD only");
  expectRefused("adamw", {.sync = "sharded"}, "implements SGD only");
  expectRefused("sgd", {.sync = "odsgd"}, "gradsync train");
  expectRefused("sgd", {.compress = "dgc:0.01"}, "applies momentum itself");
  expectRefused("sgd", {.schedule = "sideways"}, "sideways");
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
