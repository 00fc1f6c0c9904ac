#include "torch/recommendation/dlrm.h"

#include <fmt/format.h>

#include "gradsync/error.h"
#include "torch/models/models.h"

namespace gradsync {
namespace {

torch::nn::Sequential mlp(int64_t inputs, const std::vector<int64_t>& widths, bool reluLast) {
  torch::nn::Sequential layers;
  for (size_t i = 0; i < widths.size(); ++i) {
    layers->push_back(torch::nn::Linear(inputs, widths[i]));
    if (i + 1 < widths.size() || reluLast) layers->push_back(torch::nn::ReLU());
    inputs = widths[i];
  }
  return layers;
}

}  // namespace

int64_t dlrmInteractionWidth(const DlrmConfig& config) {
  if (config.bottom.empty() || config.denseFeatures < 1) {
    throw ConfigError("dlrm needs dense features and at least one bottom layer");
  }
  validateEmbeddingSpec(config.embedding);
  const int64_t dim = config.bottom.back();
  if (dim != config.embedding.dim) {
    throw ConfigError(fmt::format("dlrm: the bottom MLP ends at width {} but the embedding dim is "
                                  "{}: the dot interaction needs them equal",
                                  dim, config.embedding.dim),
                      {.hint = "make --bottom-mlp's last width the --embedding-dim"});
  }
  for (int64_t w : config.bottom) {
    if (w < 1) throw ConfigError("dlrm: MLP widths must be at least 1");
  }
  for (int64_t w : config.top) {
    if (w < 1) throw ConfigError("dlrm: MLP widths must be at least 1");
  }
  const int64_t vectors = config.embedding.tables() + 1;
  return dim + vectors * (vectors - 1) / 2;
}

DlrmModel::DlrmModel(const DlrmConfig& config, uint64_t seed) : config_(config) {
  const int64_t interaction = dlrmInteractionWidth(config);
  bottom_ = register_module("bottom", mlp(config.denseFeatures, config.bottom, true));
  std::vector<int64_t> top = config.top;
  top.push_back(1);
  top_ = register_module("top", mlp(interaction, top, false));
  initializeParameters(*this, seed);
  if (!config.localTables) return;
  const EmbeddingSpec& spec = config.embedding;
  for (int t = 0; t < spec.tables(); ++t) {
    const auto rows = static_cast<int64_t>(spec.tableRows[t]);
    torch::Tensor table = torch::empty({rows, spec.dim});
    float* data = table.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
      initialRow(spec, t, static_cast<uint64_t>(r),
                 {data + r * spec.dim, static_cast<size_t>(spec.dim)});
    }
    tables_.push_back(register_parameter(fmt::format("table{}", t), table));
  }
}

std::vector<torch::Tensor> DlrmModel::mlpParameters() const {
  std::vector<torch::Tensor> parameters = bottom_->parameters();
  for (const torch::Tensor& p : top_->parameters()) parameters.push_back(p);
  return parameters;
}

torch::Tensor DlrmModel::forward(const torch::Tensor& dense,
                                 const std::vector<torch::Tensor>& weights,
                                 const std::vector<torch::Tensor>& positions) {
  const int64_t batch = dense.size(0);
  const auto tables = static_cast<size_t>(config_.embedding.tables());
  TORCH_CHECK(weights.size() == tables && positions.size() == tables, "dlrm: one input per table");
  torch::Tensor x = bottom_->forward(dense);
  std::vector<torch::Tensor> vectors = {x};
  // One index per bag: the bag offsets are 0, 1, ..., B - 1 (sum of one row = the row).
  const torch::Tensor offsets = torch::arange(batch, torch::kLong);
  namespace F = torch::nn::functional;
  for (size_t t = 0; t < tables; ++t) {
    vectors.push_back(F::embedding_bag(
        positions[t], weights[t], F::EmbeddingBagFuncOptions().offsets(offsets).mode(torch::kSum)));
  }
  const torch::Tensor stacked = torch::stack(vectors, 1);                   // [B, T+1, dim]
  const torch::Tensor dots = torch::bmm(stacked, stacked.transpose(1, 2));  // [B, T+1, T+1]
  const int64_t n = stacked.size(1);
  const torch::Tensor pairs = torch::tril_indices(n, n, -1);  // u > v: each pair once
  const torch::Tensor flat = dots.index({torch::indexing::Slice(), pairs[0], pairs[1]});
  return top_->forward(torch::cat({x, flat}, 1)).squeeze(1);
}

}  // namespace gradsync
