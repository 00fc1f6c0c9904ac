// Which compression each tensor gets (docs/algorithms.md, "Choosing what to compress"): the
// --compress spec, except tensors below a minimum size (biases and norms: compressing them
// saves little and costs accuracy) and tensors matched by a per-layer override; and dense
// steps first (warm-up), as most compression papers do.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/spec.h"

namespace gradsync {

struct CompressionConfig {
  std::string spec = "none";           // --compress
  std::vector<std::string> overrides;  // --compress-override GLOB=SPEC (first match wins)
  size_t minElements = 1024;           // --compress-min-elements: smaller tensors go dense
  // --compress-warmup: dense steps before compressing; kAutoWarmup = a tenth of the first epoch,
  // which only a trainer knows (resolveWarmupSteps).
  int64_t warmupSteps = 0;
  // --compress-warmup-codec: how the warm-up's steps send the units compressed after it: none
  // (float32, the default), or the near-lossless fp16 or int8 (their ring all-reduces).
  std::string warmupCodec = "none";
  // --guard on|off: the compression guardrail (compress/guard.h) makes a compressed unit dense when
  // its error-feedback residual or its sent bursts grow past documented thresholds.
  bool guard = true;
  // --compress-momentum: 1-bit Adam (SyncOptions::compressMomentum).
  bool momentum = false;
  // The optimizer is Adam or AdamW: the guard's optimizer rule applies (guard.h, GuardedUnit).
  bool adamFamily = false;
};

struct CompressionPlan {
  std::vector<CompressSpec> perTensor;  // by registration index; dense() = not compressed
  int64_t warmupSteps = 0;
  CompressSpec warmupCodec;  // none, fp16 or int8: the warm-up's steps of compressed tensors

  bool any() const;
  // Whether tensor t's method applies the optimizer's momentum itself (DGC), so the optimizer
  // must update that tensor without momentum.
  bool absorbsMomentum(size_t t) const;
  // Equal for tensors compressed alike (the schedule never fuses different groups).
  std::vector<int> groups() const;
};

// `gradsync train`'s default warm-up (docs/algorithms.md, "Defaults without an expert").
inline constexpr int64_t kAutoWarmup = -1;

// The dense steps a run of `stepsPerEpoch` steps per epoch begins with: config.warmupSteps, or
// for kAutoWarmup a tenth of the first epoch (rounded, at least 1) when anything is compressed
// and 0 when nothing is. Pure; throws ConfigError for a negative count other than kAutoWarmup.
int64_t resolveWarmupSteps(const CompressionConfig& config, uint64_t stepsPerEpoch);
// `config` with kAutoWarmup resolved (resolveWarmupSteps) and, under it, the warm-ups methods
// have of their own sized to the epoch where the user gave none: DGC's sparsity ramp
// (`dgc:R,warmup=N`, in the spec and the overrides) over the first half of the first epoch.
// Any other config is returned unchanged. Pure; throws ConfigError as resolveWarmupSteps and for
// a malformed spec.
CompressionConfig resolveAutoWarmups(CompressionConfig config, uint64_t stepsPerEpoch);
// --compress-warmup's text: "auto" (kAutoWarmup) or a count of steps >= 0, both ways. The parser
// throws ConfigError naming the flag and the choices.
int64_t parseWarmupFlag(const std::string& text);
std::string warmupFlagText(int64_t warmupSteps);

// Throws ConfigError for a malformed spec or override, naming it, and for a warm-up codec other
// than none, fp16 and int8. `momentum` is passed to methods that absorb it.
CompressionPlan planCompression(const CompressionConfig& config,
                                const std::vector<TensorShape>& tensors, double momentum);

}  // namespace gradsync
