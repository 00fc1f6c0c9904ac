// Bruck's allgather (AllreduceAlgorithm::kRecursiveDoubling for allgather and allgatherv): any
// number of ranks P in ceil(log2 P) steps, against the ring's P - 1, each rank sending the same
// (P - 1)/P of the buffer: the latency-bound sizes' allgather. Blocking, collective over every
// rank, in place; it only copies bytes, so its result is the ring's, bit for bit.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "collectives/ring.h"
#include "gradsync/collectives.h"
#include "gradsync/transport.h"

namespace gradsync {

// Rank r contributes blocks[r] of `data`; afterwards every rank holds every block. `blocks` are
// the same on every rank (ring::layout of the counts).
void bruckAllgatherv(Transport& transport, uint8_t* data, const std::vector<ring::Span>& blocks,
                     const CollectiveOptions& options);

}  // namespace gradsync
