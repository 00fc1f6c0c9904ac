// Collective operations over a Transport: free functions + an Options struct (as Gloo does).
//
// All are blocking and must be called by every rank of the transport in the same order with
// the same arguments (sizes, root, tag); a size disagreement fails with ProtocolError rather
// than hanging. Buffers are in place. float32 only: gradients are float32 here, and a single
// type keeps the kernels simple and vectorised. Concurrent collectives on one transport need
// distinct tags. docs/algorithms.md gives each algorithm's steps and bytes on the wire.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "gradsync/transport.h"

namespace gradsync {

enum class ReduceOp { kSum, kAverage };

// Tags from kReservedTagBase up carry gradsync's own streams (gradient engines, parameter
// servers, startup checks), which may run while the application communicates: an application's
// collectives use tags below it.
inline constexpr uint64_t kReservedTagBase = uint64_t{1} << 56;

// How allreduce combines the ranks' data. kRing: reduce-scatter then allgather, 2 (P - 1)
// messages of 1/P of the buffer (the bandwidth-bound sizes'). kRecursiveDoubling: log2 P swaps
// of the whole buffer, two more where P is not a power of two (the latency-bound sizes').
// kHalvingDoubling (Rabenseifner's): a reduce-scatter by recursive halving and an allgather by
// recursive doubling, 2 log2 P messages carrying a ring's bytes (the middle sizes').
// kHierarchical: over the hosts of the transport's topology (gradsync/hierarchical.h; the ring
// where there is no topology). kAuto picks the fastest by the alpha-beta model of
// gradsync/hierarchical.h (chooseAllreduce) for the world size, topology and message size.
enum class AllreduceAlgorithm { kAuto, kRing, kHierarchical, kRecursiveDoubling, kHalvingDoubling };

struct CollectiveOptions {
  // Message stream of this collective; collectives running concurrently need distinct tags.
  uint64_t tag = 0;
  // Pipeline granularity: blocks are sent as segments of this many bytes, so the reduction of
  // one segment overlaps the transfer of the next. Tests lower it to reach multi-segment paths.
  size_t segmentBytes = size_t{1} << 20;
  // allreduce; allgather and allgatherv run kRing or kRecursiveDoubling (Bruck's allgather, for
  // any P) where asked, and pick one as kAuto does for any other value.
  AllreduceAlgorithm algorithm = AllreduceAlgorithm::kAuto;
};

// The block of `count` elements that rank `rank` of `size` owns in reduce-scatter and
// allgather: elements [begin, end), blocks differ in size by at most one element.
struct Block {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};
Block blockOf(size_t count, int size, int rank);

// Allreduce: the ring (reduce-scatter then allgather, pipelined across both phases),
// recursive doubling for small messages, or over a transport whose topology has several hosts
// of several ranks each, hierarchical where that is faster (options.algorithm). Every rank ends
// with the same bits; which algorithm ran changes the order of the additions, so the bits
// depend on it (and, under kAuto, on the message size).
void allreduce(Transport& transport, std::span<float> data, ReduceOp op = ReduceOp::kSum,
               const CollectiveOptions& options = {});

// Allreduce with 8 bits per value on the wire (the int8 ring of INTELLECT-1 and PCCL, for
// DiLoCo's pseudo-gradients): each hop of the ring's reduce-scatter sends its partial sums
// quantized to int8, one float scale per chunk of kInt8ChunkElements (scale = max|x| / 127,
// round to nearest, ties to even), and the receiver adds them to its own values in float32; the
// reduced block (averaged, for kAverage) is quantized once more and those bytes travel the
// allgather unchanged, so every rank, the block's owner included, ends with the same bits: the
// dequantized result. Bytes per rank: 2 (P-1)/P of int8WireBytes(count), about a quarter of the
// float ring's. Each of the P hops adds at most half a quantization step of its chunk's
// largest partial sum (max|partial| / 254). One message per hop (not pipelined). A chunk whose
// partial sum holds a NaN or infinity ends as NaNs on every rank; one whose largest value is
// below 127 FLT_MIN (scale subnormal) ends as zeros.
inline constexpr size_t kInt8ChunkElements = 1024;
void allreduceInt8(Transport& transport, std::span<float> data, ReduceOp op = ReduceOp::kSum,
                   const CollectiveOptions& options = {});
// Bytes of `count` values on the int8 ring's wire: one float scale per chunk, one byte each.
size_t int8WireBytes(size_t count);

// Ring allreduce of IEEE binary16 values (the fp16 compressor's wire format): half the bytes
// of float32. Each hop adds in float32 and rounds the partial sum back to half; a sum beyond
// half's range becomes infinity.
void allreduceHalf(Transport& transport, std::span<uint16_t> data,
                   const CollectiveOptions& options = {});

// Ring reduce-scatter: afterwards data[blockOf(count, size, rank)] holds the reduced block;
// the other elements are unspecified.
void reduceScatter(Transport& transport, std::span<float> data, ReduceOp op = ReduceOp::kSum,
                   const CollectiveOptions& options = {});

// Allgather: rank r contributes data[blockOf(count, size, r)]; afterwards every rank holds
// every block. By the ring (P - 1 messages of a block each), or where latency dominates by
// Bruck's algorithm (ceil(log2 P) messages, as many bytes): options.algorithm, kAuto picking by
// the model of gradsync/hierarchical.h (chooseAllgather). Either copies bytes only.
void allgather(Transport& transport, std::span<float> data, const CollectiveOptions& options = {});

// Allgather of variable-size byte blocks (the ring or Bruck's, as allgather): rank r contributes
// `byteCounts[r]` bytes at offset sum(byteCounts[0..r)) of `data`. Every rank passes the same
// byteCounts.
void allgatherv(Transport& transport, std::span<uint8_t> data, std::span<const size_t> byteCounts,
                const CollectiveOptions& options = {});

// Every rank contributes a byte string of any length (lengths need not be known in advance);
// returns all of them, indexed by rank. Two allgathervs: the lengths, then the bytes.
std::vector<std::vector<uint8_t>> allgatherBytes(Transport& transport,
                                                 std::span<const uint8_t> mine,
                                                 const CollectiveOptions& options = {});

// All-to-all of variable-size float blocks (MPI_Alltoallv): `send` holds P blocks in rank
// order, block j (sendCounts[j] elements) for rank j; afterwards `recv` holds P blocks in rank
// order, block i (recvCounts[i] elements) from rank i. A rank's own block is copied locally.
// Rank r's sendCounts[j] must equal rank j's recvCounts[r] (ProtocolError otherwise). Every
// receive lands straight in `recv` (posted before any send); one message to and from each other
// rank (options.segmentBytes does not apply). `send` and `recv` must not overlap.
void alltoallv(Transport& transport, std::span<const float> send,
               std::span<const size_t> sendCounts, std::span<float> recv,
               std::span<const size_t> recvCounts, const CollectiveOptions& options = {});

// alltoallv of byte blocks (any element type): the counts are in bytes.
void alltoallvBytes(Transport& transport, std::span<const uint8_t> send,
                    std::span<const size_t> sendBytes, std::span<uint8_t> recv,
                    std::span<const size_t> recvBytes, const CollectiveOptions& options = {});

// All-to-all of equal blocks (MPI_Alltoall): send and recv hold P blocks of send.size() / P
// elements each (ConfigError unless P divides it and the sizes agree).
void alltoall(Transport& transport, std::span<const float> send, std::span<float> recv,
              const CollectiveOptions& options = {});

// Pipelined chain broadcast of `root`'s data to every rank.
void broadcast(Transport& transport, std::span<float> data, int root,
               const CollectiveOptions& options = {});

// `root`'s byte string, of any length, to every rank (the others' `bytes` are not read): the
// length, then the bytes, by broadcast. Returns it on every rank, root included.
std::vector<uint8_t> broadcastBytes(Transport& transport, std::span<const uint8_t> bytes, int root,
                                    const CollectiveOptions& options = {});

// Dissemination barrier: returns on a rank once every rank has entered it.
void barrier(Transport& transport, const CollectiveOptions& options = {});

}  // namespace gradsync
