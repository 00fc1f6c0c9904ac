// DLRM (Naumov et al., 2019), the recommendation model of `gradsync train --model dlrm`
// (docs/models.md): a bottom MLP over the dense features, one EmbeddingBag per categorical
// feature, the pairwise dot products of the bottom MLP's output and the embeddings, and a top MLP
// to one logit (a click's log-odds):
//   x = bottom(dense)                          ReLU after every layer; its width = embedding dim
//   e_t = EmbeddingBag_t(ids_t) (sum)          one bag per sample and table
//   z = [x, <u, v> for each pair u < v of (x, e_1, ..., e_T)]
//   logit = top(z)                             ReLU between layers, none after the last
// With 13 dense features, 26 tables of dim 16 and bottom 13-64-16, z has 16 + 27·26/2 = 367
// values (top 367-64-1). Defaults follow ../shared/reference/seed004-methods.md §1.9.
//
// The tables are either held by the model (`localTables`: the dense-gradient path, every worker
// a full replica whose table gradients are averaged densely) or supplied at each forward (the
// rows a batch touches, pulled from the embedding servers; their gradient is the rows' update).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "ps/embedding_shard.h"

namespace gradsync {

struct DlrmConfig {
  int denseFeatures = 13;
  std::vector<int64_t> bottom = {64, 16};  // layer widths; the last is the embedding dim
  std::vector<int64_t> top = {64};         // hidden widths; a final layer to 1 is added
  EmbeddingSpec embedding;                 // tables (rows, dim = bottom.back()), seed
  bool localTables = false;                // the model holds the tables as parameters
};

class DlrmModel : public torch::nn::Module {
 public:
  // Initialises the MLPs from `seed` (as every model of `train`) and, with local tables, the
  // tables as the servers would (initialRow). ConfigError for an inconsistent config.
  DlrmModel(const DlrmConfig& config, uint64_t seed);

  // One logit per sample. `dense`: [B, denseFeatures]. Per table t: `weights[t]` holds rows
  // ([U_t, dim]; with local tables, the table itself: tables()[t]) and `positions[t]` ([B], int64)
  // each sample's row among them.
  torch::Tensor forward(const torch::Tensor& dense, const std::vector<torch::Tensor>& weights,
                        const std::vector<torch::Tensor>& positions);
  // The tables held by the model (empty without local tables).
  const std::vector<torch::Tensor>& tables() const { return tables_; }
  // The MLPs' parameters (what the workers' ring synchronizes besides local tables).
  std::vector<torch::Tensor> mlpParameters() const;
  const DlrmConfig& config() const { return config_; }

 private:
  DlrmConfig config_;
  torch::nn::Sequential bottom_{nullptr};
  torch::nn::Sequential top_{nullptr};
  std::vector<torch::Tensor> tables_;
};

// Checks a config and returns the interaction's width (dim + (T+1)·T/2).
int64_t dlrmInteractionWidth(const DlrmConfig& config);

}  // namespace gradsync
