// allreduceInt8 (gradsync/collectives.h): the ring in 8 bits, blocks in int8_codec.h's format;
// see the public header for the contract. Unpipelined: one message per hop (the
// pseudo-gradients it is for are sent once per H steps).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "collectives/guard.h"
#include "collectives/int8_codec.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"

namespace gradsync::int8 {
namespace {

size_t chunksOf(size_t count) {
  return (count + kInt8ChunkElements - 1) / kInt8ChunkElements;
}

}  // namespace

size_t wireBytes(size_t count) {
  return chunksOf(count) * sizeof(float) + count;
}

// `values` quantized into `out` (wireBytes(values.size()) bytes): per chunk, scale =
// max|x| / 127 and q = x / scale rounded to nearest (ties to even), so |q| <= 127.
void quantize(std::span<const float> values, uint8_t* out) {
  auto* scales = reinterpret_cast<float*>(out);
  auto* q = reinterpret_cast<int8_t*>(out + chunksOf(values.size()) * sizeof(float));
  for (size_t c = 0; c < chunksOf(values.size()); ++c) {
    const size_t begin = c * kInt8ChunkElements;
    const size_t end = std::min(values.size(), begin + kInt8ChunkElements);
    float largest = 0;
    bool finite = true;
    for (size_t i = begin; i < end; ++i) {
      finite = finite && std::isfinite(values[i]);
      largest = std::max(largest, std::fabs(values[i]));
    }
    // A NaN or infinity has no int8: its chunk travels as scale NaN, so that a diverged sum
    // shows on every rank as NaN instead of being clamped into range.
    const float scale = finite ? largest / 127.0f : std::numeric_limits<float>::quiet_NaN();
    std::memcpy(scales + c, &scale, sizeof scale);
    // 1 / scale overflows when the scale is subnormal: such a chunk rounds to zeros.
    const float inverse = std::isnormal(scale) ? 1.0f / scale : 0.0f;
    for (size_t i = begin; i < end; ++i) {
      q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(values[i] * inverse), -127.0f, 127.0f));
    }
  }
}

void dequantize(const uint8_t* packed, size_t count, float* out, bool accumulate) {
  const auto* q = reinterpret_cast<const int8_t*>(packed + chunksOf(count) * sizeof(float));
  for (size_t c = 0; c < chunksOf(count); ++c) {
    float scale;
    std::memcpy(&scale, packed + c * sizeof(float), sizeof scale);
    const size_t end = std::min(count, (c + 1) * kInt8ChunkElements);
    for (size_t i = c * kInt8ChunkElements; i < end; ++i) {
      const float value = static_cast<float>(q[i]) * scale;
      out[i] = accumulate ? out[i] + value : value;
    }
  }
}

}  // namespace gradsync::int8

namespace gradsync {
namespace {

class Int8Ring {
 public:
  Int8Ring(Transport& transport, std::span<float> data, uint64_t tag)
      : t_(transport), data_(data), tag_(tag), size_(transport.size()), rank_(transport.rank()) {}

  void run(ReduceOp op) {
    for (int s = 0; s < size_ - 1; ++s) hop(mod(rank_ - s), mod(rank_ - s - 1), true);
    const int owned = mod(rank_ + 1);
    std::span<float> mine = block(owned);
    if (op == ReduceOp::kAverage) {
      for (float& x : mine) x *= 1.0f / static_cast<float>(size_);
    }
    packed_[owned].resize(int8::wireBytes(mine.size()));
    int8::quantize(mine, packed_[owned].data());
    int8::dequantize(packed_[owned].data(), mine.size(), mine.data(), false);  // everyone's bits
    for (int s = 0; s < size_ - 1; ++s) hop(mod(rank_ + 1 - s), mod(rank_ - s), false);
  }

 private:
  int mod(int r) const { return ((r % size_) + size_) % size_; }

  std::span<float> block(int b) const {
    const Block range = blockOf(data_.size(), size_, b);
    return data_.subspan(range.begin, range.size());
  }

  // Sends block `out` to the right and receives block `in` from the left. Reduce-scatter:
  // quantizes the partial sums it sends and adds what it receives to its own values;
  // allgather: forwards the packed bytes as received and dequantizes them in place.
  void hop(int out, int in, bool reducing) {
    packed_.resize(static_cast<size_t>(size_));
    if (reducing) {
      packed_[out].resize(int8::wireBytes(block(out).size()));
      int8::quantize(block(out), packed_[out].data());
    }
    packed_[in].resize(int8::wireBytes(block(in).size()));
    WorkPtr received = t_.recv(mod(rank_ - 1), tag_, packed_[in].data(), packed_[in].size());
    WorkPtr sent = t_.send(mod(rank_ + 1), tag_, packed_[out].data(), packed_[out].size());
    received->wait();
    sent->wait();
    int8::dequantize(packed_[in].data(), block(in).size(), block(in).data(), reducing);
  }

  Transport& t_;
  std::span<float> data_;
  const uint64_t tag_;
  const int size_, rank_;
  std::vector<std::vector<uint8_t>> packed_ = std::vector<std::vector<uint8_t>>(1);
};

}  // namespace

size_t int8WireBytes(size_t count) {
  return int8::wireBytes(count);
}

void allreduceInt8(Transport& transport, std::span<float> data, ReduceOp op,
                   const CollectiveOptions& options) {
  if (transport.size() == 1) {  // no messages: the same rounding as more ranks'
    std::vector<uint8_t> packed(int8::wireBytes(data.size()));
    int8::quantize(data, packed.data());
    int8::dequantize(packed.data(), data.size(), data.data(), false);
    return;
  }
  // Outside the body: its packed blocks are receive buffers, which must outlive the abort of a
  // failed run (guard.h).
  Int8Ring ring(transport, data, options.tag);
  detail::runCollective("allreduceInt8", transport, [&] { ring.run(op); });
}

}  // namespace gradsync
