// `gradsync bench allreduce|allgather|broadcast`: nccl-tests-style size sweep that reports time,
// algorithm bandwidth and bus bandwidth per size while verifying every result
// (docs/performance.md defines the metrics).
#pragma once

#include <cstdint>
#include <string>

#include "gradsync/collectives.h"
#include "gradsync/transport.h"

namespace gradsync {

struct BenchOptions {
  std::string collective = "allreduce";  // allreduce | allgather | broadcast
  uint64_t minBytes = 1 << 20;
  uint64_t maxBytes = 64 << 20;
  int factor = 2;  // size multiplier between rows
  int iters = 20;
  int warmup = 3;
  size_t segmentBytes = 1 << 20;
  // allreduce: ring, hierarchical (over the transport's topology), or auto (gradsync's choice).
  std::string algorithm = "auto";
  std::string transportName = "tcp";  // for the report only
  std::string jsonPath;               // "" = no JSON
};

// Throws ConfigError for an unknown collective or inconsistent sizes.
void validateBench(const BenchOptions& options);

// Runs the sweep as one rank; every rank of `transport` must call it. Rank 0 prints the table and
// writes the JSON. Returns the number of wrong elements seen (0 when all results verified).
uint64_t runBench(Transport& transport, const BenchOptions& options);

}  // namespace gradsync
