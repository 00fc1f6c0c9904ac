// The model and cluster flags that `gradsync simulate` and `gradsync tune` share: which profile,
// how many workers on which links, and how much slower the device is.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "sim/cluster.h"
#include "sim/model_profile.h"

namespace gradsync {

struct SimModelFlags {
  std::string profile;  // --model-profile: a built-in's name or a JSON file
  std::string bandwidth = "10gbit";
  std::string latency = "0";
  std::string localBandwidth = "100gbit";
  std::string localLatency = "0";
  double computeScale = 1;
  double codecNsPerElement = 0;  // --codec-ns-per-element
  sim::ClusterSpec cluster;      // workers and gpus per host; the rest parsed from the text above
};

// Registers --model-profile (required), --workers, --gpus-per-host, --bandwidth, --latency,
// --local-bandwidth, --local-latency, --compute-scale and --codec-ns-per-element on `cmd`, writing
// into `flags`.
void addSimModelFlags(CLI::App* cmd, SimModelFlags& flags);
// The profile, its compute times scaled by --compute-scale. Throws ConfigError naming the flag.
ModelProfile loadScaledProfile(const SimModelFlags& flags);
// The cluster with its rates and latencies parsed. Throws ConfigError naming the flag.
sim::ClusterSpec parseCluster(const SimModelFlags& flags);
// Writes `text` to `path`; throws ConfigError when it cannot.
void writeTextFile(const std::string& path, const std::string& text);

}  // namespace gradsync
