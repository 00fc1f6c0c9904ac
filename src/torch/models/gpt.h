// The language model of `gradsync train --model gpt`: a decoder-only Transformer over byte
// tokens (pre-LayerNorm blocks of causal self-attention and a GELU MLP, learned positions),
// shaped by GptConfig (torch/models/gpt_config.h). Input: token ids [batch, T <= context]
// (int64); output: logits [batch, T, 256]. Not thread-safe (a torch module).
#pragma once

#include <memory>

#include "torch/models/gpt_config.h"
#include "torch/models/models.h"

namespace gradsync {

std::shared_ptr<Model> makeGpt(const GptConfig& config);

// The mean cross-entropy in nats per token of `logits` [batch, T, V] against `targets`
// [batch, T]: the language model's loss.
torch::Tensor tokenLoss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace gradsync
