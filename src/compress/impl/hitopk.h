// hitopk:R[,iters=N,fp16=1,bypass=E] — Shi et al.'s hierarchical top-k communication
// (HiTopKComm, MLSys'21; docs/algorithms.md "hitopk"), over the hosts of the transport's
// topology (gradsync/topology.h): N hosts of n ranks.
//   1. dense reduce-scatter inside each host: local rank j holds shard j (blockOf) of the host's
//      sum;
//   2. error feedback and MSTopK on the shard: x = shard + residual, k = max(1, round(R |shard|))
//      elements kept, residual = x - what was sent (per shard, after the host's reduction);
//   3. sparse allgather of the shard's (index, value) lists among the ranks of local rank j of
//      every host (the cross group); values as IEEE half unless fp16=0;
//   4. every rank of the cross group sums the N lists into its dense shard;
//   5. dense allgather inside each host; the average is the sum over P = N n.
// Units below `bypass` elements (default 16384, as in the third-party code) are averaged dense
// (allreduce, which goes hierarchical itself where that is faster). Without a topology, or with
// hosts of unequal sizes, every rank is its own host (n = 1): MSTopK with error feedback and a
// sparse allgather among all.
//
// Contract (Compressor): every rank ends with the same bits (shards are summed in cross-group
// rank order, then copied). `sent` is this rank's decoded list at its shard's positions, zero
// elsewhere: with error feedback, residual + sum of `sent` over steps = sum of the host's
// reduced shards (HiTopK.ErrorFeedbackKeepsResidualPlusSentEqualToInputs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "compress/compressor.h"
#include "compress/threshold_select.h"

namespace gradsync::methods {

class HiTopK final : public Compressor {
 public:
  HiTopK(double density, int iterations, bool errorFeedback, bool half, size_t bypass);

  // Bytes of one shard's list of k pairs on the wire: count u32, k u32 indices (ascending, into
  // the shard), k values (f16, or f32 with fp16=0), little-endian.
  static size_t listBytes(size_t k, bool half);

  Aggregation aggregation() const override { return Aggregation::kHierarchical; }
  // The list of a whole unit's k (a shard's is about 1/n of it: the topology decides n).
  size_t encodedBytes(size_t elements) const override;
  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;
  void saveState(StateWriter& out) const override { out.write(residual_); }
  void loadState(StateReader& in) override { in.read(residual_); }

  // Units below this many elements are averaged dense.
  size_t bypass() const { return bypass_; }
  // This rank's shard residual (empty before the first exchange or without error feedback).
  std::span<const float> residual() const { return residual_; }

 private:
  void selectAndEncode(std::span<float> shard, std::span<float> sentShard, uint8_t* out);

  const double density_;
  const bool errorFeedback_;
  const bool half_;
  const size_t bypass_;
  ThresholdSelector selector_;
  std::vector<float> residual_;  // by shard element; sized at the first exchange
  std::vector<uint32_t> indices_;
  std::vector<uint8_t> lists_;  // the cross group's lists, back to back
  size_t k_ = 0;
};

// shard += the list `list` of rank `sender` (named in errors), which must hold exactly k pairs
// at strictly ascending indices inside the shard; else ProtocolError, and `shard` is left
// partly summed (the exchange fails as a whole).
void addShardList(std::span<const uint8_t> list, size_t k, bool half, std::span<float> shard,
                  int sender);

}  // namespace gradsync::methods
