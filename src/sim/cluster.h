// The simulated cluster and what its collectives cost (docs/simulator.md, "Network model").
//
// Workers are devices; `gpusPerHost` of them share a host, joined by a fast local link; hosts
// are joined by a network through one NIC each (full duplex, `bandwidth` each way). A transfer
// of b bytes over a link takes latency + b / bandwidth. Collectives are costed step by step
// from the real algorithms' step structure (collectives/ring.h, the gtopk tree): a step ends
// when its slowest transfer does, and rank r sits on host r / gpusPerHost, so a ring crosses
// the network once per host per step. Links that several transfers share at once (a parameter
// server's NIC) are modelled by FIFO Link timelines in the simulator.
#pragma once

#include <cstddef>
#include <string>

#include "schedule/schedule.h"

namespace gradsync::sim {

struct ClusterSpec {
  int workers = 4;
  int gpusPerHost = 1;
  double bandwidth = 10e9 / 8;        // bytes/s per host NIC, each direction
  double latency = 0;                 // seconds per network message
  double localBandwidth = 100e9 / 8;  // bytes/s between devices of one host
  double localLatency = 0;

  int hosts() const { return (workers + gpusPerHost - 1) / gpusPerHost; }
  int hostOf(int rank) const { return rank / gpusPerHost; }
  // Throws ConfigError for non-positive sizes or rates.
  void validate() const;
  std::string describe() const;  // "16 workers (2 hosts x 8), 25 Gbit/s, 10 us"
};

// Seconds for one message of `bytes` from rank `from` to rank `to`.
double transferSeconds(const ClusterSpec& cluster, int from, int to, size_t bytes);

// The collectives of the gradient engine on `elementBytes`-sized elements (4: float32,
// 2: the fp16 ring), or bytes for allgatherv. Each is 0 on one worker or zero bytes.
double ringAllreduceSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes);
double reduceScatterSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes);
double allgatherSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes);
// Every rank contributes `bytesPerRank` (the ring allgatherv of the sparse compressors).
double allgathervSeconds(const ClusterSpec& cluster, size_t bytesPerRank);
// All-to-all (alltoallv): every rank sends `bytesPerPeer` to every other rank at once. A host's
// NIC carries its G ranks' messages to the P - G ranks elsewhere, and each device's local link
// its G - 1 messages to the host's other devices, in parallel.
double alltoallSeconds(const ClusterSpec& cluster, size_t bytesPerPeer);
// gtopk: lists of `listBytes` merged up a binomial tree and sent back down it.
double treeSeconds(const ClusterSpec& cluster, size_t listBytes);

// Whether the hierarchical collectives apply: several hosts, each full with several workers (as
// gradsync/hierarchical.h requires of a topology).
bool hierarchicalApplies(const ClusterSpec& cluster);
// The largest of a host's blocks of `elements` (blockOf over gpusPerHost): one worker's shard.
size_t shardElements(const ClusterSpec& cluster, size_t elements);
// Hierarchical allreduce: a ring pass inside each host, an allreduce of each shard across the
// hosts with the host's gpusPerHost cross rings sharing its NIC (a step carries their blocks
// through it one after another), a ring pass inside.
double hierarchicalAllreduceSeconds(const ClusterSpec& cluster, size_t elements,
                                    size_t elementBytes);
// The dense allreduce the engine runs (allreduce's automatic choice, gradsync/hierarchical.h,
// with this cluster's links as its LinkModel), and the bytes one worker sends in it.
double denseAllreduceSeconds(const ClusterSpec& cluster, size_t elements, size_t elementBytes);
double denseAllreduceBytes(const ClusterSpec& cluster, size_t elements, size_t elementBytes);
// Every host has gpusPerHost workers (the topology is regular).
bool regular(const ClusterSpec& cluster);
// hitopk (Shi et al.'s HiTopKComm) on a unit of `elements` floats whose shard's list is
// `listBytes`: a dense ring pass inside each host, an allgatherv of the lists among the hosts
// (gpusPerHost groups sharing each NIC), a dense ring pass inside; with uneven hosts, a flat
// allgatherv of whole-unit lists (as the compressor falls back). Seconds, and bytes one worker
// sends (over both kinds of link).
double hierarchicalSparseSeconds(const ClusterSpec& cluster, size_t elements, size_t listBytes);
double hierarchicalSparseBytes(const ClusterSpec& cluster, size_t elements, size_t listBytes);

// `schedule`, with p3's slice (unless slice= was given) set for the ring's slowest link
// (p3SliceForLink, schedule.h): the network's when the cluster has several hosts, else the
// local one.
ScheduleSpec withLinkSlice(ScheduleSpec schedule, const ClusterSpec& cluster);

}  // namespace gradsync::sim
