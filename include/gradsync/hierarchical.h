// Collectives that follow the hosts of a topology (gradsync/topology.h): the intra-host links
// (shared memory, NVLink) are much faster than the links between hosts, so traffic between
// hosts is what to save. docs/algorithms.md, "Hierarchical allreduce", derives the costs.
//
// Hierarchical allreduce of d bytes on N hosts of n ranks:
//   1. reduce-scatter inside each host: local rank j ends with block j (d/n) of its host's sum;
//   2. allreduce of block j among the N ranks of local rank j (a cross group; the n cross groups
//      run at once and share each host's NIC), by the flat algorithm the model finds fastest for
//      a block over a NIC of B/n (the ring, recursive doubling or halving-doubling);
//   3. allgather inside each host.
// By the ring, each host's NIC carries 2(N-1)/N d bytes each way, against 2(P-1)/P d for a flat
// ring over node-contiguous ranks, in 2(N-1) latencies instead of 2(P-1); by recursive doubling,
// in log2 N latencies.
//
// Blocking, collective over every rank of the transport, float32 in place, like the ring
// collectives (gradsync/collectives.h); results are bitwise the same on every rank.
#pragma once

#include <cstddef>
#include <span>

#include "gradsync/collectives.h"
#include "gradsync/topology.h"
#include "gradsync/transport.h"

namespace gradsync {

// The alpha-beta model kAuto decides with: per-message latency and bandwidth of a link inside a
// host and of a host's NIC.
struct LinkModel {
  // Shared memory between processes here (docs/performance.md). The latency is what puts the
  // measured crossover of the ring and recursive doubling on one host of 4 ranks (between 64
  // and 128 KiB: "Small messages") where the model puts it (85 kB).
  double intraBytesPerSec = 3e9;
  double intraLatencySec = 12e-6;
  // Shared memory's messages from this size up take the single-copy path, whose acknowledgement
  // costs one latency more (ShmTransportOptions::singleCopyMinBytes); SIZE_MAX for links with no
  // such path (loopback TCP, an accelerator's).
  size_t intraRoundTripMinBytes = size_t{64} << 10;
  double interBytesPerSec = 1.25e9;  // 10 Gbit/s unless the transport knows (--bandwidth)
  double interLatencySec = 50e-6;
  // Adding a received buffer into one's own, bytes per second (one core; memory-bound). The
  // ring hides its additions behind its transfers; recursive doubling waits for each.
  double reduceBytesPerSec = 5e9;

  // TCP over loopback between the processes of one host, what a host's ranks use without shared
  // memory (docs/performance.md, "Small messages"): a message's latency is the kernel's two
  // socket paths and a thread's wake-up on each side; the latency puts the ring's and recursive
  // doubling's modelled crossover on 4 ranks (533 kB) where they were measured to cross (between
  // 512 KiB and 1 MiB).
  static constexpr double kLoopbackBytesPerSec = 1e9;
  static constexpr double kLoopbackLatencySec = 120e-6;

  // The model for a transport: its --bandwidth and --latency, where set, are the NIC's; ranks of
  // a host that talk over TCP (`hostLinks`, the transport's topology's) get loopback's link.
  static LinkModel of(const TransportOptions& options,
                      Topology::HostLinks hostLinks = Topology::HostLinks::kSharedMemory);
};

// The slowest link a ring over `transport`'s ranks crosses, by LinkModel::of(transport): a
// NIC's once its topology has two hosts (or it has none: a rank per host), else the link inside
// the one host (shared memory's, or loopback TCP's).
struct RingLink {
  double latencySec = 0;
  double bytesPerSec = 0;
};
RingLink ringLinkOf(const Transport& transport);

// Whether the hierarchical algorithm applies: every host has the same number n >= 2 of ranks and
// there are N >= 2 hosts.
bool hierarchicalApplies(const Topology& topology);

// Modelled seconds of an allreduce of `bytes` by each algorithm (the ring over ranks in order).
double ringAllreduceSeconds(const Topology& topology, size_t bytes, const LinkModel& links);
// Hierarchical: the two intra-host passes and the cross groups' fastest flat allreduce.
double hierarchicalAllreduceSeconds(const Topology& topology, size_t bytes, const LinkModel& links);
// Every message charged at the slowest link the topology has (a NIC once there are two hosts),
// and every addition of a whole buffer at reduceBytesPerSec.
double recursiveDoublingAllreduceSeconds(const Topology& topology, size_t bytes,
                                         const LinkModel& links);
// Charged as recursive doubling is, with a ring's bytes in 2 log2 P messages.
double halvingDoublingAllreduceSeconds(const Topology& topology, size_t bytes,
                                       const LinkModel& links);

// kAuto's pick: the fastest of the ring, recursive doubling, halving-doubling and (where it
// applies) hierarchical by the model. allreduce passes Topology::flat(P) for a transport without a
// topology (every rank behind a NIC of its own).
AllreduceAlgorithm chooseAllreduce(const Topology& topology, size_t bytes, const LinkModel& links);

// Modelled seconds of an allgather of `bytes` in all: the ring's P - 1 messages of a block, or
// Bruck's ceil(log2 P) messages of 1, 2, 4, ... blocks (two where its blocks wrap around), each
// charged as recursive doubling's are (the slowest link the topology has).
double ringAllgatherSeconds(const Topology& topology, size_t bytes, const LinkModel& links);
double bruckAllgatherSeconds(const Topology& topology, size_t bytes, const LinkModel& links);
// allgather's and allgatherv's kAuto: kRing or kRecursiveDoubling (Bruck's), the faster by the
// model; ties go to the ring.
AllreduceAlgorithm chooseAllgather(const Topology& topology, size_t bytes, const LinkModel& links);

// The hierarchical allreduce on `topology`, which must be `transport`'s ranks with the same
// number on every host (ConfigError otherwise; one host, or one rank per host, is allowed and
// degenerates to the ring).
void hierarchicalAllreduce(Transport& transport, const Topology& topology, std::span<float> data,
                           ReduceOp op = ReduceOp::kSum, const CollectiveOptions& options = {});

}  // namespace gradsync
