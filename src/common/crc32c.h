// CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, as iSCSI, ext4 and LevelDB use it), the
// check an elastic round's members compare their state by (common/state_bytes.h): on x86-64 it
// runs at memory speed with SSE4.2's crc32 instruction (common/simd.h's avx2 and avx512 paths,
// 2.5x zlib's CRC-32 here), from a table on the scalar path; every path gives the same value.
// Thread-safe (a pure function).
#pragma once

#include <cstddef>
#include <cstdint>

namespace gradsync {

// The CRC-32C of `size` bytes at `data`, extending `crc`, the CRC-32C of the bytes before them
// (0 for none): crc32c(crc32c(0, a), b) is the CRC-32C of a followed by b.
uint32_t crc32c(uint32_t crc, const void* data, size_t size);

}  // namespace gradsync
