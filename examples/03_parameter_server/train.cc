// Example 3: a parameter-server job. Every rank is a worker and also runs one parameter server
// (a thread holding its share of the model); workers push gradients (here top-k compressed if
// asked) and the servers apply SGD with momentum. With the delayed strategies a worker goes on
// with a local step on its own gradient while the servers' update is in flight.
//
//   ./03_parameter_server [--sync odsgd] [--compress none] [--steps 300] [--delay-warmup 20]
//   gradsync launch -n 3 -- ./03_parameter_server --sync ssdsgd:4 --compress topk:0.1
//
// --sync: ssgd (synchronous, through the servers) | asgd | ssp:S | odsgd | ssdsgd:K | cdsgd:K.
#include <gradsync/context.h>
#include <gradsync/torch/collectives.h>
#include <gradsync/torch/distributed_optimizer.h>

#include <cstdio>
#include <exception>
#include <random>
#include <string>

namespace {

constexpr int64_t kFeatures = 20, kClasses = 4, kGlobalBatch = 60;

// A seeded task: each class is a Gaussian cloud around a centre of its own.
std::pair<torch::Tensor, torch::Tensor> blobs(int64_t step, int64_t batch) {
  torch::manual_seed(1000 + step);
  torch::Tensor labels = torch::randint(kClasses, {batch}, torch::kLong);
  torch::manual_seed(7);  // the same centres for every batch
  torch::Tensor centres = torch::randn({kClasses, kFeatures}) * 0.7;
  torch::manual_seed(2000 + step);
  return {centres.index_select(0, labels) + torch::randn({batch, kFeatures}), labels};
}

struct Flags {
  gradsync::SyncOptions sync{.sync = "odsgd", .parameterServers = true, .delayWarmup = 20};
  int64_t steps = 300;
};

Flags parseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string name = argv[i], value = argv[i + 1];
    if (name == "--sync")
      flags.sync.sync = value;
    else if (name == "--compress")
      flags.sync.compress = value;
    else if (name == "--steps")
      flags.steps = std::stoll(value);
    else if (name == "--delay-warmup")
      flags.sync.delayWarmup = std::stoll(value);
    else
      throw std::invalid_argument("unknown flag " + name);
  }
  return flags;
}

}  // namespace

int main(int argc, char** argv) try {
  Flags flags = parseFlags(argc, argv);
  gradsync::Context context = gradsync::init();
  torch::manual_seed(0);
  torch::nn::Sequential model(torch::nn::Linear(kFeatures, 64), torch::nn::ReLU(),
                              torch::nn::Linear(64, kClasses));
  gradsync::broadcastParameters(*model, context.transport());
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  gradsync::DistributedOptimizer distributed(optimizer, model.ptr(), context.transport(),
                                             flags.sync);

  const int64_t share = kGlobalBatch / context.size();
  for (int64_t step = 0; step < flags.steps; ++step) {
    auto [x, y] = blobs(step, kGlobalBatch);
    distributed.zeroGrad();  // waits for this worker's parameters (the servers' replies)
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        model->forward(x.narrow(0, context.rank() * share, share)),
        y.narrow(0, context.rank() * share, share));
    loss.backward();
    distributed.step();  // pushes the gradients; the servers update
    if ((step + 1) % 100 == 0 && context.rank() == 0) {
      std::printf("step %lld: loss %.4f (worker 0's batch)\n", static_cast<long long>(step + 1),
                  loss.item<double>());
    }
  }
  distributed.synchronizeModel();  // every rank: the servers' model
  auto [x, y] = blobs(-1, 1000);   // held out
  torch::NoGradGuard noGrad;
  const double accuracy =
      model->forward(x).argmax(1).eq(y).to(torch::kDouble).mean().item<double>();
  if (context.rank() == 0) {
    std::printf(
        "servers' model after %lld steps on %d ranks (%s, %s): accuracy %.1f%%; rank 0 "
        "sent %.2f MB (its pushes and its server's replies)\n",
        static_cast<long long>(flags.steps), context.size(), flags.sync.sync.c_str(),
        flags.sync.compress.c_str(), 100 * accuracy, distributed.bytesSent() / 1e6);
  }
  gradsync::barrier(context.transport());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "03_parameter_server: %s\n", e.what());
  return 1;
}
