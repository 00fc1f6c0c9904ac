// What codec_fuzz decodes, shared with the seed generator (make_seeds.cc) so that the committed
// seeds pick the cases they were written for.
//
// A case is a compression spec and a side: the ring's CodecCompressor::decodeAdd (every
// all-gathered rank's encoding), or a parameter server's PushCodec::decodeAdd (every worker's
// push, which also covers the linear methods' byte decoding: fp16, randomk). The list is built
// from the registry, so a method added there is fuzzed without touching this file.
//
// Input layout: 4 header bytes, then the payload.
//   byte 0          the case, modulo the number of cases
//   bytes 1-2       the unit's element count n, little-endian, modulo 16384 (past kCodeChunk,
//                   so that the bit-packed codes are read in more than one chunk)
//   byte 3 & 3      the unit's tensors: 0 one of n; 1 two (n/2, rest); 2 three, the middle one
//                   empty; 3 no shapes (the buffer is one tensor)
//   byte 3 & 4      a sparse budget is set first (p3's slices: any pair count is then valid)
//   byte 3 & 8      round trip: the payload is an 8-byte seed and float32 values (zero-padded
//                   to n) to encode; the encoding must then decode without an error
//   otherwise       the payload is an encoding from the network, decoded into n zeros (a push
//                   with kPushSeed)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/push_codec.h"
#include "compress/registry.h"
#include "compress/spec.h"
#include "gradsync/error.h"

namespace gradsync::fuzz {

struct CodecCase {
  std::string text;   // as on the command line
  CompressSpec spec;  // parsed once: parsing builds a probe compressor, slower than a decode
  bool push = false;
  std::string label() const { return (push ? "push-" : "") + text; }
};

// Non-default options that change the decoder's layout or acceptance (bucket sizes, code
// widths, densities). A spec the registry refuses (an option renamed) is left out.
inline constexpr const char* kCodecVariants[] = {
    "topk:0.5",
    "mstopk:0.5,iters=3",
    "dgc:0.5,warmup=4",
    "qsgd:1,bucket=3",
    "qsgd:127,bucket=0",
    "onebit,bucket=5",
    "signsgd,bucket=5",
    "twobit:2",
    "rtn:2,bucket=3",
    "rtn:8,bucket=0",
    "sparseloco:0.5,chunk=3,bits=8",
    "sparseloco:1,chunk=1",
};

inline bool isCodec(const CompressSpec& spec) {
  const TensorShape probe = tensorShape("probe", {64});
  auto made = findMethod(spec.method).make(spec.args, {&probe, 1});
  return dynamic_cast<CodecCompressor*>(made.get()) != nullptr;
}

inline const std::vector<CodecCase>& codecCases() {
  static const std::vector<CodecCase> cases = [] {
    std::vector<CodecCase> list;
    for (const MethodInfo& method : compressionMethods()) {
      const CompressSpec spec = CompressSpec::parse(method.name);
      if (isCodec(spec)) list.push_back({method.name, spec, false});
      if (PushCodec::pushable(spec)) list.push_back({method.name, spec, true});
    }
    for (const char* text : kCodecVariants) {
      try {
        const CompressSpec spec = CompressSpec::parse(text);
        if (isCodec(spec)) list.push_back({text, spec, false});
      } catch (const ConfigError&) {
      }
    }
    return list;
  }();
  return cases;
}

struct CodecInput {
  size_t caseIndex = 0;
  size_t elements = 0;
  int layout = 0;
  bool budget = false;
  bool roundTrip = false;
  std::span<const uint8_t> payload;
};

inline constexpr size_t kCodecHeaderBytes = 4;
inline constexpr size_t kMaxCodecElements = 16383;
// The seed a push is decoded with; the seeds' pushes are encoded with it.
inline constexpr uint64_t kPushSeed = 0x5eed;

inline std::array<uint8_t, kCodecHeaderBytes> codecHeader(size_t caseIndex, size_t elements,
                                                          int layout, bool budget, bool roundTrip) {
  return {static_cast<uint8_t>(caseIndex), static_cast<uint8_t>(elements & 0xff),
          static_cast<uint8_t>(elements >> 8),
          static_cast<uint8_t>((layout & 3) | (budget ? 4 : 0) | (roundTrip ? 8 : 0))};
}

inline CodecInput parseCodecInput(std::span<const uint8_t> bytes) {
  CodecInput in;
  in.caseIndex = bytes[0] % codecCases().size();
  in.elements = (bytes[1] | (size_t{bytes[2]} << 8)) & kMaxCodecElements;
  in.layout = bytes[3] & 3;
  in.budget = (bytes[3] & 4) != 0;
  in.roundTrip = (bytes[3] & 8) != 0;
  in.payload = bytes.subspan(kCodecHeaderBytes);
  return in;
}

inline std::vector<TensorShape> unitFor(size_t n, int layout) {
  const auto shape = [](const char* name, size_t elements) {
    return tensorShape(name, {static_cast<int64_t>(elements)});
  };
  switch (layout) {
    case 0:
      return {shape("w", n)};
    case 1:
      return {shape("w", n / 2), shape("b", n - n / 2)};
    case 2:
      return {shape("w", n / 3), shape("empty", 0), shape("b", n - n / 3)};
    default:
      return {};
  }
}

// One case's decoder (and encoder) for one unit.
class CodecUnderTest {
 public:
  CodecUnderTest(const CodecCase& c, std::span<const TensorShape> unit) {
    if (c.push) {
      push_ = std::make_unique<PushCodec>(c.spec, unit);
    } else {
      method_ = findMethod(c.spec.method).make(c.spec.args, unit);
      codec_ = dynamic_cast<CodecCompressor*>(method_.get());
    }
  }

  // Sets a selection budget of k, if the method has one; returns whether it had.
  bool budget(size_t k) {
    SparseBudget* budget = method_ ? method_->sparseBudget() : nullptr;
    if (budget != nullptr) budget->setBudget(k);
    return budget != nullptr;
  }
  void encode(std::span<const float> x, std::vector<uint8_t>& out, uint64_t seed) {
    if (push_) return push_->encode(x, out, seed);
    codec_->encode(x, out, seed);
  }
  // `seed`: a push is decoded with the seed it was encoded with (codecs carry theirs inside).
  void decodeAdd(std::span<const uint8_t> in, std::span<float> out, uint64_t seed) const {
    if (push_) return push_->decodeAdd(in, out, seed);
    codec_->decodeAdd(in, out);
  }
  // The most bytes an encoding of n elements may take (unbudgeted).
  size_t maxBytes(size_t n) const { return push_ ? push_->maxBytes() : codec_->encodedBytes(n); }

 private:
  std::unique_ptr<Compressor> method_;
  CodecCompressor* codec_ = nullptr;
  std::unique_ptr<PushCodec> push_;
};

}  // namespace gradsync::fuzz
