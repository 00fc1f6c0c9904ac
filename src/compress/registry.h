// The table of compression methods: name -> factory, with each method's parameter, options and
// defaults. One row per file in impl/. `gradsync train --compress` and `gradsync bench compress`
// read it; docs/algorithms.md describes every row.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compress/compressor.h"

namespace gradsync {

using CompressorFactory = std::unique_ptr<Compressor> (*)(const MethodArgs& args,
                                                          std::span<const TensorShape> unit);

struct MethodInfo {
  const char* name;
  const char* valueName;          // the ":value" parameter ("R", "L", "RANK", "D"), "" if none
  double defaultValue;            // used when the value is omitted
  std::vector<std::string> keys;  // accepted ",key=value" options
  bool errorFeedback;             // wrapped in the error-feedback decorator unless ",ef=off"
  bool absorbsMomentum;           // applies momentum itself: the optimizer must not (DGC)
  const char* summary;
  CompressorFactory make;  // throws ConfigError for out-of-range parameters
  // Keeps its residual itself (where it needs it: hitopk's is per shard, after the reduction
  // inside the host), reading MethodArgs::errorFeedback; never wrapped in ErrorFeedback.
  bool ownErrorFeedback = false;
};

const std::vector<MethodInfo>& compressionMethods();
// Throws ConfigError listing the valid names.
const MethodInfo& findMethod(const std::string& name);
// Whether `method` is one of those measured to lose more than 5% of held-out loss under AdamW
// on the language model, on gradients and on 1-bit Adam's momenta alike (the sparsifiers and
// the low-rank methods: docs/performance.md, "Language model: every compressor under AdamW");
// the guard's optimizer rule (guard.h) keeps them dense under Adam-family optimizers.
bool failsUnderAdam(const std::string& method);
// "none, fp16, topk:R, ..." for error messages and --help.
std::string methodChoices();

}  // namespace gradsync
