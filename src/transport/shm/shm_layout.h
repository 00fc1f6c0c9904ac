// How the ranks of one host set up their shared memory (the rendezvous of the shared-memory
// transport, through the job's store):
//   1. each rank creates its segment (segment.h) and publishes its name under
//      PREFIX/seg/RANK;
//   2. each maps every other local rank's segment, checks it belongs to this job, and probes
//      whether the kernel lets it read that rank's memory directly (process_vm_readv of a
//      random word the owner put in its header), recording the answer in its own header;
//   3. each publishes PREFIX/mapped/RANK and waits for the others' keys, then unlinks its
//      segment's name: from then on no file of the job exists in /dev/shm.
#pragma once

#include <cstdint>
#include <vector>

#include "gradsync/store.h"
#include "transport/shm/segment.h"
#include "transport/shm/shm_transport.h"

namespace gradsync::shm {

struct HostSegments {
  std::vector<int> locals;     // ranks of the host, ascending; slot s is locals[s]
  Segment own;                 // this rank's (its inbound rings)
  std::vector<Segment> peers;  // by slot; the own slot is empty

  uint32_t slotOf(int rank) const;
  // Whether `peer` may read this rank's memory directly (it probed it at connect time).
  bool peerCanRead(int peer);
};

// Blocks until every rank of `locals` has mapped every other's segment (bounded by the
// transport timeout). Throws as connectShmTransport.
HostSegments connectSegments(Store& store, int rank, int size, const std::vector<int>& locals,
                             const ShmTransportOptions& options);

// The ring size connectSegments picks for `ranks` ranks on a host when options say 0.
uint64_t defaultRingBytes(size_t ranks);

}  // namespace gradsync::shm
