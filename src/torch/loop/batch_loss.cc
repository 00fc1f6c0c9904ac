#include "torch/loop/batch_loss.h"

#include "torch/models/gpt.h"

namespace gradsync {

torch::Tensor batchLoss(Model& net, const DataSource& data, std::span<float> inputs,
                        std::span<int64_t> labels, int64_t count) {
  if (const auto window = static_cast<int64_t>(data.windowTokens()); window > 0) {
    torch::Tensor windows = torch::from_blob(labels.data(), {count, window}, torch::kLong);
    return tokenLoss(net.forward(windows.slice(1, 0, window - 1)), windows.slice(1, 1, window));
  }
  torch::Tensor x = torch::from_blob(inputs.data(), {count, 1, 28, 28});
  torch::Tensor y = torch::from_blob(labels.data(), {count}, torch::kLong);
  return torch::nn::functional::cross_entropy(net.forward(x), y);
}

}  // namespace gradsync
