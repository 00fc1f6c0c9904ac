// Feeds arbitrary bytes to the checkpoint reader (ckpt/checkpoint_file.h), as a corrupt or
// hostile checkpoint file would. It must throw DataError (or SystemError) and nothing else: no
// crash, no out-of-bounds access, no allocation from an unchecked length.
//
// Input: one flags byte, then the file. Flag bit 0 makes the harness recompute every section's
// CRC and the file CRC before writing the file: random bytes almost never carry the right CRCs,
// and without this the fuzzer would never get past the first checksum to the checks after it
// (section names, duplicates, the trailer, trailing garbage).
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "ckpt/checkpoint_file.h"
#include "fuzz_file.h"
#include "gradsync/error.h"

namespace {

uint64_t getLe(const uint8_t* bytes, size_t width) {
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i) value |= uint64_t{bytes[i]} << (8 * i);
  return value;
}

void putLe32(uint8_t* bytes, uint32_t value) {
  for (size_t i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint32_t crcOf(const uint8_t* data, size_t bytes) {
  return static_cast<uint32_t>(crc32_z(crc32_z(0, nullptr, 0), data, bytes));
}

// Walks the layout of docs/checkpoints.md as far as the bytes allow (magic 8, version 4, count
// 4; per section: name length 2, name, payload length 8, CRC 4, payload; trailer: file CRC 4,
// magic 8) and writes the CRCs the reader will compute. Leaves everything else as it is.
void fixCrcs(std::vector<uint8_t>& file) {
  constexpr size_t kHeader = 16;
  if (file.size() < kHeader) return;
  const uint64_t count = getLe(file.data() + 12, 4);
  size_t pos = kHeader;
  for (uint64_t i = 0; i < count && i < gradsync::ckpt::kMaxSections; ++i) {
    if (file.size() - pos < 2) return;
    pos += 2 + getLe(file.data() + pos, 2);
    if (pos > file.size() || file.size() - pos < 12) return;
    const uint64_t length = getLe(file.data() + pos, 8);
    const size_t crcAt = pos + 8;
    pos += 12;
    if (length > file.size() - pos) return;
    putLe32(file.data() + crcAt, crcOf(file.data() + pos, length));
    pos += length;
  }
  if (file.size() - pos >= 12) putLe32(file.data() + pos, crcOf(file.data(), pos));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gradsync::fuzz::MemFile file("checkpoint_fuzz");
  if (size < 1) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if (data[0] & 1) fixCrcs(bytes);
  file.write(bytes);
  try {
    std::vector<gradsync::Section> sections = gradsync::readCheckpointFile(file.path());
    // What was accepted fits the file it came from and the format's limits.
    size_t payload = 0;
    for (const gradsync::Section& section : sections) {
      if (section.name.size() > gradsync::ckpt::kMaxSectionNameBytes) std::abort();
      payload += section.data.size();
    }
    if (sections.size() > gradsync::ckpt::kMaxSections || payload > bytes.size()) std::abort();
  } catch (const gradsync::DataError&) {
  } catch (const gradsync::SystemError&) {
  }
  return 0;
}
