// Runs training on rank threads of one process, the way the torch tests need it.
#pragma once

#include <string>
#include <vector>

#include "sim/model_profile.h"
#include "support/transports.h"
#include "torch/trainer.h"

namespace gradsync::testing {

// Trains on `workers` rank threads; returns rank 0's result. Rethrows any rank's failure.
TrainResult train(int workers, TrainOptions options, TransportKind kind = TransportKind::kLoopback);

// A few steps of the mlp on a small synthetic set: the trainer tests' starting point.
TrainOptions quickOptions();

// TrainOptions::compute for emulated devices running `profile`: writes it as JSON under the
// temporary directory (scratchDir(suite, profile.name)) and returns "emulate:PATH".
std::string emulatedCompute(const ModelProfile& profile, const std::string& suite);

// An empty path under the temporary directory, unique to this process: gradsync-SUITE-PID-NAME
// (removed first if it exists).
std::string scratchDir(const std::string& suite, const std::string& name);

// The largest |a - b| / max(|a|, |b|, 0.01) over the elements (the sizes must match).
double maxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace gradsync::testing
