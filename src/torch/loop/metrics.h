// The --metrics JSON file (docs/metrics.md describes every field). Torch-free.
#pragma once

#include <string>

#include "torch/loop/options.h"

namespace gradsync {

// Writes atomically (temporary file + rename); throws ConfigError if the path is not writable.
void writeMetrics(const std::string& path, const TrainOptions& options, int workers,
                  const TrainResult& result);
// `text` into `path` atomically (a temporary file, then rename), so a reader never sees half a
// file: every --metrics file is written through it. Throws ConfigError naming the path.
void writeMetricsFile(const std::string& path, const std::string& text);

}  // namespace gradsync
