// The --metrics JSON file (docs/metrics.md describes every field). Torch-free.
#pragma once

#include <string>

#include "torch/trainer.h"

namespace gradsync {

// Writes atomically (temporary file + rename); throws ConfigError if the path is not writable.
void writeMetrics(const std::string& path, const TrainOptions& options, int workers,
                  const TrainResult& result);

}  // namespace gradsync
