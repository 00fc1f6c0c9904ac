#include "compress/compressed_allreduce.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "collectives/reduce.h"
#include "common/random.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

CodecCompressor& codecOf(Compressor* compressor, const std::string& method) {
  auto* codec = dynamic_cast<CodecCompressor*>(compressor);
  if (codec == nullptr || codec->sparseBudget() != nullptr) {
    throw CompressedAllreduce::unavailable(method);
  }
  return *codec;
}

// Whether `codec`'s encodings have the size its encodedBytes says (the all-to-all's and the
// all-gather's byte counts are computed, not exchanged).
bool fixedSize(CodecCompressor& codec) {
  std::vector<uint8_t> out;
  for (size_t n : {size_t{1}, size_t{1000}}) {
    std::vector<float> probe(n);
    for (size_t i = 0; i < n; ++i) probe[i] = static_cast<float>(i % 7) - 3.0f;
    codec.encode(probe, out, 1);
    if (out.size() != codec.encodedBytes(n)) return false;
  }
  return true;
}

// A rank's seeds: `which` = s < P for its encoding of shard s, P for its re-encoding.
uint64_t seedOf(const ExchangeContext& context, uint64_t which) {
  const uint64_t rank = static_cast<uint64_t>(context.transport.rank());
  return rng::mixSeed(rng::mixSeed(rng::mixSeed(context.seed, context.step), rank), which);
}

}  // namespace

CompressedAllreduce::CompressedAllreduce(std::unique_ptr<Compressor> codec,
                                         const std::string& method, bool serverFeedback)
    : owner_(std::move(codec)),
      codec_(codecOf(owner_.get(), method)),
      serverFeedback_(serverFeedback) {
  if (!fixedSize(codec_)) {
    throw ConfigError(
        fmt::format("{} has no compressed all-reduce: its encodings vary in size", method),
        {.hint = "use the all-gather (drop allreduce=on)"});
  }
}

ConfigError CompressedAllreduce::unavailable(const std::string& method) {
  return ConfigError(fmt::format("{} has no compressed all-reduce (allreduce=on)", method),
                     {.hint = "allreduce=on applies to the quantizers whose codes are "
                              "all-gathered: onebit, signsgd, qsgd, terngrad, twobit, rtn, "
                              "sparseloco"});
}

std::vector<size_t> CompressedAllreduce::shardBounds(size_t elements, int ranks) {
  const size_t p = static_cast<size_t>(ranks);
  const size_t even = (elements + p - 1) / p;
  // The largest power-of-two alignment up to kShardAlignment that leaves the last rank a
  // shard (alignment rounds the others' up); 1 where even shards cannot.
  size_t alignment = kShardAlignment;
  auto per = [&] { return (even + alignment - 1) / alignment * alignment; };
  while (alignment > 1 && per() * (p - 1) >= elements) alignment /= 2;
  std::vector<size_t> bounds(p + 1);
  for (size_t s = 0; s <= p; ++s) bounds[s] = std::min(elements, s * per());
  return bounds;
}

void CompressedAllreduce::exchange(ExchangeContext& context, std::span<float> grad,
                                   std::span<float> sent, ExchangeStats& stats) {
  Transport& transport = context.transport;
  const int ranks = transport.size();
  const int rank = transport.rank();
  const std::vector<size_t> bounds = shardBounds(grad.size(), ranks);
  auto length = [&](int s) { return bounds[s + 1] - bounds[s]; };

  encodeShards(context, grad, sent, bounds, stats);
  std::vector<size_t> sendBytes(ranks), recvBytes(ranks);
  for (int s = 0; s < ranks; ++s) {
    sendBytes[s] = codec_.encodedBytes(length(s));
    recvBytes[s] = codec_.encodedBytes(length(rank));
  }
  received_.resize(recvBytes[0] * static_cast<size_t>(ranks));
  alltoallvBytes(transport, pieces_, sendBytes, received_, recvBytes, context.collective);
  reduceOwnShard(context, received_, sent, bounds, stats);

  // Step 4: pieces_ holds only this rank's re-encoded shard; the others' arrive around it.
  std::vector<uint8_t>& all = gathered_;
  all.resize(std::accumulate(sendBytes.begin(), sendBytes.end(), size_t{0}));
  size_t offset = 0;
  for (int s = 0; s < rank; ++s) offset += sendBytes[s];
  std::copy(pieces_.begin(), pieces_.end(), all.begin() + static_cast<ptrdiff_t>(offset));
  allgatherv(transport, all, sendBytes, context.collective);
  const Nanos start = context.clock->now();
  std::fill(grad.begin(), grad.end(), 0.0f);
  offset = 0;
  for (int s = 0; s < ranks; ++s) {
    codec_.decodeAdd({all.data() + offset, sendBytes[s]}, grad.subspan(bounds[s], length(s)));
    offset += sendBytes[s];
  }
  stats.decodeSeconds += secondsSince(*context.clock, start);
}

void CompressedAllreduce::encodeShards(ExchangeContext& context, std::span<const float> grad,
                                       std::span<float> sent, const std::vector<size_t>& bounds,
                                       ExchangeStats& stats) {
  const Nanos start = context.clock->now();
  pieces_.clear();
  std::fill(sent.begin(), sent.end(), 0.0f);
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const size_t n = bounds[s + 1] - bounds[s];
    codec_.encode(grad.subspan(bounds[s], n), piece_, seedOf(context, s));
    if (piece_.size() != codec_.encodedBytes(n)) {
      throw InternalError("a compressed all-reduce's codec changed its encoding's size");
    }
    codec_.decodeAdd(piece_, sent.subspan(bounds[s], n));
    pieces_.insert(pieces_.end(), piece_.begin(), piece_.end());
  }
  stats.encodeSeconds += secondsSince(*context.clock, start);
}

void CompressedAllreduce::reduceOwnShard(ExchangeContext& context,
                                         std::span<const uint8_t> received,
                                         std::span<const float> sent,
                                         const std::vector<size_t>& bounds, ExchangeStats& stats) {
  Nanos start = context.clock->now();
  const int ranks = context.transport.size();
  const int rank = context.transport.rank();
  const size_t begin = bounds[rank];
  const size_t n = bounds[rank + 1] - begin;
  const size_t bytes = codec_.encodedBytes(n);
  average_.assign(n, 0.0f);
  // Summed in rank order (runs repeat bitwise), this rank's part as it decoded it itself.
  for (int r = 0; r < ranks; ++r) {
    if (r == rank) {
      addInto(average_.data(), sent.data() + begin, n);
    } else {
      codec_.decodeAdd(received.subspan(static_cast<size_t>(r) * bytes, bytes), average_);
    }
  }
  scale(average_.data(), n, 1.0f / static_cast<float>(ranks));
  stats.decodeSeconds += secondsSince(*context.clock, start);
  start = context.clock->now();
  if (serverFeedback_) {
    if (serverResidual_.size() != n) serverResidual_.assign(n, 0.0f);
    addInto(average_.data(), serverResidual_.data(), n);
  }
  codec_.encode(average_, pieces_, seedOf(context, static_cast<uint64_t>(ranks)));
  if (serverFeedback_) {
    // residual = corrected average - what its encoding decodes to
    std::fill(serverResidual_.begin(), serverResidual_.end(), 0.0f);
    codec_.decodeAdd(pieces_, serverResidual_);
    for (size_t i = 0; i < n; ++i) serverResidual_[i] = average_[i] - serverResidual_[i];
  }
  stats.encodeSeconds += secondsSince(*context.clock, start);
}

void CompressedAllreduce::saveState(StateWriter& out) const {
  out.write(serverResidual_);
  codec_.saveState(out);
}

void CompressedAllreduce::loadState(StateReader& in) {
  in.read(serverResidual_);
  codec_.loadState(in);
}

}  // namespace gradsync
