// Staleness per rank under the parameter servers' asynchronous modes (asgd, ssp:S): how many
// updates other workers applied to a unit between a worker's pull of it and its push's own
// update, as the servers measure it (ps/protocol.h, PsStaleness). With W workers of equal speed
// each push is about W - 1 updates stale. It is reported, not judged: a slow worker's staleness
// depends on the mode as much as on its speed (under ssp:S the others wait for it at the bound
// and it stays near W - 1; under asgd it is high while the others run and drops to 0 once they
// have ended), so it names no straggler (docs/cli.md, "Staleness per rank").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradsync/transport.h"
#include "sync/strategy.h"

namespace gradsync {

struct RankStaleness {
  int rank = 0;
  uint64_t pushes = 0;  // pushes the servers answered
  double mean = 0;      // their mean staleness (updates)
  uint64_t max = 0;
};

// This rank's pushes, the sum and the maximum of their staleness (DistributedOptimizer::stats()).
struct StalenessCounts {
  uint64_t pushes = 0;
  uint64_t sum = 0;
  uint64_t max = 0;
};

// Under asgd and ssp: every worker's, by rank; collective over `workers` (one allgather on `tag`,
// blocking; throws the transport's errors). Under every other strategy: empty, no collective.
std::vector<RankStaleness> gatherStaleness(Transport& workers, const SyncStrategy& strategy,
                                           StalenessCounts mine, uint64_t tag);

// "staleness per rank (updates between a pull and its push's update): rank 0 mean 2.94, max 9
// over 96 pushes; rank 1 ...", for the log.
std::string describe(std::span<const RankStaleness> ranks);

// "0.93/3 1.24/4 2.00/5": every rank's mean and maximum, for the one-line run summary.
std::string summarize(std::span<const RankStaleness> ranks);

}  // namespace gradsync
