// A compression choice as written on the command line: "name[:value][,key=value...]", e.g.
// "topk:0.01", "qsgd:16,bucket=512", "powersgd:4,ef=off". The key "ef" (on|off) overrides the
// method's default use of error feedback, and "ef_decay" (0 <= β <= 1, default 1) scales the
// residual before it is added back (SparseLoCo's e <- βe + Δ); other keys are the method's own
// (registry.h).
#pragma once

#include <memory>
#include <span>
#include <string>

#include "compress/compressor.h"

namespace gradsync {

struct CompressSpec {
  std::string method = "none";
  MethodArgs args;
  bool errorFeedback = false;
  double errorFeedbackDecay = 1;     // β of ef_decay; 1 is plain error feedback
  bool compressedAllreduce = false;  // ,allreduce=on

  // Throws ConfigError naming `what` and the valid forms; also builds one compressor for a
  // small probe tensor so that out-of-range values fail here, at startup.
  static CompressSpec parse(const std::string& text, const std::string& what = "--compress");
  std::string toString() const;
  bool dense() const { return method == "none"; }
};

// The compressor for one unit, in the compressed all-reduce when the spec asks for it (with
// server error feedback when it has error feedback), wrapped in error feedback when the spec
// asks for it; null for "none". Methods that absorb momentum read it from spec.args.momentum.
std::unique_ptr<Compressor> makeCompressor(const CompressSpec& spec,
                                           std::span<const TensorShape> unit);

}  // namespace gradsync
