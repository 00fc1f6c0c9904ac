#include "torch/models/gpt.h"

#include <cmath>
#include <limits>
#include <vector>

namespace gradsync {
namespace {

namespace nn = torch::nn;

// Multi-head self-attention in which position t sees positions 0..t only.
class CausalSelfAttentionImpl : public nn::Module {
 public:
  CausalSelfAttentionImpl(int width, int heads) : heads_(heads) {
    qkv_ = register_module("qkv", nn::Linear(width, 3 * width));
    out_ = register_module("out", nn::Linear(width, width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const int64_t batch = x.size(0), tokens = x.size(1), width = x.size(2);
    const int64_t headWidth = width / heads_;
    // [batch, heads, tokens, headWidth] each.
    std::vector<torch::Tensor> qkv = qkv_->forward(x).chunk(3, /*dim=*/2);
    auto split = [&](const torch::Tensor& t) {
      return t.view({batch, tokens, heads_, headWidth}).transpose(1, 2);
    };
    torch::Tensor q = split(qkv[0]), k = split(qkv[1]), v = split(qkv[2]);
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(headWidth);
    torch::Tensor future = torch::ones({tokens, tokens}, torch::kBool).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    torch::Tensor mixed = torch::matmul(torch::softmax(scores, -1), v);
    return out_->forward(mixed.transpose(1, 2).reshape({batch, tokens, width}));
  }

 private:
  int64_t heads_;
  nn::Linear qkv_{nullptr}, out_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

// x + attention(LN(x)), then x + MLP(LN(x)), the MLP 4x wider with GELU.
class DecoderBlockImpl : public nn::Module {
 public:
  DecoderBlockImpl(int width, int heads) {
    norm1_ = register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({width})));
    attention_ = register_module("attention", CausalSelfAttention(width, heads));
    norm2_ = register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({width})));
    expand_ = register_module("expand", nn::Linear(width, 4 * width));
    project_ = register_module("project", nn::Linear(4 * width, width));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attention_->forward(norm1_->forward(x));
    return x + project_->forward(torch::gelu(expand_->forward(norm2_->forward(x))));
  }

 private:
  nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  CausalSelfAttention attention_{nullptr};
  nn::Linear expand_{nullptr}, project_{nullptr};
};
TORCH_MODULE(DecoderBlock);

class Gpt final : public Model {
 public:
  explicit Gpt(const GptConfig& config) : context_(config.context) {
    tokens_ = register_module("token_embedding", nn::Embedding(config.vocabulary, config.width));
    positions_ = register_module("position_embedding", nn::Embedding(config.context, config.width));
    blocks_ = register_module("blocks", nn::ModuleList());
    for (int l = 0; l < config.layers; ++l)
      blocks_->push_back(DecoderBlock(config.width, config.heads));
    norm_ = register_module("norm", nn::LayerNorm(nn::LayerNormOptions({config.width})));
    head_ = register_module(
        "head", nn::Linear(nn::LinearOptions(config.width, config.vocabulary).bias(false)));
  }

  // The pre-forward hook sees every parameter-holding module in forward order (an embedding, a
  // block, the final norm and head), so that update mode waits for each one's parameters.
  torch::Tensor forward(const torch::Tensor& tokens) override {
    TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) <= context_,
                "gpt takes token ids [batch, T <= context]");
    torch::Tensor positions = torch::arange(tokens.size(1), torch::kLong);
    beforeLayer(*tokens_);
    beforeLayer(*positions_);
    torch::Tensor x = tokens_->forward(tokens) + positions_->forward(positions);
    for (const auto& block : *blocks_) {
      beforeLayer(*block);
      x = block->as<DecoderBlockImpl>()->forward(x);
    }
    beforeLayer(*norm_);
    beforeLayer(*head_);
    return head_->forward(norm_->forward(x));
  }
  // The FC exchange (sharded:fc=) swaps 2-D layers of image models; a Transformer's linear
  // layers run on [batch, T, width] and stay with the engine.
  std::vector<LinearLayer> linearLayers() override { return {}; }

 private:
  int64_t context_;
  nn::Embedding tokens_{nullptr}, positions_{nullptr};
  nn::ModuleList blocks_{nullptr};
  nn::LayerNorm norm_{nullptr};
  nn::Linear head_{nullptr};
};

}  // namespace

std::shared_ptr<Model> makeGpt(const GptConfig& config) {
  return std::make_shared<Gpt>(config);
}

torch::Tensor tokenLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

}  // namespace gradsync
