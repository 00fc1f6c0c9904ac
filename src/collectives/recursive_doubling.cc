// The doubling family of allreduce algorithms (recursive_doubling.h). With p2 the largest power
// of two <= P, both fold the P - p2 extra ranks in first and hand them the result last:
//   fold: rank p2 + i (i < P - p2) sends its values to rank i, which adds them to its own;
//   ... the algorithm among ranks 0 .. p2 - 1 ...
//   unfold: rank i sends the result back to rank p2 + i.
// Recursive doubling (kRecursiveDoubling): for mask = 1, 2, ..., p2 / 2, ranks i and i ^ mask
// swap their whole buffers and add: log2(p2) + 2 messages of the whole buffer on the longest
// path, against the ring's 2 (P - 1) of 1/P of it. Every rank ends with the same bits, because
// the two ranks of a pair add the same two operands (x + y == y + x).
// Halving-doubling (kHalvingDoubling, Rabenseifner's algorithm): the buffer is cut into p2
// blocks (blockOf). Reduce-scatter by recursive halving: for mask = p2 / 2, ..., 1, ranks i and
// i ^ mask split the blocks they still reduce into two halves; each sends the half its partner
// keeps and adds the partner's copy of its own (the lower half to the rank whose `mask` bit is
// 0), so rank i ends owning block i, summed. Allgather by recursive doubling: for mask = 1, ...,
// p2 / 2, partners swap the blocks they hold. Its messages carry 1/2, 1/4, ... of the buffer and
// back, 2 (p2 - 1) / p2 of it in all (a ring's bytes) in 2 log2(p2) latencies. Each block's sum
// is made by its one owner and copied to the others, so every rank has the same bits.
// An average scales in the last addition (as the ring does).
#include <algorithm>
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

// What both algorithms share: the fold and unfold of the extra ranks, and exchanges with a
// partner. The receive buffer is a member, so it outlives the abort of a failed run (guard.h).
class Doubling {
 public:
  Doubling(Transport& transport, std::span<float> data, ReduceOp op, uint64_t tag)
      : t_(transport),
        data_(data),
        tag_(tag),
        factor_(op == ReduceOp::kAverage ? 1.0f / static_cast<float>(transport.size()) : 1.0f),
        p2_(largestPowerOfTwoAtMost(transport.size())) {}

  void runRecursiveDoubling() {
    if (!foldIn()) return;
    for (int mask = 1; mask < p2_; mask *= 2) {
      exchange(t_.rank() ^ mask, data_, data_);
      add(data_, /*last=*/mask * 2 == p2_);
    }
    unfold();
  }

  void runHalvingDoubling() {
    if (!foldIn()) return;
    const int rank = t_.rank();
    int lo = 0, blocks = p2_;  // the blocks [lo, lo + blocks) this rank still reduces
    for (int mask = p2_ / 2; mask >= 1; mask /= 2) {
      blocks /= 2;
      const bool upper = (rank & mask) != 0;
      const int keep = upper ? lo + blocks : lo, give = upper ? lo : lo + blocks;
      exchange(rank ^ mask, blocksOf(give, blocks), blocksOf(keep, blocks));
      lo = keep;
      add(blocksOf(keep, blocks), /*last=*/mask == 1);
    }
    for (int mask = 1; mask < p2_; mask *= 2) {  // lo: the first of the `mask` blocks held
      const int theirs = lo ^ mask;
      std::span<float> into = blocksOf(theirs, mask);
      WorkPtr send = sendBlocks(rank ^ mask, blocksOf(lo, mask));
      t_.recv(rank ^ mask, tag_, into.data(), into.size_bytes())->wait();
      send->wait();
      lo = std::min(lo, theirs);
    }
    unfold();
  }

 private:
  // Folds an extra rank in; false on the extra ranks, which have then received the result.
  bool foldIn() {
    const int rank = t_.rank();
    if (rank >= p2_) {
      t_.send(rank - p2_, tag_, data_.data(), data_.size_bytes())->wait();
      t_.recv(rank - p2_, tag_, data_.data(), data_.size_bytes())->wait();
      return false;
    }
    theirs_.resize(data_.size());
    if (rank + p2_ < t_.size()) {
      t_.recv(rank + p2_, tag_, theirs_.data(), data_.size_bytes())->wait();
      addInto(data_.data(), theirs_.data(), data_.size());
    }
    return true;
  }

  void unfold() {
    if (t_.rank() + p2_ < t_.size()) {
      t_.send(t_.rank() + p2_, tag_, data_.data(), data_.size_bytes())->wait();
    }
  }

  // Sends `mine` to `peer` and receives its values for `incoming` (elements of data_) into the
  // same positions of theirs_.
  void exchange(int peer, std::span<const float> mine, std::span<float> incoming) {
    WorkPtr send = sendBlocks(peer, mine);
    float* into = theirs_.data() + (incoming.data() - data_.data());
    t_.recv(peer, tag_, into, incoming.size_bytes())->wait();
    send->wait();
  }

  WorkPtr sendBlocks(int peer, std::span<const float> values) {
    return t_.send(peer, tag_, values.data(), values.size_bytes());
  }

  // part += theirs_'s same elements (scaled for an average when it is the last addition).
  void add(std::span<float> part, bool last) {
    const float* src = theirs_.data() + (part.data() - data_.data());
    if (last && factor_ != 1.0f) {
      addIntoScaled(part.data(), src, part.size(), factor_);
    } else {
      addInto(part.data(), src, part.size());
    }
  }

  // Blocks [first, first + count) of the p2 blocks, as elements of data_.
  std::span<float> blocksOf(int first, int count) const {
    const size_t begin = blockOf(data_.size(), p2_, first).begin;
    const size_t end = blockOf(data_.size(), p2_, first + count - 1).end;
    return data_.subspan(begin, end - begin);
  }

  Transport& t_;
  std::span<float> data_;
  uint64_t tag_;
  float factor_;
  int p2_;
  std::vector<float> theirs_;
};

}  // namespace

void recursiveDoublingAllreduce(Transport& transport, std::span<float> data, ReduceOp op,
                                const CollectiveOptions& options) {
  if (transport.size() == 1 || data.empty()) return;  // the sum (and average) of one rank
  Doubling doubling(transport, data, op, options.tag);
  detail::runCollective("allreduce (recursive doubling)", transport,
                        [&] { doubling.runRecursiveDoubling(); });
}

void halvingDoublingAllreduce(Transport& transport, std::span<float> data, ReduceOp op,
                              const CollectiveOptions& options) {
  if (transport.size() == 1 || data.empty()) return;
  Doubling doubling(transport, data, op, options.tag);
  detail::runCollective("allreduce (halving-doubling)", transport,
                        [&] { doubling.runHalvingDoubling(); });
}

}  // namespace gradsync
