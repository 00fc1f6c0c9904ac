#include "torch/loop/data_source.h"

#include <fmt/format.h>

#include "data/idx.h"
#include "data/image_set.h"
#include "data/synthetic.h"
#include "gradsync/error.h"
#include "torch/loop/options.h"
#include "torch/loop/remote_data_source.h"

namespace gradsync {
namespace {

class FashionMnist final : public DataSource {
 public:
  explicit FashionMnist(const std::string& dir)
      : train_(loadFashionMnist(dir, true)), test_(loadFashionMnist(dir, false)) {}
  size_t trainSize() const override { return static_cast<size_t>(train_.count); }
  size_t testSize() const override { return static_cast<size_t>(test_.count); }
  size_t sampleElements() const override { return train_.imageSize(); }
  void batch(bool train, std::span<const size_t> indices, std::span<float> inputs,
             std::span<int64_t> labels) const override {
    gatherBatch(train ? train_ : test_, indices, Normalization{}, inputs, labels);
  }

 private:
  ImageSet train_;
  ImageSet test_;
};

// Test samples come from the same generator at indices past the training set.
class Synthetic final : public DataSource {
 public:
  Synthetic(size_t samples, uint64_t seed) : samples_(samples), data_(SyntheticShape{}, seed) {}
  size_t trainSize() const override { return samples_; }
  size_t testSize() const override { return 2048; }
  size_t sampleElements() const override { return data_.sampleElements(); }
  void batch(bool train, std::span<const size_t> indices, std::span<float> inputs,
             std::span<int64_t> labels) const override {
    if (train) {
      data_.batch(indices, inputs, labels);
      return;
    }
    std::vector<size_t> shifted(indices.begin(), indices.end());
    for (size_t& i : shifted) i += samples_;
    data_.batch(shifted, inputs, labels);
  }

 private:
  size_t samples_;
  SyntheticDataset data_;
};

}  // namespace

std::unique_ptr<DataSource> openDataSource(const std::string& name, const std::string& dataDir,
                                           size_t syntheticSamples, uint64_t seed) {
  if (name == "fashion-mnist") return std::make_unique<FashionMnist>(dataDir);
  if (name == "synthetic") return std::make_unique<Synthetic>(syntheticSamples, seed);
  throw ConfigError(fmt::format("unknown dataset '{}'", name),
                    {.hint = "choose fashion-mnist or synthetic"});
}

std::unique_ptr<DataSource> openTrainingData(const TrainOptions& options) {
  if (options.dataUrl.empty()) {
    return openDataSource(options.dataset, options.dataDir, options.syntheticSamples, options.seed);
  }
  return openRemoteDataSource(
      {.url = options.dataUrl,
       .directory = options.cacheDir,
       .memoryBytes = static_cast<uint64_t>(options.cacheMemoryMiB * 1048576)});
}

}  // namespace gradsync
