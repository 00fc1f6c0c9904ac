// A model gradsync has never seen: an LSTM that classifies token sequences, with an auxiliary
// head that only some steps use (unused parameters, the top cause of hangs in data-parallel
// libraries). And a seeded synthetic task for it: the class of a sequence is its first token
// modulo the number of classes, which the LSTM must remember to the end of the sequence.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <utility>

namespace example {

struct SequenceClassifierImpl : torch::nn::Module {
  SequenceClassifierImpl(int64_t vocabulary, int64_t hidden, int64_t classes)
      : embedding(register_module("embedding", torch::nn::Embedding(vocabulary, 16))),
        lstm(register_module(
            "lstm", torch::nn::LSTM(torch::nn::LSTMOptions(16, hidden).batch_first(true)))),
        head(register_module("head", torch::nn::Linear(hidden, classes))),
        auxiliary(register_module("auxiliary", torch::nn::Linear(hidden, classes))) {}

  // tokens: [batch, length] int64. The auxiliary head joins in only when asked.
  torch::Tensor forward(const torch::Tensor& tokens, bool useAuxiliary = false) {
    torch::Tensor states = std::get<0>(lstm(embedding(tokens)));
    torch::Tensor last = states.select(1, -1);
    torch::Tensor logits = head(last);
    return useAuxiliary ? logits + auxiliary(last) : logits;
  }

  torch::nn::Embedding embedding;
  torch::nn::LSTM lstm;
  torch::nn::Linear head;
  torch::nn::Linear auxiliary;
};
TORCH_MODULE(SequenceClassifier);

inline constexpr int64_t kVocabulary = 12;
inline constexpr int64_t kClasses = 3;
inline constexpr int64_t kLength = 8;

// Batch `step` of the task, `batch` sequences: the same on every process for a given seed.
inline std::pair<torch::Tensor, torch::Tensor> taskBatch(uint64_t seed, int64_t step,
                                                         int64_t batch) {
  std::mt19937_64 random(seed * 1'000'003 + static_cast<uint64_t>(step));
  torch::Tensor tokens = torch::empty({batch, kLength}, torch::kLong);
  torch::Tensor labels = torch::empty({batch}, torch::kLong);
  for (int64_t i = 0; i < batch; ++i) {
    int64_t first = 0;
    for (int64_t j = 0; j < kLength; ++j) {
      int64_t token = static_cast<int64_t>(random() % kVocabulary);
      tokens[i][j] = token;
      if (j == 0) first = token;
    }
    labels[i] = first % kClasses;
  }
  return {tokens, labels};
}

}  // namespace example
