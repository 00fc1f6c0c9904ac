// The encoding shared by the quantized methods (qsgd, terngrad, twobit, onebit, signsgd): a unit is
// cut into buckets, each bucket is described by a few float32 parameters (its scale, norm or
// means), and each element by a code of 1..8 bits. Wire layout, little-endian:
//
//   [parameters of bucket 0][parameters of bucket 1]...   kParams float32 per bucket
//   [codes of all elements, in unit order]                 bit_pack.h, bits() per element
//
// so an encoding of n elements in B buckets has exactly B * 4 * kParams + ceil(n * bits / 8)
// bytes. Buckets never straddle two tensors of a unit (a fusion bucket holds tensors of very
// different scales: a bias sharing a bucket with a weight matrix would be quantized with the
// matrix's scale): each tensor is cut into buckets of `bucket` elements, the last one shorter.
//
// A method supplies a Quantizer (the per-bucket arithmetic); BucketCodec does the layout, the
// packing and the validation of received bytes. Quantizer requirements:
//   static constexpr size_t kParams;            float32 parameters per bucket
//   static constexpr const char* kName;         the method, for error messages
//   int bits() const; uint8_t maxCode() const;  code width; larger codes are malformed input
//   void start(uint64_t seed);                  once per encode (stochastic methods seed here)
//   void analyse(std::span<const float> bucket, float* params);
//   optional: void analyseRun(std::span<const float> run, size_t bucket, float* params);
//     the parameters of consecutive buckets of `bucket` elements (the last one maybe fewer),
//     each bit for bit what analyse gives it, written one bucket after the other
//   optional: void elementCodes(std::span<const float> x, uint8_t* codes);
//     for a quantizer whose code of an element depends on nothing else (not on its bucket):
//     the codes of any consecutive elements, which quantize would give them
//   void quantize(std::span<const float> x, uint8_t* codes, const float* params);
//   void dequantizeAdd(std::span<const uint8_t> codes, float* out, const float* params) const;
// quantize and dequantizeAdd see a bucket in pieces of at most kCodeChunk elements.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "common/check.h"
#include "common/random.h"
#include "common/simd.h"
#include "compress/bit_pack.h"
#include "compress/compressor.h"
#include "gradsync/error.h"

namespace gradsync {

// Where the buckets of a unit lie. Built once per unit; no allocation per step.
class BucketLayout {
 public:
  // bucket == 0: one bucket per tensor. An empty `unit` means the shapes are unknown: the
  // buffer, whatever its size, is then one tensor.
  BucketLayout(std::span<const TensorShape> unit, size_t bucket);

  // Buckets of a buffer of `elements` values. Exact for the unit's size; for another size
  // (a cost estimate), the count of a single tensor of that size.
  size_t count(size_t elements) const;

  // Calls fn(begin, size) for every bucket of the unit's buffer, in order. `elements` must be
  // the unit's size (unless the shapes are unknown).
  template <class Fn>
  void forEach(size_t elements, Fn&& fn) const {
    if (tensors_.empty()) return forEachInTensor(0, elements, fn);
    GS_CHECK_EQ(elements, total_);
    size_t begin = 0;
    for (size_t size : tensors_) {
      forEachInTensor(begin, size, fn);
      begin += size;
    }
  }
  // forEach for the unit's size; for another size (a cost estimate), the buckets of a single
  // tensor of that size, as count() does.
  template <class Fn>
  void forEachOrEstimate(size_t elements, Fn&& fn) const {
    if (tensors_.empty() || elements != total_) return forEachInTensor(0, elements, fn);
    forEach(elements, fn);
  }

  // Calls fn(begin, size) for runs of consecutive buckets, in order: each run lies in one tensor
  // and holds at most `maxBuckets` buckets, all of bucket() elements but a tensor's last one. The
  // runs cover what forEach's buckets cover. maxBuckets >= 1.
  template <class Fn>
  void forEachRun(size_t elements, size_t maxBuckets, Fn&& fn) const {
    const size_t step = bucket_ > SIZE_MAX / maxBuckets ? SIZE_MAX : bucket_ * maxBuckets;
    if (tensors_.empty()) return forEachInTensor(0, elements, fn, step);
    GS_CHECK_EQ(elements, total_);
    size_t begin = 0;
    for (size_t size : tensors_) {
      forEachInTensor(begin, size, fn, step);
      begin += size;
    }
  }

  // Elements per bucket (SIZE_MAX: whole tensors).
  size_t bucket() const { return bucket_; }

 private:
  template <class Fn>
  void forEachInTensor(size_t begin, size_t size, Fn& fn) const {
    forEachInTensor(begin, size, fn, bucket_);
  }
  template <class Fn>
  void forEachInTensor(size_t begin, size_t size, Fn& fn, size_t step) const {
    for (size_t offset = 0; offset < size; offset += std::min(step, size - offset)) {
      fn(begin + offset, std::min(step, size - offset));
    }
  }

  std::vector<size_t> tensors_;  // sizes of the non-empty tensors ({0} if all are empty)
  size_t total_ = 0;             // elements of the unit
  size_t buckets_ = 0;           // buckets of the unit
  size_t bucket_;                // elements per bucket (SIZE_MAX: whole tensors)
};

// Reads the ",bucket=" option: an integer >= 1, or 0 for one bucket per tensor. Throws
// ConfigError naming `method`.
size_t bucketOption(const MethodArgs& args, const char* method, size_t fallback);

// Sum of f(x[i]) in double precision. Eight interleaved partial sums let the compiler
// vectorise the loop (a single running sum is a dependency chain it may not reorder).
template <class F>
double laneSum(std::span<const float> x, F f) {
  constexpr size_t kLanes = 8;
  double lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= x.size(); i += kLanes) {
    for (size_t j = 0; j < kLanes; ++j) lanes[j] += f(x[i + j]);
  }
  double sum = 0;
  for (; i < x.size(); ++i) sum += f(x[i]);
  for (double lane : lanes) sum += lane;
  return sum;
}

// Branch-free selects for the quantizers' loops: a ternary between floats compiles to a branch,
// mispredicted on every other element of a gradient, where these bit masks vectorise. The
// results are exactly the ternary's (the same bits, NaN included).
// pick ? b : a, for pick in {0, 1}.
inline float selectFloat(uint32_t pick, float a, float b) {
  const uint32_t mask = 0u - pick;
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & ~mask) |
                              (std::bit_cast<uint32_t>(b) & mask));
}
// negative ? -v : v, for negative in {0, 1} (negation flips the sign bit alone).
inline float negateIf(uint32_t negative, float v) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(v) ^ (negative << 31));
}

template <class Quantizer>
class BucketCodec final : public CodecCompressor {
 public:
  BucketCodec(const Quantizer& quantizer, std::span<const TensorShape> unit, size_t bucket)
      : quantizer_(quantizer), layout_(unit, bucket) {}

  size_t encodedBytes(size_t elements) const override {
    return layout_.count(elements) * kParamBytes + packedBytes(elements, quantizer_.bits());
  }

  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t seed) override {
    out.resize(encodedBytes(x.size()));
    switch (simd::active()) {
      case simd::Path::kAvx512:
        return encodeAvx512(x, out.data(), seed);
      case simd::Path::kAvx2:
        return encodeAvx2(x, out.data(), seed);
      case simd::Path::kScalar:
        return encodeLoop(x, out.data(), seed);
    }
  }

  void decodeAdd(std::span<const uint8_t> in, std::span<float> out) const override {
    const size_t expected = encodedBytes(out.size());
    if (in.size() != expected) {
      throw ProtocolError(fmt::format("{} encoding of {} elements has {} bytes, expected {}",
                                      Quantizer::kName, out.size(), in.size(), expected));
    }
    switch (simd::active()) {
      case simd::Path::kAvx512:
        return decodeAvx512(in.data(), out);
      case simd::Path::kAvx2:
        return decodeAvx2(in.data(), out);
      case simd::Path::kScalar:
        return decodeLoop(in.data(), out);
    }
  }

 private:
  static constexpr size_t kParamBytes = Quantizer::kParams * sizeof(float);
  // Buckets analysed before they are quantized: at most kRunBuckets, of kRunElements in all
  // unless one bucket is larger.
  static constexpr size_t kRunBuckets = 256;
  static constexpr size_t kRunElements = 4096;

  // The loops once per instruction set (common/simd.h): flatten inlines the quantizer's
  // arithmetic into each, where the compiler vectorises it for that target; the bits are the
  // same on every path (tests force each).
  [[gnu::flatten]] GS_TARGET_AVX512 void encodeAvx512(std::span<const float> x, uint8_t* out,
                                                      uint64_t seed) {
    encodeLoop(x, out, seed);
  }
  [[gnu::flatten]] GS_TARGET_AVX2 void encodeAvx2(std::span<const float> x, uint8_t* out,
                                                  uint64_t seed) {
    encodeLoop(x, out, seed);
  }
  [[gnu::flatten]] GS_TARGET_AVX512 void decodeAvx512(const uint8_t* in,
                                                      std::span<float> out) const {
    decodeLoop(in, out);
  }
  [[gnu::flatten]] GS_TARGET_AVX2 void decodeAvx2(const uint8_t* in, std::span<float> out) const {
    decodeLoop(in, out);
  }

  // `out` holds encodedBytes(x.size()) bytes. A run of buckets at a time: all of their
  // parameters, then all of their codes (a run of up to kRunElements is read from the first-level
  // cache the second time; a bucket larger than that is read twice, as it always was).
  void encodeLoop(std::span<const float> x, uint8_t* out, uint64_t seed) {
    quantizer_.start(seed);
    uint8_t* params = out;
    PackedWriter writer(quantizer_.bits(), out + layout_.count(x.size()) * kParamBytes);
    const size_t runBuckets = std::clamp<size_t>(kRunElements / layout_.bucket(), 1, kRunBuckets);
    layout_.forEachRun(x.size(), runBuckets, [&](size_t begin, size_t size) {
      const std::span<const float> run = x.subspan(begin, size);
      const size_t bucket = std::min(layout_.bucket(), size);
      const size_t buckets = (size - 1) / bucket + 1;
      float p[kRunBuckets * Quantizer::kParams];
      analyseRun(run, bucket, p);
      std::memcpy(params, p, buckets * kParamBytes);
      params += buckets * kParamBytes;
      quantizeRun(run, bucket, writer, p);
    });
    writer.finish();
  }

  // The parameters of a run's buckets (`bucket` elements each, the last one maybe fewer), by
  // the quantizer's analyseRun where it has one (several buckets at once).
  void analyseRun(std::span<const float> run, size_t bucket, float* params) {
    if constexpr (requires { quantizer_.analyseRun(run, bucket, params); }) {
      quantizer_.analyseRun(run, bucket, params);
    } else {
      for (size_t first = 0; first < run.size(); first += bucket) {
        quantizer_.analyse(run.subspan(first, std::min(bucket, run.size() - first)), params);
        params += Quantizer::kParams;
      }
    }
  }

  // The codes of a run's buckets into `writer`: by the quantizer's elementCodes where it has one
  // (as many elements at once as the writer takes), else a bucket at a time.
  void quantizeRun(std::span<const float> run, size_t bucket, PackedWriter& writer,
                   const float* params) {
    if constexpr (requires(uint8_t * codes) { quantizer_.elementCodes(run, codes); }) {
      quantizeInPieces(run, writer, [&](std::span<const float> x, uint8_t* codes) {
        quantizer_.elementCodes(x, codes);
      });
    } else {
      for (size_t first = 0; first < run.size(); first += bucket) {
        const float* p = params + first / bucket * Quantizer::kParams;
        quantizeInPieces(
            run.subspan(first, std::min(bucket, run.size() - first)), writer,
            [&](std::span<const float> x, uint8_t* codes) { quantizer_.quantize(x, codes, p); });
      }
    }
  }

  template <class Quantize>
  static void quantizeInPieces(std::span<const float> x, PackedWriter& writer,
                               Quantize&& quantize) {
    for (size_t done = 0; done < x.size();) {
      std::span<uint8_t> room = writer.room(x.size() - done);
      quantize(x.subspan(done, room.size()), room.data());
      writer.commit(room.size());
      done += room.size();
    }
  }

  // `in` holds encodedBytes(out.size()) bytes (checked by decodeAdd).
  void decodeLoop(const uint8_t* in, std::span<float> out) const {
    const uint8_t* params = in;
    const size_t paramBytes = layout_.count(out.size()) * kParamBytes;
    PackedReader reader(in + paramBytes, out.size(), quantizer_.bits(), quantizer_.maxCode());
    layout_.forEach(out.size(), [&](size_t begin, size_t size) {
      float p[Quantizer::kParams];
      std::memcpy(p, params, kParamBytes);
      params += kParamBytes;
      for (size_t done = 0; done < size;) {
        std::span<const uint8_t> codes = reader.next(size - done);
        quantizer_.dequantizeAdd(codes, out.data() + begin + done, p);
        done += codes.size();
      }
    });
  }

  Quantizer quantizer_;
  BucketLayout layout_;
};

}  // namespace gradsync
