#include "torch/loop/data_source.h"

#include <fmt/format.h>

#include "data/idx.h"
#include "data/image_set.h"
#include "data/synthetic.h"
#include "data/text_corpus.h"
#include "gradsync/error.h"
#include "torch/loop/options.h"
#include "torch/loop/remote_data_source.h"
#include "torch/models/gpt_config.h"

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

// Byte-level text: sample i of a part is its window i (data/text_corpus.h).
class Text final : public DataSource {
 public:
  Text(const std::string& path, size_t window)
      : corpus_(loadTextCorpus(path, window)), window_(window) {}
  size_t trainSize() const override { return windowCount(corpus_.train, window_); }
  size_t testSize() const override { return windowCount(corpus_.heldOut, window_); }
  size_t sampleElements() const override { return 0; }
  size_t windowTokens() const override { return window_; }
  void batch(bool train, std::span<const size_t> indices, std::span<float> /*inputs*/,
             std::span<int64_t> labels) const override {
    for (size_t i = 0; i < indices.size(); ++i) {
      copyWindow(train ? corpus_.train : corpus_.heldOut, window_, indices[i],
                 labels.subspan(i * window_, window_));
    }
  }

 private:
  TextCorpus corpus_;
  size_t window_;
};

}  // namespace

bool isTextDataset(const std::string& dataset) {
  return dataset == "text" || dataset.rfind("text:", 0) == 0;
}

std::unique_ptr<DataSource> openDataSource(const std::string& name, const std::string& dataDir,
                                           size_t syntheticSamples, uint64_t seed,
                                           size_t contextTokens) {
  if (name == "fashion-mnist") return std::make_unique<FashionMnist>(dataDir);
  if (name == "synthetic") return std::make_unique<Synthetic>(syntheticSamples, seed);
  if (isTextDataset(name)) {
    if (contextTokens == 0) {
      throw ConfigError(fmt::format("dataset '{}' is text, for a language model", name),
                        {.hint = "train --model gpt on it"});
    }
    const std::string path = name == "text" ? kFortunesDir : name.substr(5);
    if (path.empty()) throw ConfigError("--dataset text:PATH needs a path after 'text:'");
    return std::make_unique<Text>(path, contextTokens + 1);
  }
  throw ConfigError(fmt::format("unknown dataset '{}'", name),
                    {.hint = "choose fashion-mnist, synthetic, text or text:PATH"});
}

std::unique_ptr<DataSource> openTrainingData(const TrainOptions& options) {
  if (options.dataUrl.empty()) {
    return openDataSource(options.dataset, options.dataDir, options.syntheticSamples, options.seed,
                          gptContextOf(options.model));
  }
  return openRemoteDataSource(
      {.url = options.dataUrl,
       .directory = options.cacheDir,
       .memoryBytes = static_cast<uint64_t>(options.cacheMemoryMiB * 1048576)});
}

}  // namespace gradsync
