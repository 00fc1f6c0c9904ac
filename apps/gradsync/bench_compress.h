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
  std::string jsonPath;
};

// Prints one table row per method and size; returns 0. Throws ConfigError for a bad spec.
int runCompressBench(const CompressBenchOptions& options);

}  // namespace gradsync
