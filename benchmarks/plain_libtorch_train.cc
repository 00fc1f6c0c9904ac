// The baseline for gradsync's single-worker overhead: the textbook LibTorch loop (forward,
// cross-entropy, backward, SGD step) over the same model definitions and the same synthetic
// batches as `gradsync train --dataset synthetic --workers 1`, with nothing else.
//   plain_libtorch_train --model cnn --steps 200 --batch-size 64 --threads 1
// Prints one line: samples/s over all steps (measured the same way as gradsync's summary).
#include <dlfcn.h>

#include <chrono>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "common/allocator.h"
#include "data/sampler.h"
#include "torch/loop/data_source.h"
#include "torch/models/models.h"

int main(int argc, char** argv) {
  std::string modelName = "cnn";
  int64_t steps = 200;
  size_t batch = 64;
  int threads = 1;
  CLI::App app{"plain LibTorch training loop"};
  app.add_option("--model", modelName);
  app.add_option("--steps", steps);
  app.add_option("--batch-size", batch);
  app.add_option("--threads", threads);
  CLI11_PARSE(app, argc, argv);

  using namespace gradsync;
  keepFreedMemoryInHeap();  // the same allocator policy as gradsync train, for a fair baseline
  auto data = openDataSource("synthetic", "", 16384, 0);
  DistributedSampler sampler(data->trainSize(), 0, 1, batch, 0);
  std::shared_ptr<Model> model = makeModel(modelName);
  initializeParameters(*model, 0);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);  // OpenBLAS's pool too, exactly as gradsync train does
  if (auto setBlas =
          reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    setBlas(threads);
  }
  std::vector<float> inputs(batch * data->sampleElements());
  std::vector<int64_t> labels(batch);
  auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    int64_t epoch = step / static_cast<int64_t>(sampler.stepsPerEpoch());
    std::vector<size_t> indices =
        sampler.batch(epoch, static_cast<size_t>(step) % sampler.stepsPerEpoch());
    data->batch(true, indices, inputs, labels);
    auto n = static_cast<int64_t>(batch);
    torch::Tensor x = torch::from_blob(inputs.data(), {n, 1, 28, 28});
    torch::Tensor y = torch::from_blob(labels.data(), {n}, torch::kLong);
    optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer.step();
    loss.item<float>();
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("plain libtorch: %s, %lld steps of %zu in %.2f s: %.1f samples/s\n",
              modelName.c_str(), static_cast<long long>(steps), batch, seconds,
              static_cast<double>(batch * steps) / seconds);
}
