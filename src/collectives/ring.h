// The pipelined ring engine under allreduce, reduce-scatter and allgather(v).
//
// A ring schedule is a list of steps; at each step a rank sends one block to its right
// neighbour and receives one block from its left neighbour, either adding it into its own copy
// (reduce) or storing it (copy). In every ring algorithm the block received at step s is the
// block sent at step s+1, so blocks are cut into segments and segment k is forwarded as soon as
// it has arrived (and been reduced): transfer, reduction and forwarding overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gradsync/collectives.h"

namespace gradsync::ring {

struct Span {
  size_t offset = 0;  // bytes into the buffer
  size_t bytes = 0;
};

struct Step {
  Span send;
  Span recv;
  bool reduce = false;  // add the received elements into the buffer instead of storing them
};

// How received elements are added into the buffer: dst[i] += src[i] for `bytes` bytes of
// elements of `elementBytes` each. Segments are cut at element boundaries.
struct Reduction {
  size_t elementBytes = sizeof(float);
  void (*add)(uint8_t* dst, const uint8_t* src, size_t bytes) = nullptr;  // null: float32 sum
  // float32 sums only: the last reducing step multiplies what it completes by this (an average's
  // 1/P), so the scaling rides on that pass instead of one more over the whole buffer.
  float finalFactor = 1.0f;
};

// Byte spans of the blocks of a buffer cut into consecutive pieces of the given sizes.
std::vector<Span> layout(const std::vector<size_t>& blockBytes);

// Appends the n-1 steps of one ring pass to `steps`: at step s, rank r sends block
// (r - shift - s) mod n and receives block (r - shift - s - 1) mod n.
void appendPass(std::vector<Step>& steps, const std::vector<Span>& blocks, int rank, int shift,
                bool reduce);

// Runs `steps` on `data`. REQUIRES: steps[s+1].send == steps[s].recv.
void run(Transport& transport, uint8_t* data, const std::vector<Step>& steps,
         const CollectiveOptions& options, const Reduction& reduction = {});

// What a dense ring allreduce of `elements` floats makes one of `ranks` ranks send: its share of
// the reduce-scatter and of the allgather, (P-1)/P of the buffer each (frame headers aside).
inline uint64_t allreduceBytesSent(size_t elements, int ranks) {
  return 2 * (static_cast<uint64_t>(ranks) - 1) * elements * sizeof(float) /
         static_cast<uint64_t>(ranks);
}

}  // namespace gradsync::ring
