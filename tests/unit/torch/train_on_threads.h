// Runs training on rank threads of one process, the way the torch tests need it.
#pragma once

#include <string>
#include <vector>

#include "sim/model_profile.h"
#include "support/transports.h"
#include "torch/train/trainer.h"

namespace gradsync::testing {

// Trains on `workers` rank threads; returns rank 0's result. Rethrows any rank's failure.
TrainResult train(int workers, TrainOptions options, TransportKind kind = TransportKind::kLoopback);

// Bytes that every rank sent, split by whether the peer shares the sender's host (the
// transport's topology; every rank its own host without one). Payloads only.
struct HostTraffic {
  uint64_t inside = 0, across = 0;
};
// train(), with every rank's sends added to `traffic` (a view of each rank's transport that
// changes nothing else: the topology passes through).
TrainResult train(int workers, TrainOptions options, TransportKind kind, HostTraffic& traffic);

// A few steps of the mlp on a small synthetic set: the trainer tests' starting point.
TrainOptions quickOptions();

// TrainOptions::compute for emulated devices running `profile`: writes it as JSON under the
// temporary directory (scratchPath(suite, profile.name)) and returns "emulate:PATH".
std::string emulatedCompute(const ModelProfile& profile, const std::string& suite);

// An empty path under the temporary directory, unique to this process: gradsync-SUITE-PID-NAME
// (removed first if it exists).
std::string scratchPath(const std::string& suite, const std::string& name);

// The largest |a - b| / max(|a|, |b|, 0.01) over the elements (the sizes must match).
double maxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b);

// `name` with every character but letters and digits replaced by '_' (gtest parameter names).
std::string testName(std::string name);

}  // namespace gradsync::testing
