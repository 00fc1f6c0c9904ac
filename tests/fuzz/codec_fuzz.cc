// Feeds arbitrary bytes to every compressed-payload decoder (codec_cases.h: each registry
// method's CodecCompressor::decodeAdd and each pushable method's PushCodec::decodeAdd), as a
// hostile or broken peer could. A malformed encoding must throw ProtocolError and nothing else,
// never read or write out of bounds; and every encoding the encoder writes must decode.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "codec_cases.h"
#include "gradsync/error.h"

using namespace gradsync;
using namespace gradsync::fuzz;

namespace {

// Encodes the payload's floats (non-finite ones zeroed: gradients are finite) and decodes the
// result, which must succeed and take no more than the method's announced bytes.
void roundTrip(CodecUnderTest& codec, const CodecInput& in, bool budgeted) {
  // Byte copies: the payload is unaligned, and memcpy may not be given an empty vector's null.
  uint64_t seed = 0;
  std::span<const uint8_t> payload = in.payload;
  const size_t seedBytes = std::min(payload.size(), sizeof seed);
  std::copy_n(payload.data(), seedBytes, reinterpret_cast<uint8_t*>(&seed));
  payload = payload.subspan(seedBytes);
  std::vector<float> x(in.elements, 0.0f);
  std::copy_n(payload.data(), std::min(payload.size(), x.size() * sizeof(float)),
              reinterpret_cast<uint8_t*>(x.data()));
  for (float& v : x) {
    if (!std::isfinite(v)) v = 0.0f;
  }
  std::vector<uint8_t> encoding;
  codec.encode(x, encoding, seed);
  if (!budgeted && encoding.size() > codec.maxBytes(in.elements)) std::abort();
  std::vector<float> out(in.elements, 0.0f);
  codec.decodeAdd(encoding, out, seed);  // a ProtocolError here is a finding: not caught
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kCodecHeaderBytes) return 0;
  const CodecInput in = parseCodecInput({data, size});
  // Encoders need the unit's shapes (dgc keeps per-element state sized from them); only
  // decoding accepts a buffer of unknown shapes.
  const int layout = in.roundTrip && in.layout == 3 ? 0 : in.layout;
  const std::vector<TensorShape> unit = unitFor(in.elements, layout);
  CodecUnderTest codec(codecCases()[in.caseIndex], unit);
  const bool budgeted = in.budget && codec.budget(in.elements / 2);
  if (in.roundTrip) {
    roundTrip(codec, in, budgeted);
    return 0;
  }
  std::vector<float> out(in.elements, 0.0f);
  try {
    codec.decodeAdd(in.payload, out, kPushSeed);
  } catch (const ProtocolError&) {
  }
  return 0;
}
