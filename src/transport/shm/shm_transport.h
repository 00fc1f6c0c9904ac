// The shared-memory transport: ranks of one host exchange messages through POSIX shared memory
// (segment.h: one segment per rank holding an inbound ring per sender) instead of loopback TCP.
// It implements the Transport contract (tests/conformance) for the ranks of one host; the
// routed transport (transport/routed_transport.h) puts it beside TCP for the other hosts.
//
// Threading: one loop thread per transport owns the channels (channel.h); application threads
// only queue sends and post receives, as with TCP. The loop sleeps on the rank's doorbell (a
// futex in its segment) whenever there is nothing to move, so an idle transport costs no CPU;
// peers ring it when they write to it or make room for it. A thread waiting for a message polls
// for it a few tens of microseconds first where the host's ranks have a core each
// (ShmTransportOptions::spinMicros). The loop also wakes every 20 ms to check
// that the peers' processes still exist (pidfd): a rank killed by a signal is named as lost
// within that period, as a closed socket names it over TCP.
//
// Messages from `singleCopyMinBytes` up are read by the receiver straight out of the sender's
// memory (process_vm_readv: one copy instead of two; the send completes when the receiver
// acknowledges it), where the kernel allows it (checked per pair at connect time).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradsync/store.h"
#include "gradsync/transport.h"

namespace gradsync {

struct ShmTransportOptions {
  TransportOptions transport;
  // Segments of another job are refused; keys go under this prefix in the store.
  std::string jobId = "gradsync";
  std::string keyPrefix = "shm";
  // Bytes of each inbound ring; 0 picks 4 MiB up to 8 ranks per host, less beyond (at least
  // 256 KiB), so that a host's segments stay within a few hundred MiB of address space.
  size_t ringBytes = 0;
  // Messages of at least this many bytes go single-copy where possible; 0 never.
  size_t singleCopyMinBytes = size_t{64} << 10;
  // How long a thread waiting for a message polls for it before it sleeps on the futex, in
  // microseconds; -1 picks kSpinMicros when this host's ranks have a core each (a peer's reply
  // then comes within microseconds, and a futex wake-up costs tens) and 0 (sleep at once) when
  // they share cores (the poller would take the core the peer needs to reply).
  int spinMicros = -1;
  static constexpr int kSpinMicros = 50;
  // Called once, on the loop thread and without its locks, when the transport breaks (a lost
  // peer, a malformed frame, abort()): the routed transport aborts its other transports then.
  std::function<void(std::exception_ptr)> onBroken;
};

// Connects `rank` to the other ranks of `locals` (ranks of the job on this host, ascending,
// including `rank`) through `store`; sends to ranks outside `locals` are refused (ConfigError).
// Blocks until every rank of `locals` has mapped every other's segment, then removes the
// segments' names (nothing stays in /dev/shm). Every rank of `locals` must call it. Throws
// TimeoutError (a local rank did not arrive within the transport timeout), SystemError (shared
// memory unavailable) or ProtocolError (a segment of another job).
std::unique_ptr<Transport> connectShmTransport(Store& store, int rank, int size,
                                               const std::vector<int>& locals,
                                               const ShmTransportOptions& options);

}  // namespace gradsync
