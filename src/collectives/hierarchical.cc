// Hierarchical allreduce (gradsync/hierarchical.h): ring collectives on a host's local group and
// on a cross group, through GroupTransports over the one transport.
#include "gradsync/hierarchical.h"

#include <algorithm>
#include <cstdint>

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
    links.intraRoundTripMinBytes = SIZE_MAX;
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

namespace {

// One message of `bytes` on a NIC, or inside a host (where shared memory's single-copy path pays
// its acknowledgement's latency).
double messageSeconds(const LinkModel& links, bool crossesHosts, double bytes) {
  if (crossesHosts) return links.interLatencySec + bytes / links.interBytesPerSec;
  const double acknowledgement =
      bytes >= static_cast<double>(links.intraRoundTripMinBytes) ? links.intraLatencySec : 0;
  return links.intraLatencySec + acknowledgement + bytes / links.intraBytesPerSec;
}

// log2 of the largest power of two <= p.
int doublingSteps(int p) {
  int steps = 0;
  for (int p2 = 2; p2 <= p; p2 *= 2) ++steps;
  return steps;
}

struct Pick {
  AllreduceAlgorithm algorithm;
  double seconds;
};

// The fastest flat algorithm by the model. Ties go to the ring, then to recursive doubling: the
// simpler pattern where the model cannot tell them apart.
Pick fastestFlat(const Topology& topology, size_t bytes, const LinkModel& links) {
  Pick best{AllreduceAlgorithm::kRing, ringAllreduceSeconds(topology, bytes, links)};
  if (const double s = recursiveDoublingAllreduceSeconds(topology, bytes, links);
      s < best.seconds) {
    best = {AllreduceAlgorithm::kRecursiveDoubling, s};
  }
  if (const double s = halvingDoublingAllreduceSeconds(topology, bytes, links); s < best.seconds) {
    best = {AllreduceAlgorithm::kHalvingDoubling, s};
  }
  return best;
}

// A cross group's allreduce of its block among the N hosts. The n groups share each host's NIC,
// so each is charged as a flat allreduce over a NIC of B/n (for the ring: N-1 steps per phase of
// d/(nN) bytes per flow at B/n, d/(N B) a step). Every member of a group holds a block of the
// same size, so all pick the same algorithm.
Pick crossGroupPick(const Topology& topology, size_t blockBytes, const LinkModel& links) {
  LinkModel shared = links;
  shared.interBytesPerSec /= topology.ranksPerHost();
  return fastestFlat(Topology::flat(topology.hosts()), blockBytes, shared);
}

}  // namespace

// A ring step moves d/P bytes on every link at once; the slowest link sets its time: a NIC (one
// flow each way per host, ranks being consecutive on their host) once there are two hosts.
double ringAllreduceSeconds(const Topology& topology, size_t bytes, const LinkModel& links) {
  const double p = topology.size();
  if (p < 2) return 0;
  return 2 * (p - 1) * messageSeconds(links, topology.hosts() > 1, static_cast<double>(bytes) / p);
}

double hierarchicalAllreduceSeconds(const Topology& topology, size_t bytes,
                                    const LinkModel& links) {
  const int n = topology.ranksPerHost();
  const double intra = 2 * (n - 1) * messageSeconds(links, false, static_cast<double>(bytes) / n);
  return intra + crossGroupPick(topology, bytes / n, links).seconds;
}

// log2 p2 swaps, and a fold and an unfold where P is not a power of two: each message carries the
// whole buffer, each swap and the fold add one.
double recursiveDoublingAllreduceSeconds(const Topology& topology, size_t bytes,
                                         const LinkModel& links) {
  const int p = topology.size();
  if (p < 2) return 0;
  const int swaps = doublingSteps(p), folds = (1 << swaps) < p ? 1 : 0;
  const double d = static_cast<double>(bytes);
  return (swaps + 2 * folds) * messageSeconds(links, topology.hosts() > 1, d) +
         (swaps + folds) * d / links.reduceBytesPerSec;
}

// Messages of 1/2, 1/4, ... of the buffer and back (2 (p2 - 1) / p2 of it in all), the halving's
// additions of (p2 - 1) / p2 of it, waited for as recursive doubling's are; a fold and an
// unfold of the whole buffer where P is not a power of two.
double halvingDoublingAllreduceSeconds(const Topology& topology, size_t bytes,
                                       const LinkModel& links) {
  const int p = topology.size();
  if (p < 2) return 0;
  const int steps = doublingSteps(p), p2 = 1 << steps;
  const bool crossesHosts = topology.hosts() > 1;
  const double d = static_cast<double>(bytes);
  double seconds = (p2 - 1.0) / p2 * d / links.reduceBytesPerSec;
  for (int k = 1; k <= steps; ++k) seconds += 2 * messageSeconds(links, crossesHosts, d / (1 << k));
  if (p2 < p) seconds += 2 * messageSeconds(links, crossesHosts, d) + d / links.reduceBytesPerSec;
  return seconds;
}

// Ties go to the flat algorithms (fastestFlat's order), then to the hierarchical one.
AllreduceAlgorithm chooseAllreduce(const Topology& topology, size_t bytes, const LinkModel& links) {
  const Pick flat = fastestFlat(topology, bytes, links);
  if (hierarchicalApplies(topology) &&
      hierarchicalAllreduceSeconds(topology, bytes, links) < flat.seconds) {
    return AllreduceAlgorithm::kHierarchical;
  }
  return flat.algorithm;
}

// A ring step moves a block on every link at once, as the allreduce's do.
double ringAllgatherSeconds(const Topology& topology, size_t bytes, const LinkModel& links) {
  const double p = topology.size();
  if (p < 2) return 0;
  return (p - 1) * messageSeconds(links, topology.hosts() > 1, static_cast<double>(bytes) / p);
}

// Step k sends m = min(h, P - h) blocks (h held); a wrapped step's second message goes right
// behind its first and is not charged a latency of its own. Across hosts every rank of a host
// sends across at once from the step whose distance passes its host, so a host's ranks share its
// NIC (charged at B / ranks on the largest host, at every step: the model's bound).
double bruckAllgatherSeconds(const Topology& topology, size_t bytes, const LinkModel& links) {
  const int p = topology.size();
  if (p < 2) return 0;
  LinkModel shared = links;
  int largest = 1;
  for (int r = 0; r < p; ++r) largest = std::max(largest, topology.localSize(r));
  shared.interBytesPerSec /= largest;
  const double block = static_cast<double>(bytes) / p;
  double seconds = 0;
  for (int held = 1; held < p;) {
    const int m = std::min(held, p - held);
    seconds += messageSeconds(shared, topology.hosts() > 1, m * block);
    held += m;
  }
  return seconds;
}

// Over TCP inside a host the ring was measured faster than Bruck's at every size from 4 KiB to
// 16 MiB (docs/performance.md, "Allgather: Bruck's against the ring"): there the processes' CPU
// time per message, not a wire's latency, sets the pace, which the model does not describe.
AllreduceAlgorithm chooseAllgather(const Topology& topology, size_t bytes, const LinkModel& links) {
  if (topology.hosts() == 1 && topology.hostLinks() == Topology::HostLinks::kTcp) {
    return AllreduceAlgorithm::kRing;
  }
  return bruckAllgatherSeconds(topology, bytes, links) <
                 ringAllgatherSeconds(topology, bytes, links)
             ? AllreduceAlgorithm::kRecursiveDoubling
             : AllreduceAlgorithm::kRing;
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
  // The inner collectives name ranks of their groups; this names the job's.
  detail::runCollective("allreduce (hierarchical)", transport, [&] {
    const int rank = transport.rank();
    GroupTransport local(transport, topology.localGroup(rank));
    GroupTransport cross(transport, topology.crossGroup(rank));
    reduceScatter(local, data, ReduceOp::kSum, options);
    const Block own = blockOf(data.size(), local.size(), local.rank());
    std::span<float> block = data.subspan(own.begin, own.size());
    CollectiveOptions acrossHosts = options;
    acrossHosts.algorithm = crossGroupPick(topology, block.size_bytes(),
                                           LinkModel::of(transport.options(), topology.hostLinks()))
                                .algorithm;
    allreduce(cross, block, ReduceOp::kSum, acrossHosts);
    if (op == ReduceOp::kAverage) scale(block.data(), block.size(), 1.0f / transport.size());
    allgather(local, data, options);
  });
}

}  // namespace gradsync
