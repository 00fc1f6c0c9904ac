// The model and cluster flags that `gradsync simulate` and `gradsync tune` share: which profile,
// how many workers on which links, and how much slower the device is.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "sim/cluster.h"
#include "sim/model_profile.h"

namespace gradsync {

// No message is free: a TCP message between hosts of one datacenter network takes 10-50 us
// one way through the kernels' stacks (RDMA 2-5 us), one between devices of a host a few us.
// Without these a schedule of thousands of small messages would look free.
inline constexpr const char* kDefaultLatency = "25us";
inline constexpr const char* kDefaultLocalLatency = "5us";

struct SimModelFlags {
  std::string profile;  // --model-profile: a built-in's name or a JSON file
  std::string bandwidth = "10gbit";
  std::string latency;  // empty: kDefaultLatency
  std::string localBandwidth = "100gbit";
  std::string localLatency;  // empty: kDefaultLocalLatency
  double computeScale = 1;
  std::string codecNsPerElement;  // empty: codec_costs.h's default
  sim::ClusterSpec cluster;       // workers and gpus per host; the rest parsed from the text above
};

// Registers --model-profile (required), --workers, --gpus-per-host, --bandwidth, --latency,
// --local-bandwidth, --local-latency, --compute-scale and --codec-ns-per-element on `cmd`, writing
// into `flags`.
void addSimModelFlags(CLI::App* cmd, SimModelFlags& flags);
// The profile, its compute times scaled by --compute-scale. Throws ConfigError naming the flag.
ModelProfile loadScaledProfile(const SimModelFlags& flags);
// The cluster with its rates and latencies parsed (the defaults where not given). Throws
// ConfigError naming the flag.
sim::ClusterSpec parseCluster(const SimModelFlags& flags);
// Whether --latency was left to its default (tune then hedges against other latencies).
inline bool latencyDefaulted(const SimModelFlags& flags) {
  return flags.latency.empty();
}
// "latency: ..." saying which latencies were defaulted, for the run's output; empty when both
// were given.
std::string latencyNote(const SimModelFlags& flags);
// Writes `text` to `path`; throws ConfigError when it cannot.
void writeTextFile(const std::string& path, const std::string& text);

}  // namespace gradsync
