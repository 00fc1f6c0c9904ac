// sharded's fully-connected exchange (sync/fc_exchange.h) on a model with a wide classifier,
// through the public DistributedOptimizer (ranks as threads): the parameters wfbp gives, far
// fewer bytes, and the refusals. (mlp and vgg11 through the trainer: trainer_test.cc.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <mutex>
#include <vector>

#include "gradsync/error.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "support/transports.h"
#include "sync/fc_exchange.h"
#include "sync/strategy.h"
#include "torch/models/models.h"

namespace gradsync::testing {
namespace {

// Convolutions, then a classifier much wider than its batch: 3136 -> 2048 -> 10 (6.4 M weights
// in the first linear layer; its exchange sends a few rows of activations and errors instead).
class WideClassifier final : public Model {
 public:
  WideClassifier() {
    conv_ =
        register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    fc1_ = register_module("fc1", torch::nn::Linear(16 * 14 * 14, 2048));
    fc2_ = register_module("fc2", torch::nn::Linear(2048, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    torch::Tensor h = torch::max_pool2d(torch::relu(run(conv_, x)), 2).flatten(1);
    return run(fc2_, torch::relu(run(fc1_, h)));
  }

 private:
  torch::nn::Conv2d conv_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

constexpr int64_t kRows = 3;  // per rank and step
constexpr int kSteps = 3;

struct Trained {
  std::vector<float> parameters;  // rank 1's, flattened
  uint64_t bytesSent = 0;         // rank 1's, per step
};

// kSteps of SGD with momentum on the same data, `sync` over `workers` ranks as threads.
Trained train(int workers, const std::string& sync) {
  Trained result;
  std::mutex mutex;
  runWithTransports(TransportKind::kLoopback, workers, [&](Transport& t) {
    // Private generators: rank threads must not share torch's global one.
    auto model = std::make_shared<WideClassifier>();
    initializeParameters(*model, 3);
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    DistributedOptimizer optimizer(sgd, model, t,
                                   {.schedule = "wfbp", .sync = sync, .localBatch = kRows});
    for (int step = 0; step < kSteps; ++step) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(100 + 10 * step + t.rank());
      torch::Tensor x = torch::randn({kRows, 1, 28, 28}, generator);
      torch::Tensor y = torch::randint(10, {kRows}, generator, torch::kLong);
      optimizer.zeroGrad();
      torch::nn::functional::cross_entropy(model->forward(x), y).backward();
      optimizer.step();
    }
    optimizer.waitForParameters();
    if (t.rank() != 1) return;
    std::lock_guard<std::mutex> lock(mutex);
    for (const torch::Tensor& p : model->parameters()) {
      result.parameters.insert(result.parameters.end(), p.data_ptr<float>(),
                               p.data_ptr<float>() + p.numel());
    }
    result.bytesSent = optimizer.bytesSent() / kSteps;
  });
  return result;
}

double maxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double scale = std::max({std::fabs(a[i]), std::fabs(b[i]), 1e-2f});
    worst = std::max(worst, std::fabs(a[i] - b[i]) / scale);
  }
  return worst;
}

// The exchange's gradient is the reduce-scatter's average summed in another order: wfbp's
// parameters to float rounding (as p3 and sharded, trainer_test.cc's kSameMath), on 2 and 3
// ranks (uneven column blocks), with a fraction of sharded's bytes.
TEST(FcExchange, WideClassifierEndsWhereWfbpEnds) {
  for (int workers : {2, 3}) {
    const Trained wfbp = train(workers, "ssgd");
    const Trained sharded = train(workers, "sharded");
    const Trained exchanged = train(workers, "sharded:fc=exchange");
    const Trained automatic = train(workers, "sharded:fc=auto");
    const double difference = maxRelativeDifference(wfbp.parameters, exchanged.parameters);
    std::printf("%d workers: exchange %.2g from wfbp, %llu bytes per step (sharded %llu)\n",
                workers, difference, static_cast<unsigned long long>(exchanged.bytesSent),
                static_cast<unsigned long long>(sharded.bytesSent));
    EXPECT_LT(difference, 1e-4) << workers;
    EXPECT_EQ(automatic.parameters, exchanged.parameters) << "auto takes both layers here";
    // The reduce-scatter of fc1's 6.4 M gradients gives way to a few rows of activations and
    // errors; the allgather of the updated weights stays: a little over half of sharded's.
    EXPECT_LT(exchanged.bytesSent, 0.51 * sharded.bytesSent) << workers;
    EXPECT_GT(exchanged.bytesSent, 0.49 * sharded.bytesSent) << workers;
  }
}

TEST(FcExchange, TheRuleWeighsBytes) {
  // VGG-19's first classifier layer at 32 rows and 4 ranks: 4 MB against 308 MB.
  const FcShape fc6{.rows = 32, .in = 25088, .out = 4096};
  EXPECT_EQ(fcReduceBytes(fc6, 4), 3ull * 25088 * 4096 / 4 * 4);
  EXPECT_EQ(fcExchangeBytes(fc6, 4), (3ull * 32 * 25088 / 4 + 3ull * 32 * 4096) * 4);
  EXPECT_TRUE(fcUsesExchange(FcMode::kAuto, fc6, 4));
  // A layer narrow against its rows (a Transformer's projection over 4096 tokens) is reduced.
  const FcShape projection{.rows = 4096, .in = 512, .out = 512};
  EXPECT_FALSE(fcUsesExchange(FcMode::kAuto, projection, 8));
  EXPECT_TRUE(fcUsesExchange(FcMode::kExchange, projection, 8));
  EXPECT_FALSE(fcUsesExchange(FcMode::kReduce, fc6, 4));
  EXPECT_EQ(SyncStrategy::parse("sharded:fc=auto").fc, FcMode::kAuto);
  EXPECT_EQ(SyncStrategy::parse("sharded").fc, FcMode::kReduce);
  EXPECT_THROW(SyncStrategy::parse("sharded:fc=gather"), ConfigError);
  EXPECT_THROW(SyncStrategy::parse("sharded:2"), ConfigError);
  EXPECT_EQ(SyncStrategy::parse("sharded").concurrent, 4);
  const SyncStrategy both = SyncStrategy::parse("sharded:fc=exchange,concurrent=2");
  EXPECT_EQ(both.fc, FcMode::kExchange);
  EXPECT_EQ(both.concurrent, 2);
  EXPECT_THROW(SyncStrategy::parse("sharded:concurrent=0"), ConfigError);
}

// Refused, not guessed: fc=auto without the batch, and a module whose forward gradsync cannot
// reroute (a user's own).
TEST(FcExchange, RefusesWhatItCannotDo) {
  runWithTransports(TransportKind::kLoopback, 2, [](Transport& t) {
    auto model = std::make_shared<WideClassifier>();
    torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05));
    EXPECT_THROW(DistributedOptimizer(sgd, model, t, {.sync = "sharded:fc=auto"}), ConfigError);
    auto plain = std::make_shared<torch::nn::LinearImpl>(8, 4);
    torch::optim::SGD other(plain->parameters(), torch::optim::SGDOptions(0.05));
    EXPECT_THROW(DistributedOptimizer(other, plain, t, {.sync = "sharded:fc=exchange"}),
                 ConfigError);
    DistributedOptimizer reduced(other, plain, t, {.sync = "sharded"});  // fc=reduce: any module
  });
}

}  // namespace
}  // namespace gradsync::testing
