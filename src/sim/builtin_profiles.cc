// The shipped model profiles (docs/simulator.md, "Built-in profiles"): resnet50, vgg19 and
// transformer on one NVIDIA V100 in fp32.
//
// Layer shapes are exact (torchvision for the CNNs, fairseq's transformer_wmt_en_de for the
// Transformer) and generated here rather than tabulated. Times are not measured here: each model
// gets one published per-step time, and every layer gets the share of it that its FLOPs are of
// the model's FLOPs, with backward = 2 x forward. This keeps the profiles reproducible from their
// sources; the price is that memory-bound work (BatchNorm, ReLU, LayerNorm, softmax, pooling) is
// spread over the layers by FLOPs instead of where it runs.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <string>
#include <utility>
#include <vector>

#include "gradsync/error.h"
#include "sim/model_profile.h"

namespace gradsync {
namespace {

constexpr const char* kDevice = "NVIDIA V100 (fp32)";

// The optimizer step streams fp32 parameters, gradients and optimizer state through HBM; V100
// HBM2 peaks at 900 GB/s. SGD with momentum reads p, g, m and writes p, m: 5 passes; Adam reads
// p, g, m, v and writes p, m, v: 7 passes. At peak bandwidth this is a lower bound.
constexpr double kV100HbmBytesPerSecond = 900e9;
constexpr double kFp32Bytes = 4;
constexpr int kSgdMomentumPasses = 5;
constexpr int kAdamPasses = 7;

// Per-device batch of the CNNs: what P3 (Jayarajan et al., SysML 2019) ran per GPU.
constexpr int64_t kCnnBatch = 32;
constexpr int64_t kImageSize = 224;
// V100 (AWS p3.2xlarge) fp32 training of ResNet-50 at batch 32: 298.51 images/s. MXNet 1.2.0,
// cuDNN 7.0.5, "Some Tips for Improving MXNet Performance", table "Training results".
constexpr double kResNet50ImagesPerSecond = 298.51;
// No V100 fp32 training figure for VGG-19 at batch 32 was found, so VGG-19 takes ResNet-50's step
// times the ratio of their forward+backward times measured side by side on one GPU: 147.32 ms vs
// 103.58 ms (Pascal Titan X, cuDNN 5.1, batch 16; jcjohnson/cnn-benchmarks).
constexpr double kVgg19OverResNet50 = 147.32 / 103.58;

// Transformer batch per device, in target tokens (each with one source token on average);
// fairseq's recipes use --max-tokens 4096 for this model. Attention matmuls need a sentence
// length: 32 tokens, about the WMT14 En-De mean after BPE (they are ~1% of the FLOPs).
constexpr int64_t kTransformerTokens = 4096;
constexpr int64_t kSentenceTokens = 32;
// Transformer "big" (fairseq transformer_wmt_en_de_big_t2t, shared 33,708-token vocabulary plus
// 4 special tokens), fp32 on one V100 16 GB at 2560 tokens per batch: 7635 tokens/s (NVIDIA
// DeepLearningExamples, PyTorch/Translation/Transformer). No such figure exists for "base", so
// base runs at the FLOP rate big achieved; smaller GEMMs make base less efficient, so the base
// times are somewhat optimistic.
constexpr double kTransformerBigTokensPerSecond = 7635;

struct TransformerShape {
  int64_t dModel;
  int64_t dFf;
  int64_t layers;  // in the encoder, and again in the decoder
  int64_t vocab;   // shared by source, target and output projection
};
constexpr TransformerShape kTransformerBase{512, 2048, 6, 37000};
constexpr TransformerShape kTransformerBig{1024, 4096, 6, 33712};

// Layers in forward order with the forward FLOPs of each for one step on one device, and the
// fp32 values each keeps for its backward per sample (docs/simulator.md, "Wavelet": the layer's
// outputs; a lower bound, since BatchNorm and ReLU also keep small statistics and masks).
struct Builder {
  std::vector<LayerProfile> layers;
  std::vector<double> flops;

  void add(std::string name, std::vector<TensorShape> tensors, double forwardFlops,
           double activationValuesPerSample) {
    LayerProfile layer{std::move(name), std::move(tensors), 0.0, 0.0};
    layer.activationBytesPerSample = activationValuesPerSample * kFp32Bytes;
    layers.push_back(std::move(layer));
    flops.push_back(forwardFlops);
  }
  double totalFlops() const {
    double sum = 0;
    for (double f : flops) sum += f;
    return sum;
  }
};

// Sets the times: the step (`stepSeconds`, as published, so it includes the optimizer step) less
// the update is the compute; each layer gets its FLOP share of it, a third forward and two thirds
// backward (backward computes both the input and the weight gradients, each a matmul as large as
// the forward one).
ModelProfile finish(Builder builder, std::string name, std::string source, int64_t batch,
                    double stepSeconds, int updatePasses) {
  ModelProfile profile;
  profile.name = std::move(name);
  profile.device = kDevice;
  profile.source = std::move(source);
  profile.batchSize = batch;
  profile.layers = std::move(builder.layers);
  profile.updateSeconds = static_cast<double>(profile.parameterCount()) * kFp32Bytes *
                          updatePasses / kV100HbmBytesPerSecond;
  const double compute = stepSeconds - profile.updateSeconds;
  const double total = builder.totalFlops();
  for (size_t i = 0; i < profile.layers.size(); ++i) {
    const double forward = compute * builder.flops[i] / (3 * total);
    profile.layers[i].forwardSeconds = forward;
    profile.layers[i].backwardSeconds = 2 * forward;
  }
  return profile;
}

double convFlops(int64_t in, int64_t out, int64_t kernel, int64_t outSize) {
  return 2.0 * static_cast<double>(in * out * kernel * kernel * outSize * outSize);
}

double linearFlops(int64_t in, int64_t out) {
  return 2.0 * static_cast<double>(in * out);
}

void addLinear(Builder& b, const std::string& name, int64_t in, int64_t out, double rows) {
  b.add(name, {tensorShape(name + ".weight", {out, in}), tensorShape(name + ".bias", {out})},
        rows * linearFlops(in, out), static_cast<double>(out));
  b.layers.back().kind = kLinearLayer;
}

// A bias-free convolution and the BatchNorm after it, as one layer named after the convolution:
// the BatchNorm's gradients are ready as soon as the convolution's backward can start. It keeps
// the convolution's output (the BatchNorm's input) and the BatchNorm's output (the ReLU runs in
// place on it).
void addConvBn(Builder& b, const std::string& conv, const std::string& bn, int64_t in, int64_t out,
               int64_t kernel, int64_t outSize) {
  b.add(conv,
        {tensorShape(conv + ".weight", {out, in, kernel, kernel}),
         tensorShape(bn + ".weight", {out}), tensorShape(bn + ".bias", {out})},
        kCnnBatch * convFlops(in, out, kernel, outSize),
        2.0 * static_cast<double>(out * outSize * outSize));
}

// torchvision resnet50 (ResNet v1.5: the stride sits in the 3x3 convolution).
ModelProfile resnet50() {
  Builder b;
  addConvBn(b, "conv1", "bn1", 3, 64, 7, kImageSize / 2);
  constexpr int kBlocks[] = {3, 4, 6, 3};
  int64_t inplanes = 64;
  int64_t size = kImageSize / 4;  // after conv1 and the max pool, both stride 2
  for (int stage = 0; stage < 4; ++stage) {
    const int64_t planes = int64_t{64} << stage;
    for (int block = 0; block < kBlocks[stage]; ++block) {
      const std::string p = fmt::format("layer{}.{}.", stage + 1, block);
      const int64_t outSize = (block == 0 && stage > 0) ? size / 2 : size;
      addConvBn(b, p + "conv1", p + "bn1", inplanes, planes, 1, size);
      addConvBn(b, p + "conv2", p + "bn2", planes, planes, 3, outSize);
      addConvBn(b, p + "conv3", p + "bn3", planes, planes * 4, 1, outSize);
      // The shortcut runs after bn3 in torchvision's forward and is registered after it too.
      if (block == 0)
        addConvBn(b, p + "downsample.0", p + "downsample.1", inplanes, planes * 4, 1, outSize);
      inplanes = planes * 4;
      size = outSize;
    }
  }
  addLinear(b, "fc", inplanes, 1000, kCnnBatch);
  return finish(std::move(b), "resnet50",
                "layer shapes: torchvision resnet50 (v1.5); times: FLOP share of a 32/298.51 s "
                "step (V100 p3.2xlarge fp32 training at batch 32, MXNet 1.2.0 perf FAQ "
                "'Training results'), backward = 2x forward; update: 5 fp32 passes over the "
                "parameters at 900 GB/s (SGD momentum)",
                kCnnBatch, kCnnBatch / kResNet50ImagesPerSecond, kSgdMomentumPasses);
}

// torchvision vgg19 (configuration "E", no BatchNorm).
ModelProfile vgg19() {
  constexpr int64_t kPool = 0;
  constexpr int64_t kConfig[] = {64,  64,  kPool, 128, 128,   kPool, 256, 256, 256, 256,  kPool,
                                 512, 512, 512,   512, kPool, 512,   512, 512, 512, kPool};
  Builder b;
  int64_t in = 3;
  int64_t size = kImageSize;
  int index = 0;  // position in `features`: conv and ReLU take one slot each, a pool one
  for (int64_t out : kConfig) {
    if (out == kPool) {
      size /= 2;
      index += 1;
      continue;
    }
    const std::string name = fmt::format("features.{}", index);
    b.add(name,
          {tensorShape(name + ".weight", {out, in, 3, 3}), tensorShape(name + ".bias", {out})},
          kCnnBatch * convFlops(in, out, 3, size),
          static_cast<double>(out * size * size));  // the ReLU runs in place on it
    in = out;
    index += 2;
  }
  // classifier: Linear, ReLU, Dropout, Linear, ReLU, Dropout, Linear.
  addLinear(b, "classifier.0", in * 7 * 7, 4096, kCnnBatch);
  addLinear(b, "classifier.3", 4096, 4096, kCnnBatch);
  addLinear(b, "classifier.6", 4096, 1000, kCnnBatch);
  const double step = kCnnBatch / kResNet50ImagesPerSecond * kVgg19OverResNet50;
  return finish(std::move(b), "vgg19",
                "layer shapes: torchvision vgg19; times: FLOP share of a step = ResNet-50's "
                "32/298.51 s (V100 fp32, MXNet 1.2.0 perf FAQ) x 147.32/103.58 (VGG-19 over "
                "ResNet-50 forward+backward, jcjohnson/cnn-benchmarks, Pascal Titan X), "
                "backward = 2x forward; update: 5 fp32 passes over the parameters at 900 GB/s "
                "(SGD momentum)",
                kCnnBatch, step, kSgdMomentumPasses);
}

// Multi-head attention with the LayerNorm after its residual (fairseq names and registration
// order). Q, K, V and output projections are d x d with bias; the K and V projections of
// encoder-decoder attention run over source tokens, as many as target tokens here.
void addAttention(Builder& b, const std::string& layer, const std::string& attention,
                  const std::string& norm, int64_t d, double tokens) {
  std::vector<TensorShape> tensors;
  for (const char* proj : {"k_proj", "v_proj", "q_proj", "out_proj"}) {
    const std::string name = fmt::format("{}{}.{}", layer, attention, proj);
    tensors.push_back(tensorShape(name + ".weight", {d, d}));
    tensors.push_back(tensorShape(name + ".bias", {d}));
  }
  tensors.push_back(tensorShape(layer + norm + ".weight", {d}));
  tensors.push_back(tensorShape(layer + norm + ".bias", {d}));
  // Per token: four projections, then Q K^T and the weighted sum of V over the sentence (all
  // heads together span d). Decoder self-attention computes the full masked square too.
  const double perToken = 4 * linearFlops(d, d) + 2 * linearFlops(kSentenceTokens, d);
  // Kept per token: Q, K, V, the heads' weighted sums, the output projection and the LayerNorm's
  // output (6d), and the attention probabilities over the sentence (heads of 64 dimensions).
  const double kept = 6.0 * static_cast<double>(d) + static_cast<double>(d / 64 * kSentenceTokens);
  b.add(layer + attention, std::move(tensors), tokens * perToken, kept);
}

void addFeedForward(Builder& b, const std::string& layer, int64_t d, int64_t dFf, double tokens) {
  b.add(layer + "ffn",
        {tensorShape(layer + "fc1.weight", {dFf, d}), tensorShape(layer + "fc1.bias", {dFf}),
         tensorShape(layer + "fc2.weight", {d, dFf}), tensorShape(layer + "fc2.bias", {d}),
         tensorShape(layer + "final_layer_norm.weight", {d}),
         tensorShape(layer + "final_layer_norm.bias", {d})},
        tokens * 2 * linearFlops(d, dFf), static_cast<double>(dFf + 2 * d));
}

// fairseq transformer_wmt_en_de with --share-all-embeddings (post-LayerNorm, sinusoidal
// positions, no final LayerNorm), for `tokens` target tokens and as many source tokens. One layer
// per attention or feed-forward block, so gradients become ready at the granularity of the
// sub-layers.
Builder transformerLayers(const TransformerShape& s, double tokens) {
  const int64_t d = s.dModel;
  Builder b;
  // The shared embedding comes first: its gradient is complete only after the last backward, the
  // source lookup's. Its own work is scaling by sqrt(d) and adding positions, on both sides.
  b.add("encoder.embed_tokens", {tensorShape("encoder.embed_tokens.weight", {s.vocab, d})},
        tokens * 2 * 2.0 * static_cast<double>(d), 2.0 * static_cast<double>(d));
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string layer = fmt::format("encoder.layers.{}.", i);
    addAttention(b, layer, "self_attn", "self_attn_layer_norm", d, tokens);
    addFeedForward(b, layer, d, s.dFf, tokens);
  }
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string layer = fmt::format("decoder.layers.{}.", i);
    addAttention(b, layer, "self_attn", "self_attn_layer_norm", d, tokens);
    addAttention(b, layer, "encoder_attn", "encoder_attn_layer_norm", d, tokens);
    addFeedForward(b, layer, d, s.dFf, tokens);
  }
  // Tied to the embedding, so no tensor of its own; ~30% of the FLOPs at this vocabulary.
  // Keeps the logits and their log-softmax.
  b.add("decoder.output_projection", {}, tokens * linearFlops(d, s.vocab),
        2.0 * static_cast<double>(s.vocab));
  return b;
}

// Transformer "base" of Vaswani et al. 2017 for WMT En-De, as fairseq implements it.
ModelProfile transformer() {
  Builder b = transformerLayers(kTransformerBase, kTransformerTokens);
  const double bigFlopsPerToken = transformerLayers(kTransformerBig, 1).totalFlops();
  const double flopsPerSecond = bigFlopsPerToken * kTransformerBigTokensPerSecond;
  const double step = b.totalFlops() / flopsPerSecond;
  return finish(std::move(b), "transformer",
                "layer shapes: Transformer base (Vaswani et al. 2017) as fairseq "
                "transformer_wmt_en_de, shared 37000-token embedding; times: FLOP share of a "
                "step at the FLOP rate of Transformer big fp32 on one V100 (7635 tokens/s, NVIDIA "
                "DeepLearningExamples PyTorch/Translation/Transformer), batch 4096 target + 4096 "
                "source tokens, sentences of 32 tokens, backward = 2x forward; update: 7 fp32 "
                "passes over the parameters at 900 GB/s (Adam)",
                kTransformerTokens, step, kAdamPasses);
}

}  // namespace

const std::vector<std::string>& builtinProfileNames() {
  static const std::vector<std::string> kNames = {"resnet50", "vgg19", "transformer"};
  return kNames;
}

ModelProfile builtinProfile(const std::string& name) {
  if (name == "resnet50") return resnet50();
  if (name == "vgg19") return vgg19();
  if (name == "transformer") return transformer();
  throw ConfigError(fmt::format("unknown built-in profile \"{}\" (built-in: {})", name,
                                fmt::join(builtinProfileNames(), ", ")),
                    {.operation = "model profile",
                     .hint = "name a built-in profile or give the path of a JSON profile"});
}

}  // namespace gradsync
