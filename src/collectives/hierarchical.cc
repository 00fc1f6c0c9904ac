// Hierarchical allreduce (gradsync/hierarchical.h): ring collectives on a host's local group and
// on a cross group, through GroupTransports over the one transport.
#include "gradsync/hierarchical.h"

#include <fmt/format.h>

#include "collectives/guard.h"
#include "collectives/reduce.h"
#include "gradsync/error.h"
#include "transport/group_transport.h"

namespace gradsync {

LinkModel LinkModel::of(const TransportOptions& options, Topology::HostLinks hostLinks) {
  LinkModel links;
  if (hostLinks == Topology::HostLinks::kTcp) {
    links.intraBytesPerSec = kLoopbackBytesPerSec;
    links.intraLatencySec = kLoopbackLatencySec;
  }
  if (options.bandwidthBytesPerSec > 0) links.interBytesPerSec = options.bandwidthBytesPerSec;
  if (options.latency.count() > 0) links.interLatencySec = options.latency.count() * 1e-6;
  return links;
}

RingLink ringLinkOf(const Transport& transport) {
  const Topology* topology = transport.topology();
  if (topology == nullptr) {
    const LinkModel links = LinkModel::of(transport.options());
    return {links.interLatencySec, links.interBytesPerSec};
  }
  const LinkModel links = LinkModel::of(transport.options(), topology->hostLinks());
  if (topology->hosts() > 1) return {links.interLatencySec, links.interBytesPerSec};
  return {links.intraLatencySec, links.intraBytesPerSec};
}

bool hierarchicalApplies(const Topology& topology) {
  return topology.regular() && topology.hosts() >= 2 && topology.ranksPerHost() >= 2;
}

// A ring step moves d/P bytes on every link at once; the slowest link sets its time: a NIC (one
// flow each way per host, ranks being consecutive on their host) once there are two hosts.
double ringAllreduceSeconds(const Topology& topology, size_t bytes, const LinkModel& links) {
  const double p = topology.size();
  if (p < 2) return 0;
  const bool crossesHosts = topology.hosts() > 1;
  const double latency = crossesHosts ? links.interLatencySec : links.intraLatencySec;
  const double bandwidth = crossesHosts ? links.interBytesPerSec : links.intraBytesPerSec;
  return 2 * (p - 1) * (latency + static_cast<double>(bytes) / p / bandwidth);
}

// The n cross groups share each host's NIC: each of their N-1 steps per phase moves d/(nN)
// bytes per flow at B/n, so d/(N B) per step, as if one flow carried d/N.
double hierarchicalAllreduceSeconds(const Topology& topology, size_t bytes,
                                    const LinkModel& links) {
  const double n = topology.ranksPerHost(), hosts = topology.hosts();
  const double d = static_cast<double>(bytes);
  const double intra = 2 * (n - 1) * (links.intraLatencySec + d / n / links.intraBytesPerSec);
  const double inter =
      2 * (hosts - 1) * (links.interLatencySec + d / hosts / links.interBytesPerSec);
  return intra + inter;
}

// log2 p2 swaps, and a fold and an unfold where P is not a power of two: each message carries the
// whole buffer, each swap and the fold add one.
double recursiveDoublingAllreduceSeconds(const Topology& topology, size_t bytes,
                                         const LinkModel& links) {
  const int p = topology.size();
  if (p < 2) return 0;
  int swaps = 0, p2 = 1;
  for (; p2 * 2 <= p; p2 *= 2) ++swaps;
  const int folds = p2 < p ? 1 : 0;
  const bool crossesHosts = topology.hosts() > 1;
  const double latency = crossesHosts ? links.interLatencySec : links.intraLatencySec;
  const double bandwidth = crossesHosts ? links.interBytesPerSec : links.intraBytesPerSec;
  const double d = static_cast<double>(bytes);
  return (swaps + 2 * folds) * (latency + d / bandwidth) +
         (swaps + folds) * d / links.reduceBytesPerSec;
}

// Ties go to the ring, then to recursive doubling: the simpler pattern where the model cannot
// tell them apart.
AllreduceAlgorithm chooseAllreduce(const Topology& topology, size_t bytes, const LinkModel& links) {
  AllreduceAlgorithm best = AllreduceAlgorithm::kRing;
  double fastest = ringAllreduceSeconds(topology, bytes, links);
  if (const double s = recursiveDoublingAllreduceSeconds(topology, bytes, links); s < fastest) {
    best = AllreduceAlgorithm::kRecursiveDoubling;
    fastest = s;
  }
  if (hierarchicalApplies(topology) &&
      hierarchicalAllreduceSeconds(topology, bytes, links) < fastest) {
    best = AllreduceAlgorithm::kHierarchical;
  }
  return best;
}

void hierarchicalAllreduce(Transport& transport, const Topology& topology, std::span<float> data,
                           ReduceOp op, const CollectiveOptions& options) {
  if (topology.size() != transport.size() || !topology.regular()) {
    throw ConfigError(
        fmt::format("hierarchical allreduce needs the same number of ranks on every host, over "
                    "the transport's {} ranks: not {}",
                    transport.size(), topology.describe()),
        {.rank = transport.rank(), .operation = "allreduce (hierarchical)"});
  }
  CollectiveOptions inner = options;
  inner.algorithm = AllreduceAlgorithm::kRing;
  // The inner collectives name ranks of their groups; this names the job's.
  detail::runCollective("allreduce (hierarchical)", transport, [&] {
    const int rank = transport.rank();
    GroupTransport local(transport, topology.localGroup(rank));
    GroupTransport cross(transport, topology.crossGroup(rank));
    reduceScatter(local, data, ReduceOp::kSum, inner);
    const Block own = blockOf(data.size(), local.size(), local.rank());
    std::span<float> block = data.subspan(own.begin, own.size());
    allreduce(cross, block, ReduceOp::kSum, inner);
    if (op == ReduceOp::kAverage) scale(block.data(), block.size(), 1.0f / transport.size());
    allgather(local, data, inner);
  });
}

}  // namespace gradsync
