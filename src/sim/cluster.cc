#include "sim/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/hierarchical.h"
#include "gradsync/topology.h"

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

bool hierarchicalApplies(const ClusterSpec& cluster) {
  return cluster.hosts() > 1 && cluster.gpusPerHost > 1 &&
         cluster.workers % cluster.gpusPerHost == 0;
}

size_t shardElements(const ClusterSpec& cluster, size_t elements) {
  return blockOf(elements, cluster.gpusPerHost, 0).size();  // the first block is the largest
}

namespace {

// One ring pass inside a host over `elements`.
double localPassSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes) {
  const int g = cluster.gpusPerHost;
  if (g == 1 || elements == 0) return 0;
  const size_t block = blockOf(elements, g, 0).size() * elementBytes;
  return (g - 1) * transferSeconds(cluster, 0, 1, block);
}

// One step across hosts in which each of a host's G workers sends `bytes` to another host: the
// G messages share the NIC.
double crossStepSeconds(const ClusterSpec& cluster, size_t bytes) {
  return cluster.latency +
         static_cast<double>(cluster.gpusPerHost) * static_cast<double>(bytes) / cluster.bandwidth;
}

}  // namespace

double hierarchicalAllreduceSeconds(const ClusterSpec& cluster, size_t elements,
                                    size_t elementBytes) {
  if (cluster.workers == 1 || elements == 0) return 0;
  const int hosts = cluster.hosts();
  const size_t shard = shardElements(cluster, elements);
  const size_t block = blockOf(shard, hosts, 0).size() * elementBytes;
  const double cross = shard == 0 ? 0 : 2.0 * (hosts - 1) * crossStepSeconds(cluster, block);
  return 2 * localPassSeconds(cluster, elements, elementBytes) + cross;
}

double denseAllreduceSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes) {
  const double ring = ringAllreduceSeconds(cluster, elements, elementBytes);
  if (!hierarchicalApplies(cluster)) return ring;
  const LinkModel links{.intraBytesPerSec = cluster.localBandwidth,
                        .intraLatencySec = cluster.localLatency,
                        .intraRoundTripMinBytes = SIZE_MAX,
                        .interBytesPerSec = cluster.bandwidth,
                        .interLatencySec = cluster.latency};
  const Topology topology = Topology::uniform(cluster.workers, cluster.gpusPerHost);
  // The runtime's choice between these two (chooseAllreduce); the simulated clusters' ranks
  // are accelerators, whose collectives (NCCL's) do not take recursive doubling.
  const size_t bytes = elements * elementBytes;
  return hierarchicalAllreduceSeconds(topology, bytes, links) <
                 ringAllreduceSeconds(topology, bytes, links)
             ? hierarchicalAllreduceSeconds(cluster, elements, elementBytes)
             : ring;
}

double denseAllreduceBytes(const ClusterSpec& cluster, size_t elements, size_t elementBytes) {
  const double p = cluster.workers, g = cluster.gpusPerHost, n = cluster.hosts();
  const double d = static_cast<double>(elements * elementBytes);
  if (denseAllreduceSeconds(cluster, elements, elementBytes) ==
      ringAllreduceSeconds(cluster, elements, elementBytes)) {
    return 2 * (p - 1) / p * d;
  }
  return 2 * (g - 1) / g * d + 2 * (n - 1) / n * d / g;
}

bool regular(const ClusterSpec& cluster) {
  return cluster.workers % cluster.gpusPerHost == 0;
}

double hierarchicalSparseSeconds(const ClusterSpec& cluster, size_t elements, size_t listBytes) {
  if (!regular(cluster)) return allgathervSeconds(cluster, listBytes);
  if (elements == 0) return 0;
  const double cross = (cluster.hosts() - 1) * crossStepSeconds(cluster, listBytes);
  return 2 * localPassSeconds(cluster, elements, sizeof(float)) + cross;
}

double hierarchicalSparseBytes(const ClusterSpec& cluster, size_t elements, size_t listBytes) {
  const double list = static_cast<double>(listBytes);
  if (!regular(cluster)) return (cluster.workers - 1) * list;
  const double g = cluster.gpusPerHost;
  return 2 * (g - 1) / g * static_cast<double>(elements * sizeof(float)) +
         (cluster.hosts() - 1) * list;
}

ScheduleSpec withLinkSlice(ScheduleSpec schedule, const ClusterSpec& cluster) {
  if (schedule.kind != ScheduleSpec::Kind::kP3 || schedule.sliceGiven) return schedule;
  const bool network = cluster.hosts() > 1;
  schedule.sliceElements =
      p3SliceForLink(cluster.workers, network ? cluster.latency : cluster.localLatency,
                     network ? cluster.bandwidth : cluster.localBandwidth);
  return schedule;
}

}  // namespace gradsync::sim
