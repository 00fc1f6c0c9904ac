#include "compress/compressor.h"

#include <algorithm>
#include <chrono>

#include "collectives/int8_codec.h"
#include "collectives/reduce.h"
#include "common/half.h"
#include "common/random.h"
#include "common/units.h"

namespace gradsync {

double MethodArgs::number(const std::string& key, double fallback) const {
  for (const auto& [k, v] : keys) {
    if (k == key) return parseNumber(v, key);
  }
  return fallback;
}

const char* aggregationName(Aggregation aggregation) {
  switch (aggregation) {
    case Aggregation::kAllreduce:
      return "allreduce";
    case Aggregation::kAllgather:
      return "allgather";
    case Aggregation::kTree:
      return "tree";
    case Aggregation::kHierarchical:
      return "hierarchical";
    case Aggregation::kCompressedAllreduce:
      return "compressed-allreduce";
  }
  return "?";
}

// Every rank sums the decoded encodings in rank order, so all ranks hold bitwise-identical
// results (the optimizer steps must not drift apart).
void CodecCompressor::exchange(ExchangeContext& context, std::span<float> grad,
                               std::span<float> sent, ExchangeStats& stats) {
  const int rank = context.transport.rank();
  Nanos start = context.clock->now();
  std::vector<uint8_t>& mine = encoding_;
  encode(grad, mine,
         rng::mixSeed(rng::mixSeed(context.seed, context.step), static_cast<uint64_t>(rank)));
  stats.encodeSeconds += secondsSince(*context.clock, start);
  auto all = allgatherBytes(context.transport, mine, context.collective);
  start = context.clock->now();
  std::fill(sent.begin(), sent.end(), 0.0f);
  decodeAdd(all[rank], sent);
  std::fill(grad.begin(), grad.end(), 0.0f);
  for (int r = 0; r < context.transport.size(); ++r) {
    if (r == rank) {
      addInto(grad.data(), sent.data(), grad.size());
    } else {
      decodeAdd(all[r], grad);
    }
  }
  scale(grad.data(), grad.size(), 1.0f / static_cast<float>(context.transport.size()));
  stats.decodeSeconds += secondsSince(*context.clock, start);
}

size_t LinearCompressor::encodedBytes(size_t elements) const {
  switch (wire()) {
    case Wire::kHalf:
      return codeLength(elements) * sizeof(uint16_t);
    case Wire::kInt8:
      return int8::wireBytes(codeLength(elements));
    case Wire::kFloat:
      break;
  }
  return codeLength(elements) * sizeof(float);
}

void LinearCompressor::exchange(ExchangeContext& context, std::span<float> grad,
                                std::span<float> sent, ExchangeStats& stats) {
  const uint64_t seed = rng::mixSeed(context.seed, context.step);
  const float ranks = static_cast<float>(context.transport.size());
  Nanos start = context.clock->now();
  std::vector<float>& code = code_;
  std::vector<uint16_t>& half = half_;
  code.resize(codeLength(grad.size()));
  if (wire() == Wire::kHalf) {
    half.resize(code.size());
    if (identityCode()) {
      halfFromFloat(grad.data(), half.data(), grad.size());
    } else {
      encode(grad, code, seed);
      halfFromFloat(code.data(), half.data(), code.size());
    }
    floatFromHalf(half.data(), code.data(), code.size());  // what the others will receive
  } else {
    encode(grad, code, seed);
  }
  stats.encodeSeconds += secondsSince(*context.clock, start);
  start = context.clock->now();
  if (wire() == Wire::kInt8) {
    // What this rank sends: its code quantized as a first hop would (later hops quantize
    // partial sums, which no rank's own contribution can be told apart in).
    packed_.resize(int8::wireBytes(code.size()));
    int8::quantize(code, packed_.data());
    std::vector<float> roundTrip(code.size());
    int8::dequantize(packed_.data(), code.size(), roundTrip.data(), false);
    decode(roundTrip, sent, seed);
  } else {
    decode(code, sent, seed);
  }
  stats.decodeSeconds += secondsSince(*context.clock, start);
  if (wire() == Wire::kHalf) {
    allreduceHalf(context.transport, half, context.collective);
    floatFromHalf(half.data(), code.data(), code.size());
  } else if (wire() == Wire::kInt8) {
    allreduceInt8(context.transport, code, ReduceOp::kSum, context.collective);
  } else {
    allreduce(context.transport, code, ReduceOp::kSum, context.collective);
  }
  start = context.clock->now();
  scale(code.data(), code.size(), 1.0f / ranks);
  decode(code, grad, seed);
  stats.decodeSeconds += secondsSince(*context.clock, start);
}

}  // namespace gradsync
