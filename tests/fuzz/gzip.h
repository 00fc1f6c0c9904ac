// gzip compression of a buffer in memory, for the IDX fuzzer and its seeds: the reader takes
// .gz files only.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

namespace gradsync::fuzz {

// A complete gzip stream (windowBits 16 + 15: gzip header, no name, mtime 0, so the same input
// always gives the same bytes). `level` 1 in the fuzzer, where only validity matters.
inline std::vector<uint8_t> gzip(std::span<const uint8_t> raw, int level = 1) {
  z_stream stream{};
  if (deflateInit2(&stream, level, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    std::abort();
  }
  std::vector<uint8_t> out(deflateBound(&stream, raw.size()));
  // zlib's API is not const-correct; it does not write through next_in.
  stream.next_in = const_cast<Bytef*>(raw.data());
  stream.avail_in = static_cast<uInt>(raw.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  if (deflate(&stream, Z_FINISH) != Z_STREAM_END) std::abort();
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

}  // namespace gradsync::fuzz
