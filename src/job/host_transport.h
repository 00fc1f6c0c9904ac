// How one process of a job reaches the others, as gradsync::init connects it: the ranks learn
// which of them share a host (each publishes its host identity through the store, or
// --ranks-per-host says it), then ranks of one host talk through shared memory
// (transport/shm) and all other pairs over TCP, behind one RoutedTransport that carries the
// topology (gradsync/topology.h).
#pragma once

#include <memory>
#include <string>

#include "gradsync/store.h"
#include "gradsync/tcp.h"
#include "gradsync/topology.h"
#include "gradsync/transport.h"

namespace gradsync {

struct HostTransportOptions {
  // The TCP links (between hosts); its keyPrefix also prefixes the topology and shared-memory
  // keys in the store.
  TcpTransportOptions tcp;
  // Shared memory between the ranks of one host (--shm); else TCP there too.
  bool sharedMemory = true;
  // Consecutive runs of this many ranks form a host (--ranks-per-host); 0: the hosts the ranks
  // share in fact, or, with an emulated link (tcp.transport's bandwidth or latency: --bandwidth,
  // --latency), every rank a host of its own, since shared memory would bypass the emulated
  // link. Ranks of one logical host talk through shared memory only where they also share a
  // real host; logical hosts always reach each other over TCP (so --bandwidth shapes exactly the
  // links between them).
  int ranksPerHost = 0;
};

// What identifies this process's host: hostname, boot id, the network and PID namespaces and
// the /dev/shm file system (processes in different network namespaces count as different hosts,
// which is how scripts/netem emulates them; shared memory needs one /dev/shm and one PID space).
std::string hostIdentity();

// What the ranks tell each other at rendezvous.
struct HostsInfo {
  Topology real;  // the hosts they share in fact (not ranksPerHost's)
  // By rank: the largest file the process may create (RLIMIT_FSIZE), which bounds a shared
  // memory segment too; ranks of a host that cannot all create theirs use TCP.
  std::vector<uint64_t> fileSizeLimit;
};

// Exchanges every rank's host identity and file size limit through `store` (rank 0 gathers
// them and publishes the list, so each rank reads two keys, not size) and checks that every
// rank was given the same ranksPerHost and sharedMemory (ConfigError naming the first rank that
// differs). Blocking, bounded by the TCP timeout; every rank must call it.
HostsInfo exchangeHosts(Store& store, int rank, int size, const HostTransportOptions& options);

// Connects this rank to every other as described above. Blocking, bounded by the TCP options'
// timeout; every rank of the job must call it with the same options but rank. Throws as
// connectTcpTransport and connectShmTransport do.
std::unique_ptr<Transport> connectHostTransport(Store& store, int rank, int size,
                                                const HostTransportOptions& options);

}  // namespace gradsync
