// Recursive-doubling allreduce (gradsync/collectives.h, AllreduceAlgorithm::kRecursiveDoubling):
// the latency-bound sizes' algorithm. With p2 the largest power of two <= P:
//   1. fold: rank p2 + i (i < P - p2) sends its values to rank i, which adds them to its own;
//   2. for mask = 1, 2, ..., p2 / 2: ranks i and i ^ mask (both < p2) swap buffers and add;
//   3. unfold: rank i sends the result back to rank p2 + i.
// log2(p2) + 2 messages of the whole buffer on the longest path, against the ring's 2 (P - 1)
// messages of 1/P of it: fewer latencies, more bytes. Every rank ends with the same bits, because
// the two ranks of a pair add the same two operands (x + y == y + x) and the folded ranks
// receive a copy.
#include <vector>

#include "collectives/guard.h"
#include "collectives/recursive_doubling.h"
#include "collectives/reduce.h"

namespace gradsync {
namespace {

int largestPowerOfTwoAtMost(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

class RecursiveDoubling {
 public:
  RecursiveDoubling(Transport& transport, std::span<float> data, uint64_t tag)
      : t_(transport), data_(data), tag_(tag) {}

  void run(ReduceOp op) {
    const int size = t_.size(), rank = t_.rank();
    const int p2 = largestPowerOfTwoAtMost(size);
    const int extras = size - p2;
    if (rank >= p2) {  // folded in: hands its values over, gets the result back
      t_.send(rank - p2, tag_, data_.data(), data_.size_bytes())->wait();
      t_.recv(rank - p2, tag_, data_.data(), data_.size_bytes())->wait();
      return;
    }
    theirs_.resize(data_.size());
    if (rank < extras) {
      t_.recv(rank + p2, tag_, theirs_.data(), data_.size_bytes())->wait();
      addInto(data_.data(), theirs_.data(), data_.size());
    }
    const float factor = op == ReduceOp::kAverage ? 1.0f / static_cast<float>(size) : 1.0f;
    for (int mask = 1; mask < p2; mask *= 2) {
      swapWith(rank ^ mask);
      // An average scales with the last addition, in one pass (as the ring does).
      if (mask * 2 == p2 && factor != 1.0f) {
        addIntoScaled(data_.data(), theirs_.data(), data_.size(), factor);
      } else {
        addInto(data_.data(), theirs_.data(), data_.size());
      }
    }
    if (rank < extras) t_.send(rank + p2, tag_, data_.data(), data_.size_bytes())->wait();
  }

 private:
  // Sends this rank's values to `peer` and receives the peer's into theirs_.
  void swapWith(int peer) {
    WorkPtr send = t_.send(peer, tag_, data_.data(), data_.size_bytes());
    WorkPtr recv = t_.recv(peer, tag_, theirs_.data(), data_.size_bytes());
    recv->wait();
    send->wait();
  }

  Transport& t_;
  std::span<float> data_;
  uint64_t tag_;
  std::vector<float> theirs_;
};

}  // namespace

void recursiveDoublingAllreduce(Transport& transport, std::span<float> data, ReduceOp op,
                                const CollectiveOptions& options) {
  if (transport.size() == 1 || data.empty()) return;  // the sum (and average) of one rank
  // Outside the body: its receive buffer must outlive the abort of a failed run (guard.h).
  RecursiveDoubling doubling(transport, data, options.tag);
  detail::runCollective("allreduce (recursive doubling)", transport, [&] { doubling.run(op); });
}

}  // namespace gradsync
