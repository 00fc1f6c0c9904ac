// The int8 ring's wire format (int8_ring.cc, gradsync/collectives.h allreduceInt8), for what
// else sends values that way (the int8 compressor's pushes to parameter servers): a block is
// its chunks' float scales, then one int8 per value. Per chunk of kInt8ChunkElements, scale =
// max|x| / 127 and q = x / scale rounded to nearest (ties to even); a chunk of zeros has scale 0,
// a chunk holding a NaN or infinity has scale NaN (it decodes to NaNs), a chunk whose scale is
// subnormal has every q 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gradsync::int8 {

// Bytes of `count` values (int8WireBytes).
size_t wireBytes(size_t count);
// `values` into `out` (wireBytes(values.size()) bytes).
void quantize(std::span<const float> values, uint8_t* out);
// `packed` (of `count` values) into `out`, or added to it (`accumulate`).
void dequantize(const uint8_t* packed, size_t count, float* out, bool accumulate);

}  // namespace gradsync::int8
