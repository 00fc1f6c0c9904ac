// Recursive-doubling allreduce: allreduce's algorithm for latency-bound sizes
// (AllreduceAlgorithm::kRecursiveDoubling; recursive_doubling.cc has its steps). Blocking,
// collective over every rank, in place; every rank ends with the same bits.
#pragma once

#include <span>

#include "gradsync/collectives.h"
#include "gradsync/transport.h"

namespace gradsync {

void recursiveDoublingAllreduce(Transport& transport, std::span<float> data, ReduceOp op,
                                const CollectiveOptions& options);

}  // namespace gradsync
