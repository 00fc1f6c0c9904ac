#include "common/state_bytes.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/allocator.h"
#include "common/crc32c.h"
#include "gradsync/error.h"

namespace gradsync {

void StateWriter::reserve(size_t size) {
  if (size <= bytes_.capacity()) return;
  // Doubling, into storage advised to huge pages before its first touch (a model's state is
  // tens of MB written once: common/allocator.h).
  std::vector<uint8_t> bigger;
  bigger.reserve(std::max(size, 2 * bytes_.capacity()));
  adviseHugePages(bigger.data(), bigger.capacity());
  bigger.assign(bytes_.begin(), bytes_.end());
  bytes_.swap(bigger);
}

void StateWriter::writeBulk(std::span<const uint8_t> bytes) {
  if (mode_ != Mode::kGather) {
    write(bytes);
    return;
  }
  counted_ += sizeof(uint64_t) + bytes.size();
  const uint64_t count = bytes.size();
  append(1, &count, sizeof count);  // as an array of one count
  segments_.push_back(bytes);
}

void StateWriter::writeRaw(uint64_t count, const void* data, size_t size) {
  counted_ += sizeof(count) + size;
  if (mode_ == Mode::kHash) {
    hashRaw(&count, sizeof(count));
    hashRaw(data, size);
    return;
  }
  append(count, data, size);
}

void StateWriter::append(uint64_t count, const void* data, size_t size) {
  const size_t at = bytes_.size();
  reserve(at + sizeof(count) + size);
  bytes_.resize(at + sizeof(count) + size);
  std::memcpy(bytes_.data() + at, &count, sizeof(count));
  if (size > 0) std::memcpy(bytes_.data() + at + sizeof(count), data, size);
}

void StateWriter::hashRaw(const void* data, size_t size) {
  crc_ = crc32c(crc_, data, size);
}

uint64_t StateReader::readCount(size_t elementSize) {
  uint64_t count = 0;
  take(&count, sizeof(count));
  const size_t left = bytes_.size() - at_;
  if (count > left / elementSize) {
    throw DataError(
        fmt::format("{}: an array of {} values of {} bytes but only {} bytes left "
                    "(state of another run, or corrupt)",
                    what_, count, elementSize, left));
  }
  return count;
}

void StateReader::readBulk(std::span<uint8_t> into) {
  if (!scattering_) {
    readExact(into);
    return;
  }
  uint64_t count = 0;
  readExact(std::span<uint64_t>(&count, 1));
  if (count != into.size()) mismatch(count, into.size());
  destinations_.push_back(into);
}

void StateReader::take(void* into, size_t size) {
  if (size > bytes_.size() - at_) {
    throw DataError(fmt::format("{}: truncated: {} bytes needed at byte {} of {}", what_, size, at_,
                                bytes_.size()));
  }
  if (size > 0) std::memcpy(into, bytes_.data() + at_, size);
  at_ += size;
}

void StateReader::mismatch(uint64_t stored, size_t expected) const {
  throw DataError(
      fmt::format("{}: the checkpoint holds {} values where this run has {} "
                  "(state of another model, schedule or compressor)",
                  what_, stored, expected));
}

void StateReader::expectEnd() const {
  if (at_ != bytes_.size()) {
    throw DataError(
        fmt::format("{}: {} bytes left over after the state (state of another "
                    "model, schedule or compressor)",
                    what_, bytes_.size() - at_));
  }
}

}  // namespace gradsync
