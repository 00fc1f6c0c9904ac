#include "torch/loop/evaluation.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "common/tags.h"
#include "gradsync/collectives.h"
#include "torch/loop/batch_loss.h"

namespace gradsync {

double meanOverRanks(Transport& transport, double sum, double count) {
  std::array<float, 2> sums = {static_cast<float>(sum), static_cast<float>(count)};
  allreduce(transport, sums, ReduceOp::kSum, {.tag = tags::kTrainer});
  return sums[1] > 0 ? sums[0] / sums[1] : 0.0;  // in float, as the sums are
}

double testAccuracy(Model& net, const DataSource& data, Transport& transport, size_t samples) {
  const size_t testSize = std::min(samples, data.testSize());
  const auto rank = static_cast<size_t>(transport.rank());
  const auto size = static_cast<size_t>(transport.size());
  size_t correct = 0;
  size_t seen = 0;
  torch::NoGradGuard noGrad;
  net.eval();
  constexpr size_t kBatch = 500;
  std::vector<size_t> indices;
  std::vector<float> inputs(kBatch * data.sampleElements());
  std::vector<int64_t> labels(kBatch);
  for (size_t i = rank; i < testSize; i += size) {
    indices.push_back(i);
    if (indices.size() < kBatch && i + size < testSize) continue;
    auto n = static_cast<int64_t>(indices.size());
    data.batch(false, indices, std::span(inputs).first(indices.size() * data.sampleElements()),
               std::span(labels).first(indices.size()));
    torch::Tensor logits = net.forward(torch::from_blob(inputs.data(), {n, 1, 28, 28}));
    torch::Tensor truth = torch::from_blob(labels.data(), {n}, torch::kLong);
    correct += static_cast<size_t>(logits.argmax(1).eq(truth).sum().item<int64_t>());
    seen += indices.size();
    indices.clear();
  }
  return meanOverRanks(transport, static_cast<double>(correct), static_cast<double>(seen));
}

double heldOutLoss(Model& net, const DataSource& data, Transport& transport, size_t samples) {
  const size_t windows = std::min(samples, data.testSize());
  const auto rank = static_cast<size_t>(transport.rank());
  const auto size = static_cast<size_t>(transport.size());
  torch::NoGradGuard noGrad;
  net.eval();
  constexpr size_t kBatch = 64;
  std::vector<size_t> indices;
  std::vector<int64_t> tokens(kBatch * data.labelsPerSample());
  double lossSum = 0;  // over this rank's windows, each weighted by its count of tokens
  size_t seen = 0;
  for (size_t i = rank; i < windows; i += size) {
    indices.push_back(i);
    if (indices.size() < kBatch && i + size < windows) continue;
    data.batch(false, indices, {},
               std::span(tokens).first(indices.size() * data.labelsPerSample()));
    const auto n = static_cast<int64_t>(indices.size());
    lossSum += batchLoss(net, data, {}, tokens, n).item<double>() * static_cast<double>(n);
    seen += indices.size();
    indices.clear();
  }
  std::array<float, 2> sums = {static_cast<float>(lossSum), static_cast<float>(seen)};
  allreduce(transport, sums, ReduceOp::kSum, {.tag = tags::kTrainer});
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");
}

Quality evaluateModel(Model& net, const DataSource& data, Transport& transport, size_t samples) {
  if (data.windowTokens() > 0) return {std::nan(""), heldOutLoss(net, data, transport, samples)};
  return {testAccuracy(net, data, transport, samples), std::nan("")};
}

}  // namespace gradsync
