// hitopk (hitopk.h): Shi et al.'s HiTopKComm over the transport's topology.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "collectives/guard.h"
#include "collectives/reduce.h"
#include "common/check.h"
#include "common/half.h"
#include "compress/impl/hitopk.h"
#include "compress/impl/methods.h"
#include "compress/select.h"
#include "compress/sparse_selection.h"
#include "compress/threshold_select.h"
#include "gradsync/error.h"
#include "gradsync/topology.h"
#include "transport/group_transport.h"

namespace gradsync::methods {
namespace {

// The ranks of this rank's host and of its cross group (every rank its own host when the
// topology is unknown or irregular).
struct Groups {
  std::vector<int> local, cross;
};

Groups groupsOf(const Transport& transport) {
  const Topology* topology = transport.topology();
  if (topology != nullptr && topology->regular() && topology->size() == transport.size()) {
    return {topology->localGroup(transport.rank()), topology->crossGroup(transport.rank())};
  }
  Groups flat{{transport.rank()}, {}};
  for (int r = 0; r < transport.size(); ++r) flat.cross.push_back(r);
  return flat;
}

}  // namespace

size_t HiTopK::listBytes(size_t k, bool half) {
  return 4 + k * (4 + (half ? 2 : 4));
}

HiTopK::HiTopK(double density, int iterations, bool errorFeedback, bool half, size_t bypass)
    : density_(density),
      errorFeedback_(errorFeedback),
      half_(half),
      bypass_(bypass),
      selector_(iterations) {}

size_t HiTopK::encodedBytes(size_t elements) const {
  return listBytes(selectionCount(elements, density_), half_);
}

void HiTopK::exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                      ExchangeStats& stats) {
  GS_CHECK_EQ(grad.size(), sent.size());
  Transport& transport = context.transport;
  if (grad.size() < bypass_) {  // small: dense, all of it sent
    std::copy(grad.begin(), grad.end(), sent.begin());
    allreduce(transport, grad, ReduceOp::kAverage, context.collective);
    return;
  }
  const Groups groups = groupsOf(transport);
  detail::runCollective("hitopk", transport, [&] {
    GroupTransport local(transport, groups.local);
    GroupTransport cross(transport, groups.cross);
    reduceScatter(local, grad, ReduceOp::kSum, context.collective);
    const Block own = blockOf(grad.size(), local.size(), local.rank());
    std::span<float> shard = grad.subspan(own.begin, own.size());
    std::fill(sent.begin(), sent.end(), 0.0f);

    // Every rank of the cross group has a shard of the same size, so lists of the same length.
    k_ = selectionCount(shard.size(), density_);
    const size_t bytes = listBytes(k_, half_);
    lists_.resize(bytes * cross.size());
    Nanos start = context.clock->now();
    selectAndEncode(shard, sent.subspan(own.begin, own.size()),
                    lists_.data() + cross.rank() * bytes);
    stats.encodeSeconds += secondsSince(*context.clock, start);
    std::vector<size_t> counts(cross.size(), bytes);
    allgatherv(cross, lists_, counts, context.collective);

    start = context.clock->now();
    std::fill(shard.begin(), shard.end(), 0.0f);
    for (int r = 0; r < cross.size(); ++r) {
      addShardList({lists_.data() + r * bytes, bytes}, k_, half_, shard, groups.cross[r]);
    }
    scale(shard.data(), shard.size(), 1.0f / static_cast<float>(transport.size()));
    stats.decodeSeconds += secondsSince(*context.clock, start);
    allgather(local, grad, context.collective);
  });
}

// Writes this rank's list of k_ pairs at `out` and what it decodes to into `sentShard`; the
// residual keeps the rest.
void HiTopK::selectAndEncode(std::span<float> shard, std::span<float> sentShard, uint8_t* out) {
  if (errorFeedback_) {
    if (residual_.empty()) residual_.assign(shard.size(), 0.0f);
    if (residual_.size() != shard.size()) {
      throw DataError(
          fmt::format("hitopk: a residual of {} elements does not fit this rank's "
                      "shard of {} (a checkpoint of another topology?)",
                      residual_.size(), shard.size()));
    }
    addInto(shard.data(), residual_.data(), shard.size());
  }
  selector_.select(shard, k_, indices_);
  GS_CHECK_EQ(indices_.size(), k_);
  const auto count = static_cast<uint32_t>(k_);
  std::memcpy(out, &count, 4);
  std::memcpy(out + 4, indices_.data(), k_ * 4);
  uint8_t* values = out + 4 + k_ * 4;
  for (size_t i = 0; i < k_; ++i) {
    float value = shard[indices_[i]];
    if (half_) {
      const uint16_t h = halfFromFloat(value);
      std::memcpy(values + 2 * i, &h, 2);
      value = floatFromHalf(h);
    } else {
      std::memcpy(values + 4 * i, &value, 4);
    }
    sentShard[indices_[i]] = value;
  }
  if (errorFeedback_) {
    for (size_t i = 0; i < shard.size(); ++i) residual_[i] = shard[i] - sentShard[i];
  }
}

void addShardList(std::span<const uint8_t> list, size_t k, bool half, std::span<float> shard,
                  int sender) {
  uint32_t count = 0;
  if (list.size() >= 4) std::memcpy(&count, list.data(), 4);
  auto malformed = [&](const std::string& why) {
    throw ProtocolError(fmt::format("hitopk: malformed list from rank {}: {}", sender, why),
                        {.peer = sender, .operation = "hitopk decode"});
  };
  if (list.size() < 4 || count != k || list.size() != HiTopK::listBytes(count, half)) {
    malformed(fmt::format("{} bytes with {} pairs where {} were expected", list.size(), count, k));
  }
  const uint8_t* values = list.data() + 4 + size_t{count} * 4;
  uint32_t previous = 0;
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t index = 0;
    std::memcpy(&index, list.data() + 4 + size_t{i} * 4, 4);
    if (index >= shard.size() || (i > 0 && index <= previous)) {
      malformed(fmt::format("index {} (after {}) in a shard of {}", index, previous, shard.size()));
    }
    previous = index;
    float value = 0;
    if (half) {
      uint16_t h = 0;
      std::memcpy(&h, values + 2 * size_t{i}, 2);
      value = floatFromHalf(h);
    } else {
      std::memcpy(&value, values + 4 * size_t{i}, 4);
    }
    shard[index] += value;
  }
}

std::unique_ptr<Compressor> makeHiTopK(const MethodArgs& args, std::span<const TensorShape>) {
  const double density = checkedDensity(args, "hitopk");
  const int iterations = checkedIterations(args, "hitopk");
  const double half = args.number("fp16", 1);
  if (half != 0 && half != 1) throw ConfigError("hitopk fp16 must be 1 (values as half) or 0");
  const double bypass = args.number("bypass", 16384);
  if (!(bypass >= 0 && bypass == std::floor(bypass))) {
    throw ConfigError(fmt::format("hitopk bypass needs a number of elements >= 0, got {}", bypass));
  }
  return std::make_unique<HiTopK>(density, iterations, args.errorFeedback, half == 1,
                                  static_cast<size_t>(bypass));
}

}  // namespace gradsync::methods
