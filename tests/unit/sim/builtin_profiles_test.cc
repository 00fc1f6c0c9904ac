#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "gradsync/error.h"
#include "sim/model_profile.h"
#include "support/profile_expect.h"

namespace gradsync {
namespace {

// The published figures the profiles are built from, restated here so that the generated layers
// are checked against closed forms rather than against themselves.
constexpr double kCnnBatch = 32;
constexpr double kResNet50Step = kCnnBatch / 298.51;              // MXNet perf FAQ, V100 fp32
constexpr double kVgg19Step = kResNet50Step * (147.32 / 103.58);  // jcjohnson/cnn-benchmarks
constexpr double kHbm = 900e9;                                    // V100 bytes/s

// Forward FLOPs per image: 2 x the multiply-accumulates of every convolution and linear layer
// (4.09 G MACs for ResNet-50, 19.6 G for VGG-19, as usually quoted).
constexpr double kResNet50Flops = 8'178'368'512;
constexpr double kVgg19Flops = 39'264'124'928;

// Forward FLOPs per target token (with one source token) of an encoder-decoder Transformer with
// post-LN layers, sentences of `len` tokens: embedding scale and position add on both sides,
// encoder self-attention + FFN, decoder self- and cross-attention + FFN, output projection.
double transformerFlopsPerToken(double d, double dFf, double layers, double vocab, double len) {
  const double attention = 8 * d * d + 4 * len * d;
  const double ffn = 4 * d * dFf;
  return 4 * d + layers * (attention + ffn) + layers * (2 * attention + ffn) + 2 * d * vocab;
}

double transformerStep() {
  const double base = transformerFlopsPerToken(512, 2048, 6, 37000, 32);
  const double big = transformerFlopsPerToken(1024, 4096, 6, 33712, 32);
  return 4096 * base / (big * 7635);  // NVIDIA: Transformer big, V100 fp32, 7635 tokens/s
}

double stepOf(const ModelProfile& p) {
  return p.forwardSeconds() + p.backwardSeconds() + p.updateSeconds;
}

const TensorShape* findTensor(const ModelProfile& p, const std::string& name) {
  for (const LayerProfile& layer : p.layers)
    for (const TensorShape& t : layer.tensors)
      if (t.name == name) return &t;
  return nullptr;
}

const LayerProfile* findLayer(const ModelProfile& p, const std::string& name) {
  for (const LayerProfile& layer : p.layers)
    if (layer.name == name) return &layer;
  return nullptr;
}

TEST(BuiltinProfiles, NamesAreTheThreeShippedModels) {
  EXPECT_EQ(builtinProfileNames(), (std::vector<std::string>{"resnet50", "vgg19", "transformer"}));
  for (const std::string& name : builtinProfileNames()) {
    const ModelProfile p = builtinProfile(name);
    EXPECT_EQ(p.name, name);
    EXPECT_EQ(p.device, "NVIDIA V100 (fp32)");
    EXPECT_NE(p.source.find("backward = 2x forward"), std::string::npos) << name;
  }
}

TEST(BuiltinProfiles, ResNet50MatchesTorchvision) {
  const ModelProfile p = builtinProfile("resnet50");
  EXPECT_EQ(p.parameterCount(), 25'557'032u);
  EXPECT_EQ(p.tensors().size(), 161u);
  EXPECT_EQ(p.layers.size(), 54u);  // 53 convolutions (each with its BatchNorm) + fc
  EXPECT_EQ(p.batchSize, 32);
  EXPECT_EQ(p.tensors().front().name, "conv1.weight");
  EXPECT_EQ(p.tensors().front().dims, (std::vector<int64_t>{64, 3, 7, 7}));
  EXPECT_EQ(p.tensors().back().name, "fc.bias");
  const TensorShape* shortcut = findTensor(p, "layer3.0.downsample.0.weight");
  ASSERT_NE(shortcut, nullptr);
  EXPECT_EQ(shortcut->dims, (std::vector<int64_t>{1024, 512, 1, 1}));
  const TensorShape* bn = findTensor(p, "layer4.2.bn3.bias");
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->dims, (std::vector<int64_t>{2048}));
}

TEST(BuiltinProfiles, Vgg19MatchesTorchvision) {
  const ModelProfile p = builtinProfile("vgg19");
  EXPECT_EQ(p.parameterCount(), 143'667'240u);
  EXPECT_EQ(p.tensors().size(), 38u);
  EXPECT_EQ(p.layers.size(), 19u);
  EXPECT_EQ(p.batchSize, 32);
  ASSERT_NE(findTensor(p, "features.34.weight"), nullptr);  // the last convolution
  EXPECT_EQ(findTensor(p, "features.34.weight")->dims, (std::vector<int64_t>{512, 512, 3, 3}));
  ASSERT_NE(findTensor(p, "classifier.0.weight"), nullptr);
  EXPECT_EQ(findTensor(p, "classifier.0.weight")->dims, (std::vector<int64_t>{4096, 25088}));
  EXPECT_EQ(p.tensors().back().name, "classifier.6.bias");
}

TEST(BuiltinProfiles, TransformerBaseWithOneSharedEmbedding) {
  const ModelProfile p = builtinProfile("transformer");
  // 37000 x 512 embedding + 6 x 3,152,384 encoder + 6 x 4,204,032 decoder layers (fairseq keeps
  // biases on the attention projections; without them it would be 63,045,632).
  EXPECT_EQ(p.parameterCount(), 63'082'496u);
  EXPECT_EQ(p.tensors().size(), 253u);  // 1 + 6 x 16 + 6 x 26
  EXPECT_EQ(p.layers.size(), 32u);      // embedding, 6 x 2 + 6 x 3 blocks, output projection
  EXPECT_EQ(p.batchSize, 4096);
  int embeddings = 0;
  for (const TensorShape& t : p.tensors()) embeddings += t.name.find("embed") != std::string::npos;
  EXPECT_EQ(embeddings, 1);
  EXPECT_EQ(p.tensors().front().dims, (std::vector<int64_t>{37000, 512}));
  EXPECT_TRUE(p.layers.back().tensors.empty());  // the output projection is tied to it
  ASSERT_NE(findTensor(p, "decoder.layers.5.encoder_attn.q_proj.weight"), nullptr);
  ASSERT_NE(findTensor(p, "encoder.layers.0.fc1.weight"), nullptr);
  EXPECT_EQ(findTensor(p, "encoder.layers.0.fc1.weight")->dims, (std::vector<int64_t>{2048, 512}));
}

TEST(BuiltinProfiles, TensorAndLayerNamesAreUnique) {
  for (const std::string& name : builtinProfileNames()) {
    const ModelProfile p = builtinProfile(name);
    std::set<std::string> tensors;
    for (const TensorShape& t : p.tensors()) EXPECT_TRUE(tensors.insert(t.name).second) << t.name;
    std::set<std::string> layers;
    for (const LayerProfile& l : p.layers) EXPECT_TRUE(layers.insert(l.name).second) << l.name;
  }
}

TEST(BuiltinProfiles, TimesArePositiveAndBackwardIsTwiceForward) {
  for (const std::string& name : builtinProfileNames()) {
    const ModelProfile p = builtinProfile(name);
    EXPECT_GT(p.updateSeconds, 0) << name;
    for (const LayerProfile& l : p.layers) {
      EXPECT_GT(l.forwardSeconds, 0) << name << " " << l.name;
      EXPECT_NEAR(l.backwardSeconds, 2 * l.forwardSeconds, 1e-12 * l.backwardSeconds) << l.name;
    }
  }
}

// A single-device step (forward + backward + update) reproduces the published step time; the
// update is the stated memory-bound estimate.
TEST(BuiltinProfiles, StepTimesMatchTheirSources) {
  const struct {
    const char* name;
    double step;
    int passes;
  } kCases[] = {{"resnet50", kResNet50Step, 5},
                {"vgg19", kVgg19Step, 5},
                {"transformer", transformerStep(), 7}};
  for (const auto& c : kCases) {
    const ModelProfile p = builtinProfile(c.name);
    EXPECT_NEAR(stepOf(p), c.step, 1e-9 * c.step) << c.name;
    const double update = static_cast<double>(p.parameterCount()) * 4 * c.passes / kHbm;
    EXPECT_NEAR(p.updateSeconds, update, 1e-12 * update) << c.name;
    const double compute = c.step - update;
    EXPECT_NEAR(p.forwardSeconds() + p.backwardSeconds(), compute, 1e-9 * compute) << c.name;
    EXPECT_NEAR(p.backwardSeconds(), 2 * p.forwardSeconds(), 1e-9 * compute) << c.name;
  }
  // About 107 ms, 152 ms and 161 ms: 299 and 210 images/s, 25k tokens/s.
  EXPECT_NEAR(kResNet50Step, 0.1072, 1e-4);
  EXPECT_NEAR(kVgg19Step, 0.1525, 1e-4);
  EXPECT_NEAR(transformerStep(), 0.1610, 1e-4);
}

// Each layer's share of the compute is its share of the FLOPs.
TEST(BuiltinProfiles, LayerTimesAreFlopShares) {
  const ModelProfile resnet = builtinProfile("resnet50");
  const double resnetForward = resnet.forwardSeconds();
  const double conv1 = 2.0 * 3 * 64 * 7 * 7 * 112 * 112;
  EXPECT_NEAR(findLayer(resnet, "conv1")->forwardSeconds / resnetForward, conv1 / kResNet50Flops,
              1e-12);
  EXPECT_NEAR(findLayer(resnet, "fc")->forwardSeconds / resnetForward,
              2.0 * 2048 * 1000 / kResNet50Flops, 1e-12);

  const ModelProfile vgg = builtinProfile("vgg19");
  const double vggForward = vgg.forwardSeconds();
  EXPECT_NEAR(findLayer(vgg, "classifier.0")->forwardSeconds / vggForward,
              2.0 * 25088 * 4096 / kVgg19Flops, 1e-12);
  EXPECT_NEAR(findLayer(vgg, "features.0")->forwardSeconds / vggForward,
              2.0 * 3 * 64 * 9 * 224 * 224 / kVgg19Flops, 1e-12);

  const ModelProfile t = builtinProfile("transformer");
  const double perToken = transformerFlopsPerToken(512, 2048, 6, 37000, 32);
  EXPECT_NEAR(findLayer(t, "decoder.output_projection")->forwardSeconds / t.forwardSeconds(),
              2.0 * 512 * 37000 / perToken, 1e-12);
}

TEST(BuiltinProfiles, UnknownNameThrowsConfigErrorListingTheNames) {
  EXPECT_THROW(builtinProfile("resnet"), ConfigError);
  try {
    builtinProfile("bert");
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("\"bert\""), std::string::npos) << what;
    for (const std::string& name : builtinProfileNames())
      EXPECT_NE(what.find(name), std::string::npos) << what;
  }
}

TEST(BuiltinProfiles, LoadModelProfileFindsBuiltins) {
  EXPECT_EQ(loadModelProfile("vgg19").parameterCount(), 143'667'240u);
}

TEST(BuiltinProfiles, JsonRoundTripKeepsTensorsAndTimes) {
  for (const std::string& name : builtinProfileNames()) {
    const ModelProfile p = builtinProfile(name);
    testing::expectSameProfile(profileFromJson(profileToJson(p), name + ".json"), p);
  }
}

// The activations each layer keeps per sample, fp32 (docs/simulator.md, "Wavelet"): a
// convolution with its BatchNorm keeps both outputs, a VGG convolution its output (the ReLU in
// place), a linear layer its output, the Transformer's output projection the logits and their
// log-softmax.
TEST(BuiltinProfiles, ActivationBytesByHand) {
  const ModelProfile resnet = builtinProfile("resnet50");
  EXPECT_DOUBLE_EQ(resnet.layers.front().activationBytesPerSample, 2.0 * 64 * 112 * 112 * 4);
  EXPECT_DOUBLE_EQ(resnet.layers.back().activationBytesPerSample, 1000.0 * 4);
  const ModelProfile vgg = builtinProfile("vgg19");
  EXPECT_DOUBLE_EQ(vgg.layers.front().activationBytesPerSample, 64.0 * 224 * 224 * 4);
  EXPECT_DOUBLE_EQ(vgg.layers[15].activationBytesPerSample, 512.0 * 14 * 14 * 4);
  const ModelProfile transformer = builtinProfile("transformer");
  EXPECT_DOUBLE_EQ(transformer.layers.back().activationBytesPerSample, 2.0 * 37000 * 4);
  EXPECT_DOUBLE_EQ(transformer.layers[1].activationBytesPerSample, (6.0 * 512 + 8 * 32) * 4);
  for (const std::string& name : builtinProfileNames())
    for (const LayerProfile& layer : builtinProfile(name).layers)
      EXPECT_GT(layer.activationBytesPerSample, 0) << name << " " << layer.name;
}

// What the fuzzer found (tests/fuzz/profile_fuzz.cc): every malformed profile is a ConfigError,
// never another exception or a float cast out of range into an integer.
TEST(ProfileJson, MalformedFieldsAreConfigErrors) {
  const std::string layers =
      R"("layers":[{"name":"l","forward_s":1,"backward_s":2,"tensors":[{"name":"t","dims":[3]}]}])";
  for (const std::string head :
       {R"("name":"m","device":"d","batch_size":1e32)",  // an integer field as a float
        R"("name":"m","device":"d","batch_size":111111111111111111111111111111111)",
        R"("name":"m","device":"d","batch_size":1,"update_s":1.7e80165)",  // out of range
        R"("name":"m","device":"d","batch_size":1,"source":7)"}) {         // not a string
    EXPECT_THROW(profileFromJson("{" + head + "," + layers + "}", "test.json"), ConfigError)
        << head;
  }
  const std::string floatDims =
      R"({"name":"m","device":"d","batch_size":1,"layers":[{"name":"l","forward_s":1,)"
      R"("backward_s":2,"tensors":[{"name":"t","dims":[1e30]}]}]})";
  EXPECT_THROW(profileFromJson(floatDims, "test.json"), ConfigError);
  const std::string negative =
      R"({"name":"m","device":"d","batch_size":1,"layers":[{"name":"l","forward_s":1,)"
      R"("backward_s":2,"activation_bytes":-4,"tensors":[{"name":"t","dims":[3]}]}]})";
  EXPECT_THROW(profileFromJson(negative, "test.json"), ConfigError);
  EXPECT_NO_THROW(
      profileFromJson(R"({"name":"m","device":"d","batch_size":1,)" + layers + "}", "test.json"));
}

}  // namespace
}  // namespace gradsync
