// 1-bit Adam's compressed all-reduce (Tang et al. 2021; DeepSpeed's compressed_allreduce) over
// any fixed-size codec: the spec key ",allreduce=on" (docs/algorithms.md, "Compressed
// all-reduce"). The all-gather exchange (CodecCompressor::exchange) sends each rank's whole
// encoding to every other rank: P - 1 encodings of the unit per rank. Here the unit is cut into
// P shards (boundaries on multiples of kShardAlignment elements, so a bucket codec's buckets are
// the whole unit's); each rank
//   1. encodes every shard of its input and sends shard s's encoding to rank s (all-to-all);
//   2. decodes the P encodings of its own shard in rank order and averages them;
//   3. adds its server residual to that average, encodes it again, and keeps what the encoding
//      missed as the next step's server residual (error feedback on the partial sums, when the
//      spec's error feedback is on);
//   4. all-gathers the re-encoded shards, which every rank decodes into the result.
// Each rank sends 2 (P - 1) / P of an encoding of the unit where the all-gather sends P - 1 of
// them (1.5 against 3 at P = 4). Every rank ends with the same bits (it decodes the same bytes).
// The worker's error feedback (ErrorFeedback around this) subtracts `sent`, the decoding of this
// rank's own shard encodings. Not thread-safe (one communication thread, as every Compressor).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "compress/compressor.h"
#include "gradsync/error.h"

namespace gradsync {

class CompressedAllreduce final : public Compressor {
 public:
  // Shards start on multiples of this many elements (a multiple of every bucket size a codec
  // defaults to), or of a smaller power of two where the unit is too small to give every rank
  // a shard so aligned.
  static constexpr size_t kShardAlignment = 512;

  // `codec`: a CodecCompressor without a selection budget whose encodings of n values always
  // take encodedBytes(n) bytes (the quantizers), built without the unit's shapes (it encodes
  // shards, each as one tensor: a bucket codec's buckets run across the unit's tensors);
  // ConfigError naming `method` otherwise.
  // `serverFeedback`: keep the re-encoding's error (step 3) for the next exchange.
  CompressedAllreduce(std::unique_ptr<Compressor> codec, const std::string& method,
                      bool serverFeedback);

  Aggregation aggregation() const override { return Aggregation::kCompressedAllreduce; }
  // The codec's bytes for the unit as one encoding (the shards' add at most a bucket's
  // parameters each).
  size_t encodedBytes(size_t elements) const override { return codec_.encodedBytes(elements); }
  // On return `grad` holds the decoded, re-encoded average (the same on every rank) and
  // `sent` the decoding of this rank's own shard encodings.
  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;

  // The server residual (empty before the first exchange: its size is this rank's shard's),
  // then the codec's state.
  void saveState(StateWriter& out) const override;
  void loadState(StateReader& in) override;

  std::span<const float> serverResidual() const { return serverResidual_; }

  // The error for a method this exchange does not apply to.
  static ConfigError unavailable(const std::string& method);

  // Offsets of the P shards of `elements` values: P + 1 non-decreasing offsets from 0 to
  // `elements`. Pure; the same on every rank.
  static std::vector<size_t> shardBounds(size_t elements, int ranks);

 private:
  // Step 1: every shard's encoding into pieces_, back to back; `sent` gets their decoding.
  void encodeShards(ExchangeContext& context, std::span<const float> grad, std::span<float> sent,
                    const std::vector<size_t>& bounds, ExchangeStats& stats);
  // Steps 2 and 3: this rank's shard averaged from `received` (own part from `sent`),
  // corrected by the server residual, re-encoded into pieces_.
  void reduceOwnShard(ExchangeContext& context, std::span<const uint8_t> received,
                      std::span<const float> sent, const std::vector<size_t>& bounds,
                      ExchangeStats& stats);

  std::unique_ptr<Compressor> owner_;
  CodecCompressor& codec_;
  const bool serverFeedback_;
  std::vector<float> serverResidual_;
  std::vector<float> average_;     // this rank's shard, reused
  std::vector<uint8_t> pieces_;    // encodings sent, reused
  std::vector<uint8_t> piece_;     // one encoding, reused
  std::vector<uint8_t> received_;  // the P encodings of this rank's shard, reused
  std::vector<uint8_t> gathered_;  // every shard's re-encoding, reused
};

}  // namespace gradsync
