// The doubling family of allreduce algorithms (recursive_doubling.cc has their steps), for the
// sizes where latency dominates. Blocking, collective over every rank, in place; every rank ends
// with the same bits.
//   recursiveDoublingAllreduce (AllreduceAlgorithm::kRecursiveDoubling): log2 P swaps of the
//     whole buffer: the fewest messages, every rank adding the whole buffer at each.
//   halvingDoublingAllreduce (AllreduceAlgorithm::kHalvingDoubling, Rabenseifner's): a
//     reduce-scatter by recursive halving, then an allgather by recursive doubling: 2 log2 P
//     messages, of a ring's bytes, each rank adding 1/2 + 1/4 + ... of the buffer.
#pragma once

#include <span>

#include "gradsync/collectives.h"
#include "gradsync/transport.h"

namespace gradsync {

void recursiveDoublingAllreduce(Transport& transport, std::span<float> data, ReduceOp op,
                                const CollectiveOptions& options);

void halvingDoublingAllreduce(Transport& transport, std::span<float> data, ReduceOp op,
                              const CollectiveOptions& options);

}  // namespace gradsync
