// The language model's shape, `--model gpt[:layers=L,width=D,heads=A,context=T]`, parsed
// without torch (the CLI, the data's windows and the catalog read it). torch/models/gpt.h builds
// the model.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace gradsync {

// A decoder-only Transformer over byte tokens (docs/models.md). The default trains on 2 cores
// in minutes: 2 layers of width 128, 4 heads, a context of 64 bytes (about 0.43 M parameters).
struct GptConfig {
  int layers = 2;
  int width = 128;  // the residual stream; the MLP is 4x wider
  int heads = 4;    // must divide width
  int context = 64;
  int vocabulary = 256;  // byte-level tokens

  std::string spec() const;  // "gpt:layers=2,width=128,heads=4,context=64"
};

// The config `model` names: nullopt for another model; ConfigError for a gpt spec with an
// unknown key, a value that is not a positive integer, or heads that do not divide width.
std::optional<GptConfig> parseGptModel(const std::string& model);
// The context of `model` in tokens: 0 for a model that is not a language model.
size_t gptContextOf(const std::string& model);

}  // namespace gradsync
