// The optimizer step alone, per-tensor against fused (gradsync/torch/fused_sgd.h), on a model's
// real parameter list: SGD with momentum (torch::optim::SGD vs FusedSGD) and LARS + momentum
// (FusedSGD's per-tensor path vs its fused one). Interleaved: each repeat times every variant
// for --steps steps, one after the other; prints the median µs per step and the speedups.
//
//   fused_update [--model resnet20] [--steps 200] [--repeats 5] [--lars 0.02]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "gradsync/torch/fused_sgd.h"
#include "torch/models/models.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Variant {
  std::string name;
  std::shared_ptr<gradsync::Model> model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

Variant makeVariant(const std::string& name, const std::string& modelName, bool useTorch,
                    gradsync::FusedSgdOptions options) {
  torch::manual_seed(1);
  Variant v{name, gradsync::makeModel(modelName), nullptr};
  for (auto& p : v.model->parameters()) p.mutable_grad() = torch::randn(p.sizes()) * 1e-2;
  const auto sgd = torch::optim::SGDOptions(0.01).momentum(0.9);
  if (useTorch) {
    v.optimizer = std::make_unique<torch::optim::SGD>(v.model->parameters(), sgd);
  } else {
    v.optimizer = std::make_unique<gradsync::FusedSGD>(v.model->parameters(), sgd, options);
  }
  v.optimizer->step();  // the first step builds state (and the fused buffers): not timed
  return v;
}

double microsecondsPerStep(Variant& v, int steps) {
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i) v.optimizer->step();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / steps;
}

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"per-tensor vs fused optimizer step"};
  std::string modelName = "resnet20";
  int steps = 200, repeats = 5;
  double lars = 0.02;
  app.add_option("--model", modelName, "model whose parameters are updated");
  app.add_option("--steps", steps, "timed steps per variant per repeat");
  app.add_option("--repeats", repeats, "interleaved repeats (the median is reported)");
  app.add_option("--lars", lars, "LARS trust coefficient for the LARS variants");
  CLI11_PARSE(app, argc, argv);

  std::vector<Variant> variants;
  variants.push_back(makeVariant("sgd per-tensor (torch::optim::SGD)", modelName, true, {}));
  variants.push_back(makeVariant("sgd fused (FusedSGD)", modelName, false, {}));
  variants.push_back(makeVariant("lars per-tensor (FusedSGD fused=false)", modelName, false,
                                 {.lars = lars, .fused = false}));
  variants.push_back(makeVariant("lars fused (FusedSGD)", modelName, false, {.lars = lars}));
  const auto params = variants[0].model->parameters();
  int64_t elements = 0;
  for (const auto& p : params) elements += p.numel();

  std::map<std::string, std::vector<double>> times;
  for (int r = 0; r < repeats; ++r) {
    for (Variant& v : variants) times[v.name].push_back(microsecondsPerStep(v, steps));
  }
  std::printf("%s: %zu tensors, %lld parameters; %d steps x %d interleaved repeats, median\n",
              modelName.c_str(), params.size(), static_cast<long long>(elements), steps, repeats);
  std::printf("| variant | us/step | speedup over per-tensor |\n|---|---:|---:|\n");
  for (size_t i = 0; i < variants.size(); ++i) {
    const double t = median(times[variants[i].name]);
    const double base = median(times[variants[i - i % 2].name]);
    std::printf("| %s | %.1f | %.2fx |\n", variants[i].name.c_str(), t, base / t);
  }
  return 0;
}
