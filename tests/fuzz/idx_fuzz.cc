// Feeds arbitrary bytes to the IDX (Fashion-MNIST) reader (data/idx.h), as a corrupt dataset
// file would. It must throw DataError and nothing else, and what it accepts must hold exactly
// the bytes its header promises.
//
// Input: one mode byte, then the file(s).
//   bit 0      read as an image file (3 dimensions), else as a label file (1 dimension);
//   bit 1      the file is uncompressed IDX and the harness gzips it first, so that mutations land
//              on the IDX header and payload instead of breaking the deflate stream; else it is a
//              .gz file as it lies on disk, and the gzip layer is fuzzed too;
//   bit 2      a pair instead: u16 little-endian n, n bytes of an uncompressed image file, then an
//              uncompressed label file, both gzipped and read by readImageSet (counts, sizes,
//              label range).
// One file is read per input: the reader's gzip buffers (768 KiB) make every open costly under
// ASan, so reading each file both ways would halve the executions.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "data/idx.h"
#include "fuzz_file.h"
#include "gradsync/error.h"
#include "gzip.h"

namespace {

using gradsync::fuzz::gzip;
using gradsync::fuzz::MemFile;

void readAs(const MemFile& file, int dims) {
  try {
    gradsync::IdxArray array = gradsync::readIdxGz(file.path(), dims);
    uint64_t product = 1;
    for (int64_t d : array.dims) product *= static_cast<uint64_t>(d);
    if (array.dims.size() != static_cast<size_t>(dims) || product != array.data.size()) {
      std::abort();
    }
  } catch (const gradsync::DataError&) {
  }
}

void readPair(const MemFile& images, const MemFile& labels) {
  try {
    gradsync::ImageSet set = gradsync::readImageSet(images.path(), labels.path(), 10);
    if (set.rows < 1 || set.cols < 1 || set.labels.size() != static_cast<size_t>(set.count) ||
        set.pixels.size() != set.labels.size() * set.imageSize()) {
      std::abort();
    }
    for (uint8_t label : set.labels) {
      if (label >= 10) std::abort();
    }
  } catch (const gradsync::DataError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static MemFile first("idx_fuzz_a");
  static MemFile second("idx_fuzz_b");
  if (size < 1) return 0;
  std::span<const uint8_t> rest(data + 1, size - 1);
  const uint8_t mode = data[0];
  if (mode & 4) {
    if (rest.size() < 2) return 0;
    size_t split = rest[0] | (size_t{rest[1]} << 8);
    rest = rest.subspan(2);
    if (split > rest.size()) split = rest.size();
    first.write(gzip(rest.first(split)));
    second.write(gzip(rest.subspan(split)));
    readPair(first, second);
    return 0;
  }
  if (mode & 2) {
    first.write(gzip(rest));
  } else {
    first.write(rest);
  }
  readAs(first, mode & 1 ? 3 : 1);
  return 0;
}
