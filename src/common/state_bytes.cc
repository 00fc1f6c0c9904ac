#include "common/state_bytes.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>

#include "common/allocator.h"
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

void StateWriter::writeRaw(uint64_t count, const void* data, size_t size) {
  if (hashing_) {
    counted_ += sizeof(count) + size;
    hashRaw(&count, sizeof(count));
    hashRaw(data, size);
    return;
  }
  const size_t at = bytes_.size();
  reserve(at + sizeof(count) + size);
  bytes_.resize(at + sizeof(count) + size);
  std::memcpy(bytes_.data() + at, &count, sizeof(count));
  if (size > 0) std::memcpy(bytes_.data() + at + sizeof(count), data, size);
}

void StateWriter::hashRaw(const void* data, size_t size) {
  // zlib takes uInt lengths: at most 1 GiB at a time.
  constexpr size_t kChunk = size_t{1} << 30;
  const auto* bytes = static_cast<const Bytef*>(data);
  for (size_t at = 0; at < size; at += kChunk) {
    crc_ = static_cast<uint32_t>(
        ::crc32(crc_, bytes + at, static_cast<uInt>(std::min(kChunk, size - at))));
  }
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
