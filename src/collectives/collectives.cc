// Entry points of the collectives: each builds a ring schedule (or a chain or dissemination
// pattern) and runs it; errors are re-raised with the collective's name in their context.
#include <algorithm>

#include <fmt/format.h>

#include "collectives/bruck.h"
#include "collectives/guard.h"
#include "collectives/recursive_doubling.h"
#include "collectives/reduce.h"
#include "collectives/ring.h"
#include "common/half.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/hierarchical.h"

namespace gradsync {
namespace {

std::vector<ring::Span> elementBlocks(size_t count, int size, size_t elementBytes) {
  std::vector<size_t> bytes;
  for (int r = 0; r < size; ++r) bytes.push_back(blockOf(count, size, r).size() * elementBytes);
  return ring::layout(bytes);
}

std::vector<ring::Span> floatBlocks(size_t count, int size) {
  return elementBlocks(count, size, sizeof(float));
}

void addHalfBytes(uint8_t* dst, const uint8_t* src, size_t bytes) {
  addHalves(reinterpret_cast<uint16_t*>(dst), reinterpret_cast<const uint16_t*>(src),
            bytes / sizeof(uint16_t));
}

// A float32 sum, scaled by 1/P in its last reducing step for an average.
ring::Reduction averaging(ReduceOp op, const Transport& transport) {
  return {.finalFactor = op == ReduceOp::kAverage ? 1.0f / transport.size() : 1.0f};
}

uint8_t* bytesOf(std::span<float> data) {
  return reinterpret_cast<uint8_t*>(data.data());
}

// allgather's and allgatherv's algorithm: the ring or Bruck's where one is asked for, else (kAuto,
// or an allreduce's algorithm passed on with the rest of its options) chooseAllgather's pick for
// the transport's topology and links.
AllreduceAlgorithm allgatherAlgorithm(const Transport& transport, size_t bytes,
                                      AllreduceAlgorithm requested) {
  if (requested == AllreduceAlgorithm::kRing ||
      requested == AllreduceAlgorithm::kRecursiveDoubling) {
    return requested;
  }
  const Topology* topology = transport.topology();
  if (topology != nullptr) {
    return chooseAllgather(*topology, bytes,
                           LinkModel::of(transport.options(), topology->hostLinks()));
  }
  return chooseAllgather(Topology::flat(transport.size()), bytes,
                         LinkModel::of(transport.options()));
}

void allgatherBlocks(Transport& transport, uint8_t* data, const std::vector<ring::Span>& blocks,
                     const CollectiveOptions& options) {
  const size_t bytes = blocks.back().offset + blocks.back().bytes;
  if (allgatherAlgorithm(transport, bytes, options.algorithm) ==
      AllreduceAlgorithm::kRecursiveDoubling) {
    return bruckAllgatherv(transport, data, blocks, options);
  }
  detail::runCollective("allgather", transport, [&] {
    std::vector<ring::Step> steps;
    ring::appendPass(steps, blocks, transport.rank(), 0, false);
    ring::run(transport, data, steps, options);
  });
}

}  // namespace

Block blockOf(size_t count, int size, int rank) {
  auto boundary = [&](int r) {
    return static_cast<size_t>(static_cast<unsigned __int128>(count) * r / size);
  };
  return {boundary(rank), boundary(rank + 1)};
}

void allreduce(Transport& transport, std::span<float> data, ReduceOp op,
               const CollectiveOptions& options) {
  const Topology* topology = transport.topology();
  AllreduceAlgorithm chosen = options.algorithm;
  if (chosen == AllreduceAlgorithm::kAuto) {
    if (topology != nullptr) {
      chosen = chooseAllreduce(*topology, data.size_bytes(),
                               LinkModel::of(transport.options(), topology->hostLinks()));
    } else {
      chosen = chooseAllreduce(Topology::flat(transport.size()), data.size_bytes(),
                               LinkModel::of(transport.options()));
    }
  }
  if (chosen == AllreduceAlgorithm::kRecursiveDoubling) {
    return recursiveDoublingAllreduce(transport, data, op, options);
  }
  if (chosen == AllreduceAlgorithm::kHalvingDoubling) {
    return halvingDoublingAllreduce(transport, data, op, options);
  }
  if (chosen == AllreduceAlgorithm::kHierarchical && topology != nullptr) {
    return hierarchicalAllreduce(transport, *topology, data, op, options);
  }
  detail::runCollective("allreduce", transport, [&] {
    auto blocks = floatBlocks(data.size(), transport.size());
    std::vector<ring::Step> steps;
    ring::appendPass(steps, blocks, transport.rank(), 0, /*reduce=*/true);
    ring::appendPass(steps, blocks, transport.rank(), -1, /*reduce=*/false);
    // An average scales each block as its last addition completes it, before the allgather
    // sends it on: one pass fewer over the buffer.
    ring::run(transport, bytesOf(data), steps, options, averaging(op, transport));
  });
}

void allreduceHalf(Transport& transport, std::span<uint16_t> data,
                   const CollectiveOptions& options) {
  detail::runCollective("allreduce", transport, [&] {
    auto blocks = elementBlocks(data.size(), transport.size(), sizeof(uint16_t));
    std::vector<ring::Step> steps;
    ring::appendPass(steps, blocks, transport.rank(), 0, /*reduce=*/true);
    ring::appendPass(steps, blocks, transport.rank(), -1, /*reduce=*/false);
    ring::run(transport, reinterpret_cast<uint8_t*>(data.data()), steps, options,
              {sizeof(uint16_t), addHalfBytes});
  });
}

void reduceScatter(Transport& transport, std::span<float> data, ReduceOp op,
                   const CollectiveOptions& options) {
  detail::runCollective("reduce-scatter", transport, [&] {
    std::vector<ring::Step> steps;
    ring::appendPass(steps, floatBlocks(data.size(), transport.size()), transport.rank(), 1, true);
    ring::run(transport, bytesOf(data), steps, options, averaging(op, transport));
  });
}

void allgather(Transport& transport, std::span<float> data, const CollectiveOptions& options) {
  allgatherBlocks(transport, bytesOf(data), floatBlocks(data.size(), transport.size()), options);
}

void allgatherv(Transport& transport, std::span<uint8_t> data, std::span<const size_t> byteCounts,
                const CollectiveOptions& options) {
  if (byteCounts.size() != static_cast<size_t>(transport.size())) {
    throw ConfigError(fmt::format("allgatherv needs one count per rank: got {} for {} ranks",
                                  byteCounts.size(), transport.size()),
                      {.rank = transport.rank(), .operation = "allgatherv"});
  }
  std::vector<size_t> counts(byteCounts.begin(), byteCounts.end());
  auto blocks = ring::layout(counts);
  size_t total = blocks.back().offset + blocks.back().bytes;
  if (total > data.size()) {
    throw ConfigError(fmt::format("allgatherv: counts add up to {} bytes but the buffer holds {}",
                                  total, data.size()),
                      {.rank = transport.rank(), .operation = "allgatherv"});
  }
  allgatherBlocks(transport, data.data(), blocks, options);
}

std::vector<std::vector<uint8_t>> allgatherBytes(Transport& transport,
                                                 std::span<const uint8_t> mine,
                                                 const CollectiveOptions& options) {
  int n = transport.size();
  std::vector<uint64_t> lengths(n, 0);
  lengths[transport.rank()] = mine.size();
  std::vector<size_t> eight(n, sizeof(uint64_t));
  allgatherv(transport, {reinterpret_cast<uint8_t*>(lengths.data()), n * sizeof(uint64_t)}, eight,
             options);
  std::vector<size_t> counts(lengths.begin(), lengths.end());
  size_t offset = 0;
  for (int r = 0; r < transport.rank(); ++r) offset += counts[r];
  size_t total = offset;
  for (int r = transport.rank(); r < n; ++r) total += counts[r];
  std::vector<uint8_t> all(total);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(offset));
  allgatherv(transport, all, counts, options);
  std::vector<std::vector<uint8_t>> out(n);
  offset = 0;
  for (int r = 0; r < n; ++r) {
    out[r].assign(all.begin() + static_cast<ptrdiff_t>(offset),
                  all.begin() + static_cast<ptrdiff_t>(offset + counts[r]));
    offset += counts[r];
  }
  return out;
}

}  // namespace gradsync
