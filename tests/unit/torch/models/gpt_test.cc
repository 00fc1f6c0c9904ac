// The language model (torch/models/gpt.h): its shape from the spec, causality, and the errors a
// wrong spec gives.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "gradsync/error.h"
#include "torch/models/catalog.h"
#include "torch/models/gpt.h"

namespace gradsync {
namespace {

TEST(Gpt, SpecGivesTheShape) {
  const GptConfig config = *parseGptModel("gpt:layers=3,width=32,heads=2,context=16");
  EXPECT_EQ(config.spec(), "gpt:layers=3,width=32,heads=2,context=16");
  EXPECT_EQ(parseGptModel("gpt")->spec(), GptConfig{}.spec());
  EXPECT_FALSE(parseGptModel("cnn").has_value());
  EXPECT_EQ(gptContextOf("gpt:context=16"), 16u);
  EXPECT_EQ(gptContextOf("mlp"), 0u);
  std::shared_ptr<Model> model = makeModel("gpt:layers=3,width=32,heads=2,context=16");
  // Embeddings, per block two norms, qkv, out, expand, project; the final norm; the head.
  EXPECT_EQ(model->parameters().size(), 2u + 3 * 12 + 2 + 1);
  int64_t count = 0;
  for (const torch::Tensor& p : model->parameters()) count += p.numel();
  const int64_t block =
      2 * 2 * 32 + (32 * 96 + 96) + (32 * 32 + 32) + (32 * 128 + 128) + (128 * 32 + 32);
  EXPECT_EQ(count, 256 * 32 + 16 * 32 + 3 * block + 2 * 32 + 32 * 256);
  EXPECT_EQ(modelOutputShape("gpt:layers=1,width=32,heads=2,context=16", 3),
            (std::vector<int64_t>{3, 16, 256}));
  EXPECT_EQ(describeModel("gpt").front().name, "token_embedding.weight");
}

TEST(Gpt, WrongSpecsAreRefusedSayingWhy) {
  for (const char* spec :
       {"gpt:layers=0", "gpt:width=x", "gpt:depth=2", "gpt:width=30,heads=4", "gpt:context=-1"}) {
    EXPECT_THROW(parseGptModel(spec), ConfigError) << spec;
  }
  try {
    parseGptModel("gpt:width=30,heads=4");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must divide its width"), std::string::npos) << e.what();
  }
}

// A change at position t changes no output before t, and does change outputs from t on.
TEST(Gpt, IsCausal) {
  std::shared_ptr<Model> model = makeModel("gpt:layers=2,width=32,heads=4,context=12");
  initializeParameters(*model, 3);
  model->eval();
  torch::NoGradGuard noGrad;
  torch::Tensor tokens = torch::randint(256, {2, 12}, torch::kLong);
  torch::Tensor before = model->forward(tokens);
  for (int64_t t : {0, 5, 11}) {
    torch::Tensor changed = tokens.clone();
    changed.index_put_({0, t}, (tokens.index({0, t}).item<int64_t>() + 1) % 256);
    torch::Tensor after = model->forward(changed);
    EXPECT_TRUE(torch::equal(after.index({0, torch::indexing::Slice(0, t)}),
                             before.index({0, torch::indexing::Slice(0, t)})))
        << "position " << t;
    EXPECT_FALSE(torch::allclose(after.index({0, t}), before.index({0, t}))) << "position " << t;
    EXPECT_TRUE(torch::equal(after.index({1}), before.index({1})));  // the other sequence
  }
  // Shorter inputs than the context run; longer ones are refused.
  EXPECT_EQ(model->forward(tokens.slice(1, 0, 5)).sizes().vec(), (std::vector<int64_t>{2, 5, 256}));
  EXPECT_THROW(model->forward(torch::zeros({1, 13}, torch::kLong)), c10::Error);
}

}  // namespace
}  // namespace gradsync
