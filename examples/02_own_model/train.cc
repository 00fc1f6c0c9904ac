// Example 2: your own LibTorch model and optimizer, trained data-parallel by gradsync.
//
//   ./02_own_model [--schedule wfbp] [--compress none] [--steps 200] [--optimizer adamw|sgd]
//   gradsync launch -n 3 -- ./02_own_model --compress topk:0.05
//
// Every rank takes its share of each global batch; DistributedOptimizer averages the gradients
// during backward and then runs the optimizer, so every rank keeps the same model.
#include <gradsync/torch/collectives.h>  // first, to show that it includes all it needs

#include <gradsync/context.h>
#include <gradsync/torch/distributed_optimizer.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "sequence_model.h"

namespace {

struct Flags {
  gradsync::SyncOptions sync;
  std::string optimizer = "adamw";
  int64_t steps = 200;
  int64_t globalBatch = 48;
};

Flags parseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string name = argv[i], value = argv[i + 1];
    if (name == "--schedule")
      flags.sync.schedule = value;
    else if (name == "--compress")
      flags.sync.compress = value;
    else if (name == "--sync")
      flags.sync.sync = value;
    else if (name == "--optimizer")
      flags.optimizer = value;
    else if (name == "--steps")
      flags.steps = std::stoll(value);
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
  auto model = example::SequenceClassifier(example::kVocabulary, 32, example::kClasses);
  gradsync::broadcastParameters(*model, context.transport());  // every rank starts alike

  std::unique_ptr<torch::optim::Optimizer> optimizer;
  if (flags.optimizer == "sgd") {
    optimizer = std::make_unique<torch::optim::SGD>(model->parameters(),
                                                    torch::optim::SGDOptions(0.1).momentum(0.9));
  } else {
    optimizer = std::make_unique<torch::optim::AdamW>(model->parameters(),
                                                      torch::optim::AdamWOptions(1e-2));
  }
  gradsync::DistributedOptimizer distributed(*optimizer, model.ptr(), context.transport(),
                                             flags.sync);

  const int64_t share = flags.globalBatch / context.size();
  double lossSum = 0;
  for (int64_t step = 0; step < flags.steps; ++step) {
    auto [tokens, labels] = example::taskBatch(/*seed=*/1, step, flags.globalBatch);
    tokens = tokens.narrow(0, context.rank() * share, share);
    labels = labels.narrow(0, context.rank() * share, share);
    distributed.zeroGrad();
    torch::Tensor loss =
        torch::nn::functional::cross_entropy(model->forward(tokens, step % 2 == 1), labels);
    loss.backward();
    distributed.step();

    torch::Tensor mean = loss.detach().reshape({1}).clone();
    gradsync::allreduce(context.transport(), mean);  // the average over ranks
    lossSum += mean.item<double>();
    if ((step + 1) % 50 == 0 && context.rank() == 0) {
      std::printf("step %lld: loss %.4f\n", static_cast<long long>(step + 1), lossSum / 50);
      lossSum = 0;
    }
  }
  distributed.waitForParameters();
  if (context.rank() == 0) {
    std::printf("trained on %d ranks (%s, %s, %s): %.1f MB sent for gradients, %.1f MB dense\n",
                context.size(), flags.sync.schedule.c_str(), flags.sync.compress.c_str(),
                flags.optimizer.c_str(), distributed.bytesSent() / 1e6,
                distributed.denseBytes() / 1e6);
  }
  gradsync::barrier(context.transport());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_own_model: %s\n", e.what());
  return 1;
}
