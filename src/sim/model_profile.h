// A model as the simulator sees it (docs/simulator.md, "Model profiles"): its layers in forward
// order, each with its parameter tensors and the compute time of its forward and backward for
// one training step on one device. Profiles come built in (published layer shapes, compute
// times for a stated GPU), from `gradsync profile` (measured here), or from a JSON file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor_shape.h"

namespace gradsync {

struct LayerProfile {
  std::string name;
  std::vector<TensorShape> tensors;  // its parameters, in registration order (may be none)
  double forwardSeconds = 0;
  // From the end of the previous layer's backward (in backward order) until this layer's
  // gradients are all ready: when the gradient engine sees them.
  double backwardSeconds = 0;
  // "linear" for a fully-connected layer (y = x W^T + b: a weight of out x in, then maybe a bias
  // of out), which sharded's FC exchange may take; empty for any other.
  std::string kind;
  // Bytes the layer's forward keeps for its backward, per sample (its outputs, fp32), held from
  // the start of its forward until the end of its backward: the device-memory timeline's
  // activations (sim/wave_memory.h). 0 when the profile does not say (JSON "activation_bytes").
  double activationBytesPerSample = 0;
};
inline constexpr const char* kLinearLayer = "linear";

struct ModelProfile {
  std::string name;
  std::string device;  // where the times hold, e.g. "NVIDIA V100 (fp32)"
  std::string source;  // how they were obtained (paper, measurement command)
  // Compression runs on the host's CPU beside the step (a profile of CPU training, as `gradsync
  // profile` writes): simulate and tune then charge the codecs' cost measured on this machine.
  // False for accelerator profiles, whose codecs are kernels (JSON "codecs_on_cpu"; absent:
  // true when `source` is a `gradsync profile` command).
  bool codecsOnCpu = false;
  int64_t batchSize = 0;             // samples per device per step (a linear layer's input rows)
  std::vector<LayerProfile> layers;  // in forward order
  // The optimizer step over every parameter, when the schedule leaves it to after communication
  // (fifo, wfbp, fusion); p3, sharded and the parameter server update inside communication.
  double updateSeconds = 0;

  // Every layer's tensors, in registration (forward) order.
  std::vector<TensorShape> tensors() const;
  size_t parameterCount() const;
  double forwardSeconds() const;
  double backwardSeconds() const;
};

// Multiplies every compute time (forward, backward, update) by `factor` > 0: the same model on
// a device `factor` times slower. Throws ConfigError for a factor <= 0.
void scaleComputeTimes(ModelProfile& profile, double factor);

// JSON text (the format of docs/simulator.md) and back. profileFromJson throws ConfigError
// naming `origin` and the offending field for malformed or inconsistent input.
std::string profileToJson(const ModelProfile& profile);
ModelProfile profileFromJson(const std::string& text, const std::string& origin);

// The shipped profiles: "resnet50", "vgg19", "transformer".
const std::vector<std::string>& builtinProfileNames();
// Throws ConfigError listing the names.
ModelProfile builtinProfile(const std::string& name);
// A built-in name, or the path of a JSON profile. Throws ConfigError (unknown name, unreadable
// or malformed file).
ModelProfile loadModelProfile(const std::string& nameOrPath);

}  // namespace gradsync
