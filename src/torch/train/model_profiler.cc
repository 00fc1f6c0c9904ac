// Timing a model layer by layer; model_profiler.h says what each time means and why.
#include "torch/train/model_profiler.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <fstream>
#include <functional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "common/check.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "torch/loop/data_source.h"
#include "torch/models/gpt_config.h"
#include "torch/models/models.h"

namespace gradsync {
namespace {

using MonotonicClock = std::chrono::steady_clock;

double seconds(MonotonicClock::time_point from, MonotonicClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

double median(std::vector<double> values) {
  GS_CHECK(!values.empty());
  std::sort(values.begin(), values.end());
  size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

// One step's times in seconds, indexed by layer in forward order.
struct StepTimes {
  std::vector<double> forward;
  std::vector<double> backward;
  double update = 0;
};

struct Layer {
  const torch::nn::Module* module = nullptr;
  std::string name;                  // as in model->named_modules()
  std::vector<TensorShape> tensors;  // its parameters, named as in model->named_parameters()
};

// The "model name" of /proc/cpuinfo: the profile says which machine its times hold for.
std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) break;
    size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown CPU" : line.substr(start);
  }
  return "unknown CPU";
}

std::string describeDevice(const ProfileOptions& options) {
  return fmt::format("{} ({} hardware threads), {} torch thread{} per worker, {} worker{} at once",
                     cpuModel(), std::thread::hardware_concurrency(), options.threads,
                     options.threads == 1 ? "" : "s", options.workers,
                     options.workers == 1 ? "" : "s");
}

// Owns a model, its optimizer and synthetic data, and the hooks that timestamp each layer.
// Single-threaded: the hooks run on the thread that calls step() (CPU autograd runs backward on
// the caller's thread).
class Profiler {
 public:
  explicit Profiler(const ProfileOptions& options);
  StepTimes step(int64_t index);
  ModelProfile summarize(const std::vector<StepTimes>& steps) const;

 private:
  void findLayers();
  void hookGradients();
  std::vector<double> forwardTimes(MonotonicClock::time_point start,
                                   MonotonicClock::time_point end) const;
  std::vector<double> backwardTimes(MonotonicClock::time_point start) const;

  const ProfileOptions options_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  std::vector<float> inputs_;
  std::vector<int64_t> labels_;
  std::vector<Layer> layers_;  // in forward order
  // Written by the hooks during a step: each layer's forward start, and per layer the time of
  // its latest gradient and how many of its gradients arrived.
  std::vector<std::pair<const torch::nn::Module*, MonotonicClock::time_point>> marks_;
  std::vector<MonotonicClock::time_point> ready_;
  std::vector<size_t> arrived_;
};

Profiler::Profiler(const ProfileOptions& options)
    : options_(options),
      model_(makeModel(options.model)),
      data_(openDataSource("synthetic", "", TrainOptions{}.syntheticSamples, options.seed)),
      inputs_(options.batchSize * data_->sampleElements()),
      labels_(options.batchSize) {
  GS_CHECK_EQ(data_->sampleElements(), size_t{28 * 28});  // the models' 1x28x28 input
  initializeParameters(*model_, options.seed);
  const TrainOptions train;  // the optimizer `gradsync train` steps by default
  optimizer_ = std::make_unique<torch::optim::SGD>(
      model_->parameters(), torch::optim::SGDOptions(train.lr).momentum(train.momentum));
  model_->setPreForwardHook([this](const torch::nn::Module& layer) {
    marks_.emplace_back(&layer, MonotonicClock::now());
  });
  findLayers();
  hookGradients();
}

// The layers are the modules the pre-forward hook sees in one forward pass.
void Profiler::findLayers() {
  std::unordered_map<const torch::nn::Module*, std::string> names;
  for (const auto& item : model_->named_modules()) names[item.value().get()] = item.key();
  {
    torch::NoGradGuard noGrad;
    model_->eval();  // leaves BatchNorm's running statistics alone
    marks_.clear();
    model_->forward(torch::zeros({1, 1, 28, 28}));
    model_->train();
  }
  for (const auto& mark : marks_) {
    auto found = names.find(mark.first);
    GS_CHECK(found != names.end());  // a hooked module that is not a submodule of the model
    layers_.push_back({mark.first, found->second, {}});
  }
  ready_.resize(layers_.size());
  arrived_.resize(layers_.size());
}

// Every parameter belongs to exactly one layer: otherwise a gradient would be timed twice or
// never, and the simulator would communicate the wrong tensors.
void Profiler::hookGradients() {
  std::unordered_map<const void*, std::string> names;  // by tensor identity
  for (const auto& item : model_->named_parameters()) {
    names[item.value().unsafeGetTensorImpl()] = item.key();
  }
  std::unordered_set<const void*> owned;
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (torch::Tensor parameter : layers_[l].module->parameters()) {
      const void* identity = parameter.unsafeGetTensorImpl();
      GS_CHECK(names.count(identity) == 1);
      GS_CHECK(owned.insert(identity).second);  // in no earlier layer
      layers_[l].tensors.push_back(tensorShape(names[identity], parameter.sizes().vec()));
      parameter.register_hook([this, l](const torch::Tensor&) {
        ready_[l] = MonotonicClock::now();
        ++arrived_[l];
      });
    }
  }
  GS_CHECK_EQ(owned.size(), names.size());  // none outside every layer
}

StepTimes Profiler::step(int64_t index) {
  std::vector<size_t> indices(options_.batchSize);
  for (size_t i = 0; i < indices.size(); ++i) {
    indices[i] = (static_cast<size_t>(index) * options_.batchSize + i) % data_->trainSize();
  }
  data_->batch(true, indices, inputs_, labels_);
  auto batch = static_cast<int64_t>(options_.batchSize);
  torch::Tensor x = torch::from_blob(inputs_.data(), {batch, 1, 28, 28});
  torch::Tensor y = torch::from_blob(labels_.data(), {batch}, torch::kLong);
  optimizer_->zero_grad();
  marks_.clear();
  std::fill(arrived_.begin(), arrived_.end(), 0);

  auto start = MonotonicClock::now();
  torch::Tensor loss = torch::nn::functional::cross_entropy(model_->forward(x), y);
  auto forwardEnd = MonotonicClock::now();
  loss.backward();
  StepTimes times{forwardTimes(start, forwardEnd), backwardTimes(forwardEnd)};
  auto updateStart = MonotonicClock::now();
  optimizer_->step();
  times.update = seconds(updateStart, MonotonicClock::now());
  return times;
}

std::vector<double> Profiler::forwardTimes(MonotonicClock::time_point start,
                                           MonotonicClock::time_point end) const {
  GS_CHECK_EQ(marks_.size(), layers_.size());
  std::vector<double> times(layers_.size());
  for (size_t i = 0; i < layers_.size(); ++i) {
    GS_CHECK(marks_[i].first == layers_[i].module);  // the same layers in every step
    MonotonicClock::time_point from = i == 0 ? start : marks_[i].second;
    MonotonicClock::time_point to = i + 1 < marks_.size() ? marks_[i + 1].second : end;
    times[i] = seconds(from, to);
  }
  return times;
}

// Parameter layers in the order their gradients completed; each gets the time since the one
// before (or since backward started).
std::vector<double> Profiler::backwardTimes(MonotonicClock::time_point start) const {
  std::vector<size_t> order;
  for (size_t i = 0; i < layers_.size(); ++i) {
    GS_CHECK_EQ(arrived_[i], layers_[i].tensors.size());  // each gradient exactly once
    if (!layers_[i].tensors.empty()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ready_[a] < ready_[b]; });
  std::vector<double> times(layers_.size(), 0.0);
  MonotonicClock::time_point previous = start;
  for (size_t i : order) {
    times[i] = seconds(previous, ready_[i]);
    previous = ready_[i];
  }
  return times;
}

// A torch::nn::Linear is a fully-connected layer the simulator's FC exchange may take.
std::string linearKind(const torch::nn::Module& module) {
  return module.as<torch::nn::Linear>() != nullptr ? kLinearLayer : "";
}

ModelProfile Profiler::summarize(const std::vector<StepTimes>& steps) const {
  ModelProfile profile{.name = options_.model,
                       .device = describeDevice(options_),
                       .source = profileCommandLine(options_),
                       .codecsOnCpu = true,
                       .batchSize = static_cast<int64_t>(options_.batchSize)};
  std::vector<double> updates;
  for (const StepTimes& step : steps) updates.push_back(step.update);
  profile.updateSeconds = median(updates);
  for (size_t i = 0; i < layers_.size(); ++i) {
    std::vector<double> forward;
    std::vector<double> backward;
    for (const StepTimes& step : steps) {
      forward.push_back(step.forward[i]);
      backward.push_back(step.backward[i]);
    }
    profile.layers.push_back({layers_[i].name, layers_[i].tensors, median(forward),
                              median(backward), linearKind(*layers_[i].module)});
  }
  return profile;
}

// Warm-up, then the measured steps; `beforeStep` runs untimed before each.
ModelProfile measure(const ProfileOptions& options, const std::function<void()>& beforeStep) {
  validateProfileOptions(options);
  limitComputeThreads(options.threads);
  Profiler profiler(options);
  for (int i = 0; i < options.warmupSteps; ++i) {
    beforeStep();
    profiler.step(i);
  }
  std::vector<StepTimes> steps;
  for (int i = 0; i < options.steps; ++i) {
    beforeStep();
    steps.push_back(profiler.step(options.warmupSteps + i));
  }
  return profiler.summarize(steps);
}

// measure() on a thread of its own at the priority of train's training thread: measured beside
// other processes, a step takes what it takes in train (at the default priority a resnet20 step
// measured half of train's time next to two busy processes on 2 cores). A fresh thread, since
// a thread cannot raise its priority back, and torch's thread count is set per thread (OpenMP).
ModelProfile measureAsTrainDoes(const ProfileOptions& options,
                                const std::function<void()>& beforeStep) {
  ModelProfile profile;
  std::exception_ptr error;
  std::thread compute([&] {
    try {
      yieldToCommunication();
      profile = measure(options, beforeStep);
    } catch (...) {
      error = std::current_exception();
    }
  });
  compute.join();
  if (error) std::rethrow_exception(error);
  return profile;
}

// Every rank's profile, layer by layer the median across ranks (the format is the carrier).
ModelProfile medianAcrossRanks(Transport& transport, const ModelProfile& mine) {
  std::string json = profileToJson(mine);
  auto all =
      allgatherBytes(transport, {reinterpret_cast<const uint8_t*>(json.data()), json.size()});
  std::vector<ModelProfile> ranks;
  for (size_t r = 0; r < all.size(); ++r) {
    ranks.push_back(
        profileFromJson(std::string(all[r].begin(), all[r].end()), fmt::format("from rank {}", r)));
    GS_CHECK_EQ(ranks.back().layers.size(), mine.layers.size());
  }
  ModelProfile result = mine;
  auto across = [&](const std::function<double(const ModelProfile&)>& value) {
    std::vector<double> values;
    for (const ModelProfile& rank : ranks) values.push_back(value(rank));
    return median(values);
  };
  result.updateSeconds = across([](const ModelProfile& p) { return p.updateSeconds; });
  for (size_t i = 0; i < result.layers.size(); ++i) {
    result.layers[i].forwardSeconds =
        across([i](const ModelProfile& p) { return p.layers[i].forwardSeconds; });
    result.layers[i].backwardSeconds =
        across([i](const ModelProfile& p) { return p.layers[i].backwardSeconds; });
  }
  return result;
}

}  // namespace

void validateProfileOptions(const ProfileOptions& options) {
  makeModel(options.model);  // throws with the valid names
  if (gptContextOf(options.model) > 0) {
    throw ConfigError("gradsync profile times the image models; gpt is not profiled yet",
                      {.hint = "profile mlp, cnn, resnet20, vgg11, cnn-gn or vgg11-gn"});
  }
  if (options.batchSize == 0) throw ConfigError("--batch-size must be at least 1");
  if (options.threads < 1) throw ConfigError("--threads must be at least 1");
  if (options.workers < 1) throw ConfigError("--workers must be at least 1");
  if (options.steps < 1) throw ConfigError("--steps must be at least 1");
  if (options.warmupSteps < 0) throw ConfigError("--warmup must be >= 0");
}

ModelProfile profileModel(const ProfileOptions& options) {
  return measureAsTrainDoes(options, [] {});
}

ModelProfile profileModel(Transport& transport, const ProfileOptions& options) {
  if (transport.size() == 1) return profileModel(options);
  ModelProfile mine = measureAsTrainDoes(options, [&] { barrier(transport); });
  return medianAcrossRanks(transport, mine);
}

std::string profileCommandLine(const ProfileOptions& options) {
  return fmt::format(
      "gradsync profile --model {} --batch-size {} --threads {} --workers {} --warmup {} "
      "--steps {} --seed {}",
      options.model, options.batchSize, options.threads, options.workers, options.warmupSteps,
      options.steps, options.seed);
}

}  // namespace gradsync
