#include "data/idx.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr const char* kIdxOperation = "read dataset";
constexpr uint8_t kTypeUnsignedByte = 0x08;
constexpr size_t kInitialChunk = size_t{1} << 20;

[[noreturn]] void failIdx(const std::string& path, const std::string& what) {
  throw DataError(fmt::format("{}: {}", path, what), {.operation = kIdxOperation});
}

const char* typeName(uint8_t type) {
  switch (type) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
    default:
      return "unknown";
  }
}

// zlib prefixes its messages with the name it knows the file by, "<fd:3>" after gzdopen; our
// messages name the path already.
std::string zlibMessage(const char* message) {
  std::string text = message != nullptr ? message : "unknown zlib error";
  if (text.starts_with("<fd:")) {
    const size_t colon = text.find(": ");
    if (colon != std::string::npos) text.erase(0, colon + 2);
  }
  return text;
}

// A gzFile opened for reading; closes it on destruction. Reads throw DataError on a corrupt or
// truncated gzip stream, so callers only see clean data or an exception.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    // open(2) first, so a missing file is told apart (errno) from a zlib failure.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      ErrorContext context{.operation = kIdxOperation};
      if (err == ENOENT || err == ENOTDIR) context.hint = kFashionMnistInstallHint;
      throw DataError(fmt::format("cannot open {}: {}", path, std::strerror(err)), context);
    }
    struct stat st {};
    if (::fstat(fd, &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        ::close(fd);
        failIdx(path, "is a directory, not a gzip-compressed IDX file");
      }
      compressedSize_ = static_cast<uint64_t>(st.st_size);
    }
    file_ = gzdopen(fd, "rb");
    if (file_ == nullptr) {
      ::close(fd);
      failIdx(path, "cannot start reading the gzip stream (out of memory)");
    }
    gzbuffer(file_, 256 * 1024);  // fewer, larger reads than the default 8 KiB
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() { gzclose(file_); }

  uint64_t compressedSize() const { return compressedSize_; }

  // Reads up to n bytes and returns how many were read: fewer than n only at the end of the
  // uncompressed data. Refuses files that are not gzip-compressed (zlib would pass them through).
  size_t read(void* dst, size_t n) {
    size_t done = 0;
    while (done < n) {
      const unsigned want = static_cast<unsigned>(std::min<size_t>(n - done, INT_MAX / 2));
      const int got = gzread(file_, static_cast<uint8_t*>(dst) + done, want);
      if (gzdirect(file_) == 1)
        failIdx(path_, "not a gzip file (expected a gzip-compressed IDX file)");
      int err = Z_OK;
      const char* message = gzerror(file_, &err);
      if (got < 0 || (err != Z_OK && err != Z_BUF_ERROR)) {
        failIdx(path_, fmt::format("corrupt gzip stream: {}", zlibMessage(message)));
      }
      if (err == Z_BUF_ERROR) failIdx(path_, "the gzip stream ends early (the file is truncated)");
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  uint64_t compressedSize_ = 0;
};

// Checks the 4 magic bytes: two zero bytes, the element type, the number of dimensions.
void checkMagic(const std::string& path, const uint8_t magic[4], int expectedDims) {
  const uint32_t value = (uint32_t{magic[0]} << 24) | (uint32_t{magic[1]} << 16) |
                         (uint32_t{magic[2]} << 8) | uint32_t{magic[3]};
  const uint32_t expected = (uint32_t{kTypeUnsignedByte} << 8) | uint32_t(expectedDims);
  if (value == expected) return;
  if (magic[0] != 0 || magic[1] != 0) {
    failIdx(path, fmt::format("bad magic number 0x{:08X}, expected 0x{:08X}: not an IDX file",
                              value, expected));
  }
  if (magic[2] != kTypeUnsignedByte) {
    failIdx(path, fmt::format("element type 0x{:02X} ({}) is not supported, expected 0x08 "
                              "(unsigned byte); magic 0x{:08X}",
                              magic[2], typeName(magic[2]), value));
  }
  failIdx(path, fmt::format("has {} dimensions, expected {} (magic 0x{:08X}, expected 0x{:08X})",
                            magic[3], expectedDims, value, expected));
}

// Reads the big-endian dimensions and returns their product, refusing products above
// kMaxIdxPayloadBytes before any payload memory is allocated.
uint64_t readDims(GzReader& reader, const std::string& path, int count,
                  std::vector<int64_t>& dims) {
  std::vector<uint8_t> raw(static_cast<size_t>(count) * 4);
  const size_t got = reader.read(raw.data(), raw.size());
  if (got < raw.size()) {
    failIdx(path, fmt::format("file ends inside the IDX header ({} of {} dimension bytes)", got,
                              raw.size()));
  }
  uint64_t product = 1;
  for (int d = 0; d < count; ++d) {
    const uint8_t* b = raw.data() + static_cast<size_t>(4 * d);
    const uint64_t dim =
        (uint64_t{b[0]} << 24) | (uint64_t{b[1]} << 16) | (uint64_t{b[2]} << 8) | uint64_t{b[3]};
    dims.push_back(static_cast<int64_t>(dim));
    // Each factor is < 2^32 and the running product <= 2^30, so this cannot overflow.
    product *= dim;
    if (product > kMaxIdxPayloadBytes) {
      failIdx(path, fmt::format("header dimensions {} describe more than the {} bytes this reader "
                                "accepts: corrupt header?",
                                fmt::join(dims, " x "), kMaxIdxPayloadBytes));
    }
  }
  return product;
}

// Reads exactly `expected` payload bytes and checks that nothing follows them. The buffer grows
// geometrically with the bytes actually inflated (first step sized from the compressed file),
// so memory stays proportional to the data present, whatever the header claims.
std::vector<uint8_t> readPayload(GzReader& reader, const std::string& path, uint64_t expected,
                                 const std::vector<int64_t>& dims) {
  std::vector<uint8_t> data;
  size_t filled = 0;
  size_t step = std::max<size_t>(kInitialChunk, 8 * reader.compressedSize());
  while (filled < expected) {
    const size_t target = std::min<size_t>(expected, filled + step);
    data.resize(target);
    const size_t got = reader.read(data.data() + filled, target - filled);
    filled += got;
    if (filled < target) {
      failIdx(path, fmt::format("payload is truncated: dimensions {} need {} bytes, the file "
                                "holds {}",
                                fmt::join(dims, " x "), expected, filled));
    }
    step = std::max(step, filled);
  }
  uint64_t trailing = 0;
  uint8_t scratch[64 * 1024];
  for (size_t got; (got = reader.read(scratch, sizeof scratch)) > 0;) trailing += got;
  if (trailing > 0) {
    failIdx(path, fmt::format("{} trailing bytes after the {}-byte payload of dimensions {}",
                              trailing, expected, fmt::join(dims, " x ")));
  }
  return data;
}

}  // namespace

IdxArray readIdxGz(const std::string& path, int expectedDims) {
  GzReader reader(path);
  uint8_t magic[4];
  const size_t got = reader.read(magic, sizeof magic);
  if (got < sizeof magic) {
    failIdx(path, fmt::format("file ends inside the IDX header ({} of 4 magic bytes)", got));
  }
  checkMagic(path, magic, expectedDims);
  IdxArray array;
  const uint64_t expected = readDims(reader, path, expectedDims, array.dims);
  array.data = readPayload(reader, path, expected, array.dims);
  return array;
}

ImageSet readImageSet(const std::string& imagesGz, const std::string& labelsGz, int numClasses) {
  if (numClasses < 1 || numClasses > 256) {
    throw ConfigError(fmt::format("number of classes must be in [1, 256], got {}", numClasses),
                      {.operation = kIdxOperation});
  }
  IdxArray images = readIdxGz(imagesGz, 3);
  if (images.dims[1] < 1 || images.dims[2] < 1) {
    failIdx(imagesGz, fmt::format("image size {} x {} is empty", images.dims[1], images.dims[2]));
  }
  IdxArray labels = readIdxGz(labelsGz, 1);
  if (labels.dims[0] != images.dims[0]) {
    failIdx(labelsGz, fmt::format("holds {} labels but {} holds {} images", labels.dims[0],
                                  imagesGz, images.dims[0]));
  }
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= numClasses) {
      failIdx(labelsGz, fmt::format("label {} at index {} is out of range [0, {})", labels.data[i],
                                    i, numClasses));
    }
  }
  ImageSet set;
  set.count = images.dims[0];
  set.rows = static_cast<int>(images.dims[1]);  // <= kMaxIdxPayloadBytes, fits an int
  set.cols = static_cast<int>(images.dims[2]);
  set.pixels = std::move(images.data);
  set.labels = std::move(labels.data);
  return set;
}

std::string fashionMnistPath(const std::string& dir, bool train, bool images) {
  return fmt::format("{}/{}-{}-ubyte.gz", dir, train ? "train" : "t10k",
                     images ? "images-idx3" : "labels-idx1");
}

ImageSet loadFashionMnist(const std::string& dir, bool train) {
  return readImageSet(fashionMnistPath(dir, train, true), fashionMnistPath(dir, train, false),
                      kFashionMnistClasses);
}

}  // namespace gradsync
