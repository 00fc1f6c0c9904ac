// Bit packing of fixed-width codes (1..8 bits each) for the quantized encodings (qsgd, terngrad,
// onebit, signsgd). Code i of a stream occupies stream bits [i*bits, (i+1)*bits), least
// significant bit first, and stream bit j is bit j % 8 of byte j / 8 (little-endian within
// bytes), so `count` codes take exactly packedBytes(count, bits) bytes, with no padding but the
// last byte's unused high bits (written as zero).
//
// WideWriter and WideReader do the same for codes of 1..32 bits, one code at a time (the
// sparse-and-quantized encodings pack an index and a value code together, up to 24 bits).
//
// PackedWriter and PackedReader stream codes through a small staging buffer, so that a method
// quantizes and packs (or unpacks and dequantizes) in one pass without a code array the size
// of the unit. Neither allocates; both are single-threaded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace gradsync {

inline size_t packedBytes(size_t count, int bits) {
  return (count * static_cast<size_t>(bits) + 7) / 8;
}

// Writes the low `bits` bits of each code (higher bits are ignored) to out[0,
// packedBytes(codes.size(), bits)). bits in 1..8.
void packBits(std::span<const uint8_t> codes, int bits, uint8_t* out);
// Reads codes.size() codes from in[0, packedBytes(codes.size(), bits)). bits in 1..8.
void unpackBits(const uint8_t* in, int bits, std::span<uint8_t> codes);

// Codes staged between the quantizer and the packed stream. A multiple of 8, so that every
// flushed chunk ends on a byte boundary.
inline constexpr size_t kCodeChunk = 4096;

// Packs codes handed over in pieces of any size into `out`, which holds
// packedBytes(total, bits) bytes for the total number of codes written.
class PackedWriter {
 public:
  PackedWriter(int bits, uint8_t* out) : bits_(bits), out_(out) {}

  // Room for between 1 and `wanted` codes (wanted >= 1): fill a prefix, then commit it.
  std::span<uint8_t> room(size_t wanted) {
    size_t n = kCodeChunk - fill_;
    return {staging_ + fill_, wanted < n ? wanted : n};
  }
  void commit(size_t count) {
    fill_ += count;
    if (fill_ == kCodeChunk) flush();
  }
  // Packs the codes still staged; call once after the last commit.
  void finish() { flush(); }

 private:
  void flush();

  int bits_;
  uint8_t* out_;
  size_t fill_ = 0;
  uint8_t staging_[kCodeChunk];
};

// Unpacks `count` codes from `in` (packedBytes(count, bits) bytes, checked by the caller) in
// pieces. Codes above `maxCode` are malformed input: next() throws ProtocolError on them.
class PackedReader {
 public:
  PackedReader(const uint8_t* in, size_t count, int bits, uint8_t maxCode)
      : in_(in), left_(count), bits_(bits), maxCode_(maxCode) {}

  // The next codes, between 1 and `wanted` of them (wanted >= 1, at most the codes left).
  std::span<const uint8_t> next(size_t wanted) {
    if (pos_ == avail_) refill();
    size_t n = avail_ - pos_;
    std::span<const uint8_t> codes{staging_ + pos_, wanted < n ? wanted : n};
    pos_ += codes.size();
    return codes;
  }

 private:
  void refill();

  const uint8_t* in_;
  size_t left_;
  int bits_;
  uint8_t maxCode_;
  size_t pos_ = 0;
  size_t avail_ = 0;
  uint8_t staging_[kCodeChunk];
};

// Writes codes of `bits` bits (1..32; higher bits of a code are ignored) to `out`, which holds
// packedBytes(count, bits) bytes for `count` codes. Single-threaded, no allocation.
class WideWriter {
 public:
  WideWriter(int bits, uint8_t* out) : bits_(bits), mask_(lowMask(bits)), out_(out) {}

  void put(uint32_t code) {
    word_ |= (code & mask_) << fill_;
    fill_ += bits_;
    for (; fill_ >= 8; fill_ -= 8, word_ >>= 8) *out_++ = static_cast<uint8_t>(word_);
  }
  // Writes the last partial byte; call once after the last put.
  void finish() {
    if (fill_ > 0) *out_++ = static_cast<uint8_t>(word_);
    word_ = 0;
    fill_ = 0;
  }

  static uint64_t lowMask(int bits) { return (uint64_t{1} << bits) - 1; }

 private:
  int bits_;
  uint64_t mask_;
  uint8_t* out_;
  uint64_t word_ = 0;
  int fill_ = 0;  // bits in word_ not yet written
};

// Reads codes of `bits` bits (1..32) written by WideWriter. Reads a byte only when a code needs
// it, so reading `count` codes touches exactly packedBytes(count, bits) bytes (the caller checks
// that the input holds them).
class WideReader {
 public:
  WideReader(int bits, const uint8_t* in)
      : bits_(bits), mask_(WideWriter::lowMask(bits)), in_(in) {}

  uint32_t get() {
    for (; fill_ < bits_; fill_ += 8) word_ |= static_cast<uint64_t>(*in_++) << fill_;
    const auto code = static_cast<uint32_t>(word_ & mask_);
    word_ >>= bits_;
    fill_ -= bits_;
    return code;
  }

 private:
  int bits_;
  uint64_t mask_;
  const uint8_t* in_;
  uint64_t word_ = 0;
  int fill_ = 0;  // bits in word_ not yet read
};

}  // namespace gradsync
