// Shared by the public LibTorch API's tests: examples/02_own_model's LSTM (a model gradsync has
// never seen, with an auxiliary head some steps skip), trained on ranks as threads.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "../../../examples/02_own_model/sequence_model.h"
#include "gradsync/error.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "support/transports.h"

namespace gradsync::testing {

using example::SequenceClassifier;

inline constexpr int64_t kGlobalBatch = 12;  // divisible by 1, 2 and 3 workers
inline constexpr int64_t kSteps = 4;

inline SequenceClassifier freshModel() {
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
inline std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& kind,
                                                              SequenceClassifier& model) {
  if (kind == "adamw") {
    return std::make_unique<torch::optim::AdamW>(model->parameters(),
                                                 torch::optim::AdamWOptions(1e-2).eps(1e-3));
  }
  // Kinds the update modes refuse.
  if (kind == "rmsprop") {
    return std::make_unique<torch::optim::RMSprop>(model->parameters(),
                                                   torch::optim::RMSpropOptions(1e-2));
  }
  if (kind == "amsgrad") {
    return std::make_unique<torch::optim::Adam>(model->parameters(),
                                                torch::optim::AdamOptions(1e-2).amsgrad(true));
  }
  if (kind == "groups") {
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(model->head->parameters(),
                        std::make_unique<torch::optim::SGDOptions>(0.01));
    std::vector<torch::Tensor> rest;
    for (auto& item : model->named_parameters()) {
      if (item.key().rfind("head.", 0) != 0) rest.push_back(item.value());
    }
    groups.emplace_back(rest, std::make_unique<torch::optim::SGDOptions>(0.1));
    return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.1));
  }
  if (kind == "sgd-plain") {  // no momentum
    return std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.1));
  }
  if (kind == "sgd-plain-half") {  // no momentum, half sgd-plain's rate
    return std::make_unique<torch::optim::SGD>(model->parameters(), torch::optim::SGDOptions(0.05));
  }
  return std::make_unique<torch::optim::SGD>(model->parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.9));
}

// Trains `models[r]` on rank r's share of each global batch. The auxiliary head is used on the
// steps of parity `auxiliaryParity` only: unused parameters on the others (with parity 1, from
// the first step on: parameters no rank has used yet). kLoopbackHosts puts two ranks on a host.
inline void trainOnRanks(std::vector<SequenceClassifier>& models, const std::string& optimizerKind,
                         const SyncOptions& sync, int64_t steps, int auxiliaryParity,
                         TransportKind kind = TransportKind::kLoopback) {
  const int size = static_cast<int>(models.size());
  runWithTransports(kind, size, [&](Transport& transport) {
    SequenceClassifier& model = models[static_cast<size_t>(transport.rank())];
    auto optimizer = makeOptimizer(optimizerKind, model);
    DistributedOptimizer distributed(*optimizer, model.ptr(), transport, sync);
    const int64_t share = kGlobalBatch / size;
    for (int64_t step = 0; step < steps; ++step) {
      auto [tokens, labels] = example::taskBatch(3, step, kGlobalBatch);
      distributed.zeroGrad();
      torch::Tensor logits = model->forward(tokens.narrow(0, transport.rank() * share, share),
                                            step % 2 == auxiliaryParity);
      torch::nn::functional::cross_entropy(logits,
                                           labels.narrow(0, transport.rank() * share, share))
          .backward();
      distributed.step();
    }
    distributed.waitForParameters();
  });
}

inline std::vector<SequenceClassifier> trained(int workers, const std::string& optimizer,
                                               const SyncOptions& sync, int64_t steps = kSteps,
                                               int auxiliaryParity = 1,
                                               TransportKind kind = TransportKind::kLoopback) {
  std::vector<SequenceClassifier> models;
  for (int r = 0; r < workers; ++r) models.push_back(freshModel());
  trainOnRanks(models, optimizer, sync, steps, auxiliaryParity, kind);
  return models;
}

// The largest difference between two models' parameters, relative to the element (at least
// 1e-2, so that elements near zero do not dominate), as the trainer's tests measure it.
inline double maxRelativeDifference(SequenceClassifier& a, SequenceClassifier& b) {
  double worst = 0;
  auto pa = a->parameters();
  auto pb = b->parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    torch::Tensor scale = torch::maximum(pa[i].abs(), pb[i].abs()).clamp_min(1e-2);
    worst = std::max(worst, ((pa[i] - pb[i]).abs() / scale).max().item<double>());
  }
  return worst;
}

inline void expectRefused(const std::string& optimizer, const SyncOptions& sync,
                          const std::string& needle) {
  try {
    trained(2, optimizer, sync);
    FAIL() << "no ConfigError; expected one saying " << needle;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace gradsync::testing
