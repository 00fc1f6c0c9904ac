// gradsync bench compress: encode and decode throughput of every compression method, beside
// naive references (a full-precision copy, exact top-k by std::nth_element) and the top-k
// selection kernels alone. One process, one thread: compression is per-rank compute.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

struct CompressBenchOptions {
  std::vector<std::string> methods;  // specs such as "topk:0.01"; empty = every method's default
  std::vector<size_t> sizes = {size_t{1} << 20, size_t{4} << 20, size_t{16} << 20,
                               size_t{64} << 20};  // elements
  int iters = 3;                                   // timed exchanges per size (after one warm-up)
  // Instruction sets to measure, each in turn (common/simd.h): "all" (every one this CPU
  // supports), one of scalar|avx2|avx512, or "" for the active one.
  std::string simd;
  std::string jsonPath;
};

// Encode and decode seconds per element of `spec` through its exchange on a world of one, on
// kCodecTimingElements values of gradient-like data (the best of `iters` after a warm-up), on
// the active instruction set: what `gradsync simulate` and `tune` charge. Blocking; single
// thread; throws ConfigError for a bad spec.
struct CodecTiming {
  double encodeSecondsPerElement = 0;
  double decodeSecondsPerElement = 0;
};
inline constexpr size_t kCodecTimingElements = size_t{1} << 20;
CodecTiming measureCodec(const std::string& spec, int iters = 3);

// Prints one table row per instruction set, size and method; returns 0. Throws ConfigError for
// a bad spec or an instruction set this CPU lacks.
int runCompressBench(const CompressBenchOptions& options);

}  // namespace gradsync
