#include "sim/cluster.h"

#include <fmt/format.h>

#include <algorithm>

#include "gradsync/collectives.h"
#include "gradsync/error.h"

namespace gradsync::sim {

void ClusterSpec::validate() const {
  if (workers < 1) throw ConfigError(fmt::format("--workers must be at least 1, not {}", workers));
  if (gpusPerHost < 1)
    throw ConfigError(fmt::format("--gpus-per-host must be at least 1, not {}", gpusPerHost));
  if (!(bandwidth > 0) || !(localBandwidth > 0))
    throw ConfigError("--bandwidth and --local-bandwidth must be positive");
  if (!(latency >= 0) || !(localLatency >= 0))
    throw ConfigError("--latency and --local-latency must not be negative");
}

std::string ClusterSpec::describe() const {
  return fmt::format("{} workers ({} hosts x {}), {:g} Gbit/s, {:g} us between hosts", workers,
                     hosts(), gpusPerHost, bandwidth * 8 / 1e9, latency * 1e6);
}

double transferSeconds(const ClusterSpec& cluster, int from, int to, size_t bytes) {
  if (cluster.hostOf(from) == cluster.hostOf(to))
    return cluster.localLatency + static_cast<double>(bytes) / cluster.localBandwidth;
  return cluster.latency + static_cast<double>(bytes) / cluster.bandwidth;
}

namespace {

// One ring step in which every rank sends `bytes` to its right neighbour: as slow as the
// slowest kind of link the ring uses (local links exist when a host has several workers,
// network links when there are several hosts).
double ringStepSeconds(const ClusterSpec& cluster, size_t bytes) {
  double step = 0;
  if (cluster.hosts() > 1) step = transferSeconds(cluster, 0, cluster.gpusPerHost, bytes);
  if (cluster.gpusPerHost > 1 && cluster.workers > 1)
    step = std::max(step, transferSeconds(cluster, 0, 1, bytes));
  return step;
}

// One ring pass (n - 1 steps) over the blocks of blockOf: the largest block sets each step.
double ringPassSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes) {
  const int n = cluster.workers;
  if (n == 1 || elements == 0) return 0;
  const size_t largest =
      std::max(blockOf(elements, n, 0).size(), blockOf(elements, n, n - 1).size()) * elementBytes;
  return (n - 1) * ringStepSeconds(cluster, largest);
}

}  // namespace

double ringAllreduceSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes) {
  return 2 * ringPassSeconds(cluster, elements, elementBytes);  // reduce-scatter + allgather
}

double reduceScatterSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes) {
  return ringPassSeconds(cluster, elements, elementBytes);
}

double allgatherSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes) {
  return ringPassSeconds(cluster, elements, elementBytes);
}

double allgathervSeconds(const ClusterSpec& cluster, size_t bytesPerRank) {
  if (cluster.workers == 1 || bytesPerRank == 0) return 0;
  return (cluster.workers - 1) * ringStepSeconds(cluster, bytesPerRank);
}

double alltoallSeconds(const ClusterSpec& cluster, size_t bytesPerPeer) {
  const int p = cluster.workers;
  if (p == 1 || bytesPerPeer == 0) return 0;
  const double bytes = static_cast<double>(bytesPerPeer);
  const int local = std::min(cluster.gpusPerHost, p);  // ranks on rank 0's host
  double seconds = 0;
  if (p > local) {
    seconds = cluster.latency + local * (p - local) * bytes / cluster.bandwidth;
  }
  if (local > 1) {
    seconds =
        std::max(seconds, cluster.localLatency + (local - 1) * bytes / cluster.localBandwidth);
  }
  return seconds;
}

// Round j of the merge sends from rank 2^j to rank 0 (every pair of that round alike); the
// broadcast back sends the same lists down the same edges, one round at a time.
double treeSeconds(const ClusterSpec& cluster, size_t listBytes) {
  double seconds = 0;
  for (int distance = 1; distance < cluster.workers; distance *= 2)
    seconds += 2 * transferSeconds(cluster, distance, 0, listBytes);
  return seconds;
}

}  // namespace gradsync::sim
