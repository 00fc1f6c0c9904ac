#include "sim_flags.h"

#include <fstream>

#include <fmt/format.h>

#include "common/units.h"
#include "gradsync/error.h"

namespace gradsync {

void addSimModelFlags(CLI::App* cmd, SimModelFlags& f) {
  cmd->add_option("--model-profile", f.profile, "resnet50 | vgg19 | transformer | FILE.json")
      ->required();
  cmd->add_option("--workers", f.cluster.workers, "devices in the job")->capture_default_str();
  cmd->add_option("--gpus-per-host", f.cluster.gpusPerHost, "devices sharing a host's NIC")
      ->capture_default_str();
  cmd->add_option("--bandwidth", f.bandwidth, "per host NIC, each way, e.g. 25gbit")
      ->capture_default_str();
  cmd->add_option("--latency", f.latency,
                  fmt::format("per message between hosts, e.g. 5us (default {})", kDefaultLatency));
  cmd->add_option("--local-bandwidth", f.localBandwidth, "between devices of a host")
      ->capture_default_str();
  cmd->add_option("--local-latency", f.localLatency,
                  fmt::format("between devices of a host (default {})", kDefaultLocalLatency));
  cmd->add_option("--compute-scale", f.computeScale,
                  "multiply the profile's compute times (a device this many times slower)")
      ->capture_default_str();
  cmd->add_option("--codec-ns-per-element", f.codecNsPerElement,
                  "encode + decode time per compressed element, every method (0: free; default: "
                  "measured here for profiles of CPU training, free for accelerators)");
}

ModelProfile loadScaledProfile(const SimModelFlags& f) {
  ModelProfile profile = loadModelProfile(f.profile);
  scaleComputeTimes(profile, f.computeScale);
  return profile;
}

sim::ClusterSpec parseCluster(const SimModelFlags& f) {
  sim::ClusterSpec cluster = f.cluster;
  cluster.bandwidth = parseBandwidth(f.bandwidth, "--bandwidth");
  cluster.latency =
      parseDurationSeconds(f.latency.empty() ? kDefaultLatency : f.latency, "--latency");
  cluster.localBandwidth = parseBandwidth(f.localBandwidth, "--local-bandwidth");
  cluster.localLatency = parseDurationSeconds(
      f.localLatency.empty() ? kDefaultLocalLatency : f.localLatency, "--local-latency");
  cluster.validate();
  return cluster;
}

std::string latencyNote(const SimModelFlags& f) {
  if (!f.latency.empty() && !f.localLatency.empty()) return "";
  std::string defaulted;
  if (f.latency.empty()) defaulted = fmt::format("{} between hosts", kDefaultLatency);
  if (f.localLatency.empty()) {
    if (!defaulted.empty()) defaulted += ", ";
    defaulted += fmt::format("{} within a host", kDefaultLocalLatency);
  }
  return fmt::format("latency per message: {} (defaults: --latency and --local-latency set them)",
                     defaulted);
}

void writeTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw ConfigError(fmt::format("cannot write {}", path));
}

}  // namespace gradsync
