// The state an object carries from one training step to the next (a compressor's residual,
// PowerSGD's Q, the delayed strategies' last global models...) as bytes, for checkpoints: each
// object writes its arrays in a fixed order and reads them back in the same order.
//
// Format: each array is its element count (uint64) followed by its elements, in the host's byte
// order (checkpoints are resumed on machines of the same kind: x86-64 or AArch64, both
// little-endian). Not thread-safe; the reader keeps a view of bytes the caller owns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace gradsync {

class StateWriter {
 public:
  // A writer that keeps nothing and only hashes and counts what it is given (hash(), size()):
  // the CRC32 of the bytes a real writer would hold, without holding them. An elastic round's
  // members compare what they hold before anything moves (torch/elastic/state.h), and the one
  // that sends reserve()s the size counted, so that a large state is written into one buffer
  // instead of doubling through buffers whose copies and first touches cost more than the
  // writes (docs/cluster.md).
  static StateWriter hasher() {
    StateWriter w;
    w.hashing_ = true;
    return w;
  }
  template <typename T>
  void write(std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    writeRaw(values.size(), values.data(), values.size_bytes());
  }
  template <typename T>
  void write(const std::vector<T>& values) {
    write(std::span<const T>(values));
  }
  void write(uint64_t value) { write(std::span<const uint64_t>(&value, 1)); }
  // Room for `size` bytes in all, so that writes up to it do not reallocate.
  void reserve(size_t size);

  // The bytes written so far (a hasher's: none; size() counts them).
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }
  size_t size() const { return hashing_ ? counted_ : bytes_.size(); }
  // A hasher's CRC32 of every byte written so far: the CRC32 of bytes() of a real writer given
  // the same writes (0 for a writer that is not a hasher).
  uint32_t hash() const { return crc_; }

 private:
  void writeRaw(uint64_t count, const void* data, size_t size);
  void hashRaw(const void* data, size_t size);
  std::vector<uint8_t> bytes_;
  bool hashing_ = false;
  size_t counted_ = 0;  // what a hasher was given
  uint32_t crc_ = 0;    // a hasher's CRC32 so far
};

// Reads what a StateWriter wrote. Every mismatch (fewer bytes than an array needs, an array of
// another length than expected, bytes left over) throws DataError naming `what`, the state's
// owner (e.g. "compressor state of unit 3"), so a checkpoint of another run is refused clearly.
class StateReader {
 public:
  StateReader(std::span<const uint8_t> bytes, std::string what)
      : bytes_(bytes), what_(std::move(what)) {}

  // Reads an array of exactly `into.size()` elements into `into`.
  template <typename T>
  void readExact(std::span<T> into) {
    static_assert(std::is_trivially_copyable_v<T>);
    const uint64_t count = readCount(sizeof(T));
    if (count != into.size()) mismatch(count, into.size());
    take(into.data(), into.size_bytes());
  }
  template <typename T>
  void readExact(std::vector<T>& into) {
    readExact(std::span<T>(into));
  }
  // Reads an array of any length, resizing `into`.
  template <typename T>
  void read(std::vector<T>& into) {
    static_assert(std::is_trivially_copyable_v<T>);
    into.resize(readCount(sizeof(T)));
    take(into.data(), into.size() * sizeof(T));
  }
  uint64_t readU64() {
    uint64_t value = 0;
    readExact(std::span<uint64_t>(&value, 1));
    return value;
  }
  // Throws unless every byte was read.
  void expectEnd() const;
  bool atEnd() const { return at_ == bytes_.size(); }
  const std::string& what() const { return what_; }

 private:
  // Reads an element count and checks that count * elementSize bytes follow.
  uint64_t readCount(size_t elementSize);
  void take(void* into, size_t size);
  [[noreturn]] void mismatch(uint64_t stored, size_t expected) const;

  std::span<const uint8_t> bytes_;
  size_t at_ = 0;
  std::string what_;
};

}  // namespace gradsync
