// Streaming DiLoCo (torch/api/outer_optimizer.h: diloco's fragments, delay and alpha) through the
// public LibTorch API (api_fixture.h's model, ranks as threads) against a naive reference: every
// worker's local steps in plain torch, each fragment's pseudo-gradients averaged by hand when
// its turn comes, the outer Nesterov step, and the merge τ steps later.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "api_fixture.h"
#include "sync/fragments.h"
#include "sync/strategy.h"

namespace gradsync::testing {
namespace {

struct Streaming {
  int period = 4, fragments = 2, delay = 0;
  double alpha = 0;
  bool eager = false;  // delay = H/P, the merge rebasing the steps since the launch
};

// What diloco:H,fragments=P,delay=τ,alpha=α (or eager=on) does to `workers` workers over `steps`
// steps (inner plain SGD, lr 0.1; outer Nesterov, lr 0.7, momentum 0.9), computed naively: returns
// each worker's model.
std::vector<SequenceClassifier> naiveStreaming(int workers, int64_t steps, Streaming s) {
  torch::NoGradGuard noGrad;
  std::vector<SequenceClassifier> models;
  std::vector<std::unique_ptr<torch::optim::SGD>> inner;
  for (int r = 0; r < workers; ++r) {
    models.push_back(freshModel());
    inner.push_back(std::make_unique<torch::optim::SGD>(models.back()->parameters(),
                                                        torch::optim::SGDOptions(0.1)));
  }
  std::vector<torch::Tensor> global, momentum;
  for (const torch::Tensor& p : models[0]->parameters()) {
    global.push_back(p.detach().clone());
    momentum.push_back(torch::zeros_like(p));
  }
  const size_t tensors = global.size();
  // The fragments: largest tensor first (model order on ties), each to the lightest fragment.
  std::vector<int> fragmentOf(tensors);
  std::vector<int64_t> load(static_cast<size_t>(s.fragments), 0);
  std::vector<bool> placed(tensors, false);
  for (size_t n = 0; n < tensors; ++n) {
    size_t largest = tensors;
    for (size_t i = 0; i < tensors; ++i) {
      if (!placed[i] && (largest == tensors || global[i].numel() > global[largest].numel())) {
        largest = i;
      }
    }
    size_t lightest = 0;
    for (size_t f = 1; f < load.size(); ++f) {
      if (load[f] < load[lightest]) lightest = f;
    }
    placed[largest] = true;
    fragmentOf[largest] = static_cast<int>(lightest);
    load[lightest] += global[largest].numel();
  }
  const int64_t share = kGlobalBatch / workers, stride = s.period / s.fragments;
  int pending = -1;
  int64_t launchedAt = 0;
  std::vector<torch::Tensor> averaged(tensors);  // the pending fragment's, by tensor
  // eager: each worker's tensors at the launch, by worker and tensor
  std::vector<std::vector<torch::Tensor>> launched(workers, std::vector<torch::Tensor>(tensors));
  const int delay = s.eager ? stride : s.delay;
  auto merge = [&] {
    for (size_t i = 0; i < tensors; ++i) {
      if (fragmentOf[i] != pending) continue;
      momentum[i] = 0.9 * momentum[i] + averaged[i];
      global[i] -= 0.7 * (averaged[i] + 0.9 * momentum[i]);
      for (int r = 0; r < workers; ++r) {
        torch::Tensor p = models[r]->parameters()[i];
        p.copy_(s.eager ? global[i] + (p - launched[r][i])
                        : s.alpha * p + (1 - s.alpha) * global[i]);
      }
    }
    pending = -1;
  };
  for (int64_t step = 0; step < steps; ++step) {
    for (int r = 0; r < workers; ++r) {
      torch::AutoGradMode enable(true);
      auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
      inner[r]->zero_grad();
      torch::Tensor logits = models[r]->forward(tokens.narrow(0, r * share, share), step % 2 == 0);
      torch::nn::functional::cross_entropy(logits, labels.narrow(0, r * share, share)).backward();
      inner[r]->step();
    }
    const int64_t done = step + 1;  // local steps so far
    if (pending >= 0 && done == launchedAt + delay) merge();
    if (done % stride == 0) {
      pending = static_cast<int>((done / stride - 1) % s.fragments);
      launchedAt = done;
      for (size_t i = 0; i < tensors; ++i) {
        if (fragmentOf[i] != pending) continue;
        averaged[i] = torch::zeros_like(global[i]);
        for (int r = 0; r < workers; ++r) {
          averaged[i] += global[i] - models[r]->parameters()[i];
          launched[r][i] = models[r]->parameters()[i].clone();
        }
        averaged[i] /= workers;
      }
      if (delay == 0) merge();
    }
  }
  return models;
}

std::string spec(const Streaming& s) {
  const std::string base =
      "diloco:" + std::to_string(s.period) + ",fragments=" + std::to_string(s.fragments);
  if (s.eager) return base + ",eager=on";
  return base + ",delay=" + std::to_string(s.delay) + ",alpha=" + std::to_string(s.alpha);
}

// One fragment without delay is DiLoCo, bit for bit.
TEST(StreamingDiloco, OneFragmentWithoutDelayIsDiloco) {
  std::vector<SequenceClassifier> plain = trained(3, "sgd", {.sync = "diloco:2"}, 6, 0);
  std::vector<SequenceClassifier> streaming =
      trained(3, "sgd", {.sync = "diloco:2,fragments=1,delay=0"}, 6, 0);
  for (size_t r = 0; r < plain.size(); ++r) {
    EXPECT_EQ(maxRelativeDifference(plain[r], streaming[r]), 0.0) << "rank " << r;
  }
}

// Fragments in turn, without and with a delay and mixing, and eager (one fragment and two),
// against the naive reference (3 workers; 7 or 9 steps: the last fragment launched has been
// merged, or with eager is in flight in both).
TEST(StreamingDiloco, FragmentsDelayAndMixingMatchANaiveReference) {
  for (Streaming s : {Streaming{4, 2, 0, 0}, Streaming{4, 2, 1, 0.5}, Streaming{6, 3, 1, 0.25},
                      Streaming{.period = 3, .fragments = 1, .eager = true},
                      Streaming{.period = 4, .fragments = 2, .eager = true}}) {
    const int64_t steps = s.period == 6 || s.period == 3 ? 9 : 7;
    std::vector<SequenceClassifier> reference = naiveStreaming(3, steps, s);
    std::vector<SequenceClassifier> many = trained(3, "sgd-plain", {.sync = spec(s)}, steps, 0);
    for (size_t r = 0; r < many.size(); ++r) {
      const double difference = maxRelativeDifference(reference[r], many[r]);
      if (r == 0) std::printf("%s: %.3g from the naive reference\n", spec(s).c_str(), difference);
      EXPECT_LT(difference, 1e-5) << spec(s) << ", rank " << r;
    }
  }
}

// settledSyncState(), what an elastic round commits: after fragment 0's merge (step 2 of
// diloco:4,fragments=2) every rank's settled parameters are θ_global, fragment 0's as just merged
// and fragment 1's still the initial model (its local steps left out); with a fragment in flight
// (delay=1, step 2) it is refused; at a plain DiLoCo outer step it is syncState() itself.
TEST(StreamingDiloco, TheSettledStateIsThetaGlobalOfEachFragment) {
  constexpr int kWorkers = 2;
  constexpr size_t kModelsPerRank = 4;  // made here: freshModel() seeds torch's global generator
  std::vector<SequenceClassifier> models;
  for (size_t i = 0; i < kWorkers * kModelsPerRank; ++i) models.push_back(freshModel());
  const std::vector<torch::Tensor> initial = freshModel()->parameters();
  std::vector<int64_t> elements;
  for (const torch::Tensor& p : initial) elements.push_back(p.numel());
  const std::vector<int> fragmentOf = assignFragments(elements, 2);
  runWithTransports(TransportKind::kLoopback, kWorkers, [&](Transport& t) {
    size_t next = static_cast<size_t>(t.rank()) * kModelsPerRank;
    const auto localSteps = [&](const std::string& sync, int64_t steps, auto&& after) {
      SequenceClassifier model = models[next++];
      auto optimizer = makeOptimizer("sgd-plain", model);
      DistributedOptimizer distributed(*optimizer, model.ptr(), t, {.sync = sync});
      const int64_t share = kGlobalBatch / kWorkers;
      for (int64_t step = 0; step < steps; ++step) {
        auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
        distributed.zeroGrad();
        torch::Tensor logits =
            model->forward(tokens.narrow(0, t.rank() * share, share), step % 2 == 0);
        torch::nn::functional::cross_entropy(logits, labels.narrow(0, t.rank() * share, share))
            .backward();
        distributed.step();
        after(step + 1, model, distributed);
      }
    };
    localSteps("diloco:4,fragments=2", 3,
               [&](int64_t step, SequenceClassifier& model, DistributedOptimizer& distributed) {
                 if (step != 2) return;
                 SequenceClassifier settled = models[next++];
                 auto optimizer = makeOptimizer("sgd-plain", settled);
                 DistributedOptimizer loader(*optimizer, settled.ptr(), t,
                                             {.sync = "diloco:4,fragments=2"});
                 loader.loadSyncState(distributed.settledSyncState());
                 for (size_t i = 0; i < initial.size(); ++i) {
                   const torch::Tensor& expected =
                       fragmentOf[i] == 0 ? model->parameters()[i] : initial[i];
                   EXPECT_TRUE(torch::equal(settled->parameters()[i], expected))
                       << "tensor " << i << " of fragment " << fragmentOf[i] << ", rank "
                       << t.rank();
                   if (fragmentOf[i] == 1) {
                     EXPECT_FALSE(torch::equal(model->parameters()[i], initial[i]))
                         << "not trained: " << i;
                   }
                 }
               });
    localSteps("diloco:4,fragments=2,delay=1", 3,
               [&](int64_t step, SequenceClassifier&, DistributedOptimizer& distributed) {
                 if (step == 2) {
                   EXPECT_THROW(distributed.settledSyncState(), ConfigError) << "in flight";
                 } else {
                   EXPECT_NO_THROW(distributed.settledSyncState()) << "step " << step;
                 }
               });
    localSteps("diloco:2", 2, [&](int64_t step, SequenceClassifier&, DistributedOptimizer& d) {
      if (step == 2) {
        EXPECT_EQ(d.settledSyncState(), d.syncState());
      }
    });
  });
}

TEST(StreamingDiloco, OptionsAreParsedOrRefusedSayingWhy) {
  const SyncStrategy s = SyncStrategy::parse("diloco:8,fragments=4,delay=1");
  EXPECT_EQ(s.outer.fragments, 4);
  EXPECT_EQ(s.outer.delay, 1);
  EXPECT_EQ(s.outer.alpha, 0.5);  // the paper's mixing, with a delay
  EXPECT_EQ(SyncStrategy::parse("diloco:8,fragments=4").outer.alpha, 0.0);
  EXPECT_EQ(SyncStrategy::parse("diloco:8,delay=2,alpha=0").outer.alpha, 0.0);
  EXPECT_EQ(SyncStrategy::parse("diloco:8,eager=on").outer.delay, 8);  // the whole round
  EXPECT_EQ(SyncStrategy::parse("diloco:8,fragments=4,eager=on").outer.delay, 2);
  for (const char* bad :
       {"diloco:8,fragments=3", "diloco:8,fragments=4,delay=2", "diloco:8,fragments=0",
        "diloco:8,alpha=1.5", "diloco:8,delay=-1", "diloco:8,eager=on,delay=1",
        "diloco:8,eager=on,alpha=0.5", "diloco:8,eager=yes"}) {
    EXPECT_THROW(SyncStrategy::parse(bad), ConfigError) << bad;
  }
  expectRefused("sgd", {.sync = "diloco:64,fragments=64"}, "fragments=64");
}

}  // namespace
}  // namespace gradsync::testing
