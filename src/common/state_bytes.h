// The state an object carries from one training step to the next (a compressor's residual,
// PowerSGD's Q, the delayed strategies' last global models...) as bytes, for checkpoints: each
// object writes its arrays in a fixed order and reads them back in the same order.
//
// Format: each array is its element count (uint64) followed by its elements, in the host's byte
// order (checkpoints are resumed on machines of the same kind: x86-64 or AArch64, both
// little-endian). Not thread-safe; the reader keeps a view of bytes the caller owns.
//
// Bulk arrays (writeBulk/readBulk: a tensor's bytes) are arrays like the others, except between
// a gatherer and a scatterer: the gatherer's bytes hold only their counts and segments() says
// where their bytes lie, so that they can be sent from there; a scatterer reading those bytes
// lists where each bulk array goes (destinations()), so that they can be received there. An
// elastic round gives a joiner the job's state so, without a serialised copy on either side
// (torch/elastic/state.h).
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
  // the CRC-32C (common/crc32c.h) of the bytes a real writer would hold, without holding them. An
  // elastic round's members compare what they hold before anything moves (torch/elastic/state.h),
  // and the one that sends reserve()s the size counted, so that a large state is written into one
  // buffer instead of doubling through buffers whose copies and first touches cost more than the
  // writes (docs/cluster.md).
  static StateWriter hasher() {
    StateWriter w;
    w.mode_ = Mode::kHash;
    return w;
  }
  // A writer that keeps every array but the bulk ones, of which it keeps the counts and lists
  // the bytes (segments()).
  static StateWriter gatherer() {
    StateWriter w;
    w.mode_ = Mode::kGather;
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
  // An array like write()'s, but a gatherer lists its bytes (segments()) without copying them:
  // they must stay as they are until the segments are sent.
  void writeBulk(std::span<const uint8_t> bytes);
  // Room for `size` bytes in all, so that writes up to it do not reallocate.
  void reserve(size_t size);

  // The bytes written so far (a hasher's: none; size() counts them).
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t> take() { return std::move(bytes_); }
  size_t size() const { return mode_ == Mode::kHash ? counted_ : bytes_.size(); }
  // What a writer given the same writes would hold: size(), but for a gatherer its bytes with
  // every bulk array's.
  size_t writtenSize() const { return counted_; }
  // A gatherer's bulk arrays, in the order written (none for the other writers).
  const std::vector<std::span<const uint8_t>>& segments() const { return segments_; }
  // A hasher's CRC-32C of every byte written so far: that of bytes() of a real writer given the
  // same writes (0 for a writer that is not a hasher).
  uint32_t hash() const { return crc_; }

 private:
  void writeRaw(uint64_t count, const void* data, size_t size);
  void append(uint64_t count, const void* data, size_t size);
  void hashRaw(const void* data, size_t size);
  enum class Mode { kWrite, kHash, kGather };
  std::vector<uint8_t> bytes_;
  std::vector<std::span<const uint8_t>> segments_;  // a gatherer's
  Mode mode_ = Mode::kWrite;
  size_t counted_ = 0;  // writtenSize()
  uint32_t crc_ = 0;    // a hasher's CRC-32C so far
};

// Reads what a StateWriter wrote. Every mismatch (fewer bytes than an array needs, an array of
// another length than expected, bytes left over) throws DataError naming `what`, the state's
// owner (e.g. "compressor state of unit 3"), so a checkpoint of another run is refused clearly.
class StateReader {
 public:
  StateReader(std::span<const uint8_t> bytes, std::string what)
      : bytes_(bytes), what_(std::move(what)) {}
  // A reader of a gatherer's bytes: readBulk() lists where each bulk array goes.
  static StateReader scatterer(std::span<const uint8_t> bytes, std::string what) {
    StateReader r(bytes, std::move(what));
    r.scattering_ = true;
    return r;
  }

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
  // Reads a bulk array of exactly `into.size()` bytes into `into`; a scatterer reads its count
  // only and lists `into` (destinations()), which must stay valid until the bytes are received.
  void readBulk(std::span<uint8_t> into);
  bool scattering() const { return scattering_; }
  // A scatterer's bulk arrays' places, in the order read.
  const std::vector<std::span<uint8_t>>& destinations() const { return destinations_; }
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
  bool scattering_ = false;
  std::vector<std::span<uint8_t>> destinations_;  // a scatterer's
};

}  // namespace gradsync
