#include "ckpt/checkpoint_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "common/socket.h"  // errnoText
#include "gradsync/error.h"

namespace gradsync {
namespace ckpt {
namespace {

// crc32_combine takes the length of the second block as z_off_t; a 32-bit z_off_t would silently
// mangle the whole-file CRC of payloads over 2 GiB.
static_assert(sizeof(z_off_t) >= 8, "zlib must be built with a 64-bit z_off_t");

constexpr size_t kTrailerBytes = 4 + sizeof kMagic;  // file CRC, magic
constexpr const char* kReadOperation = "checkpoint read";
constexpr const char* kWriteOperation = "checkpoint write";

// Little-endian, whatever the host: a checkpoint must load on the machine that resumes the job.
template <typename T>
void putLe(std::vector<uint8_t>& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

template <typename T>
T getLe(const uint8_t* bytes) {
  T value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(bytes[i]) << (8 * i);
  return value;
}

uint32_t crcUpdate(uint32_t crc, const void* data, size_t bytes) {
  // zlib treats a null buffer as "return the initial CRC", which would reset a running CRC; an
  // empty vector's data() may be null.
  if (bytes == 0) return crc;
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

// CRC of A||B from CRC(A), CRC(B) and |B|: each payload is checksummed once, not twice.
uint32_t crcCombine(uint32_t crcA, uint32_t crcB, uint64_t bytesB) {
  return static_cast<uint32_t>(crc32_combine(crcA, crcB, static_cast<z_off_t>(bytesB)));
}

// Names may hold any bytes; messages must stay one readable line.
std::string printable(const std::string& name) {
  std::string out;
  for (unsigned char c : name) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing

void validateSections(const std::string& path, const std::vector<Section>& sections) {
  auto fail = [&](const std::string& what) {
    throw ConfigError(fmt::format("cannot write checkpoint '{}': {}", path, what),
                      {.operation = kWriteOperation});
  };
  if (sections.size() > kMaxSections) {
    fail(fmt::format("{} sections, the format allows at most {}", sections.size(), kMaxSections));
  }
  std::set<std::string> names;
  for (const Section& s : sections) {
    if (s.name.size() > kMaxSectionNameBytes) {
      fail(fmt::format("section name \"{}\" is {} bytes long, the format allows at most {}",
                       printable(s.name), s.name.size(), kMaxSectionNameBytes));
    }
    if (!names.insert(s.name).second) {
      fail(fmt::format("two sections are named \"{}\"", printable(s.name)));
    }
  }
}

// The directory holding `path` ("." for a bare file name).
std::string directoryOf(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

[[noreturn]] void throwSystem(const std::string& path, const std::string& what, int err) {
  throw SystemError(
      fmt::format("cannot write checkpoint '{}': {} failed: {}", path, what, errnoText(err)),
      {.operation = kWriteOperation,
       .hint = fmt::format("check free space and permissions in '{}'", directoryOf(path))});
}

// Writes `tmpPath` while it is still invisible under the final name; cleans it up unless
// release() was called (after the rename, when there is nothing left to clean).
class TempFile {
 public:
  TempFile(std::string finalPath, std::string tmpPath)
      : finalPath_(std::move(finalPath)), tmpPath_(std::move(tmpPath)) {
    fd_ = ::open(tmpPath_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throwSystem(finalPath_, fmt::format("open '{}'", tmpPath_), errno);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!released_) ::unlink(tmpPath_.c_str());
  }

  void write(const void* data, size_t bytes) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
      ssize_t n = ::write(fd_, p, bytes);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throwSystem(finalPath_, fmt::format("write '{}'", tmpPath_), errno);
      p += n;
      bytes -= static_cast<size_t>(n);
    }
  }

  // fsync before rename: otherwise the rename can reach the disk before the data, and a power
  // loss leaves a complete-looking name over an empty or partial file.
  void syncAndRename() {
    if (::fsync(fd_) != 0) throwSystem(finalPath_, fmt::format("fsync '{}'", tmpPath_), errno);
    int fd = fd_;
    fd_ = -1;
    // close can report a deferred write error (e.g. NFS): the data is not known to be safe.
    if (::close(fd) != 0) throwSystem(finalPath_, fmt::format("close '{}'", tmpPath_), errno);
    if (::rename(tmpPath_.c_str(), finalPath_.c_str()) != 0) {
      throwSystem(finalPath_, fmt::format("rename '{}'", tmpPath_), errno);
    }
    released_ = true;
  }

 private:
  std::string finalPath_;
  std::string tmpPath_;
  int fd_ = -1;
  bool released_ = false;
};

void writeSections(TempFile& file, const std::vector<Section>& sections) {
  std::vector<uint8_t> buffer(kMagic, kMagic + sizeof kMagic);
  putLe<uint32_t>(buffer, kFormatVersion);
  putLe<uint32_t>(buffer, static_cast<uint32_t>(sections.size()));
  uint32_t fileCrc = crcUpdate(0, buffer.data(), buffer.size());
  file.write(buffer.data(), buffer.size());
  for (const Section& s : sections) {
    uint32_t payloadCrc = crcUpdate(0, s.data.data(), s.data.size());
    buffer.clear();
    putLe<uint16_t>(buffer, static_cast<uint16_t>(s.name.size()));
    buffer.insert(buffer.end(), s.name.begin(), s.name.end());
    putLe<uint64_t>(buffer, s.data.size());
    putLe<uint32_t>(buffer, payloadCrc);
    fileCrc = crcUpdate(fileCrc, buffer.data(), buffer.size());
    fileCrc = crcCombine(fileCrc, payloadCrc, s.data.size());
    file.write(buffer.data(), buffer.size());
    file.write(s.data.data(), s.data.size());
  }
  buffer.clear();
  putLe<uint32_t>(buffer, fileCrc);
  buffer.insert(buffer.end(), kMagic, kMagic + sizeof kMagic);
  file.write(buffer.data(), buffer.size());
}

// Makes the rename itself durable: until the directory entry is on disk, a power loss can bring
// back the old file (or no file) even though the new data blocks were synced.
void syncDirectory(const std::string& path) {
  std::string dir = directoryOf(path);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throwSystem(path, fmt::format("open directory '{}'", dir), errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) throwSystem(path, fmt::format("fsync directory '{}'", dir), err);
}

// ---------------------------------------------------------------------------------------------
// Reading

[[noreturn]] void throwCorrupt(const std::string& path, const std::string& what) {
  throw DataError(fmt::format("checkpoint '{}': {}", path, what),
                  {.operation = kReadOperation,
                   .hint = "the file is incomplete or damaged (a crash during a copy, a full disk, "
                           "bad storage); resume from an older checkpoint"});
}

// Sequential reads of an open checkpoint, bounded by the size fstat reported, keeping the CRC of
// everything read so far (the trailer's checksum).
class FileReader {
 public:
  explicit FileReader(std::string path);
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  ~FileReader() { ::close(fd_); }

  const std::string& path() const { return path_; }
  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }
  uint32_t crc() const { return crc_; }

  // Reads `bytes` (described by `what` if the file ends first) and folds them into crc().
  void read(void* out, uint64_t bytes, const std::string& what) {
    readRaw(out, bytes, what);
    crc_ = crcUpdate(crc_, out, bytes);
  }
  // Reads a payload, returns its own CRC and folds it into crc() without a second pass.
  uint32_t readPayload(std::vector<uint8_t>& out, uint64_t bytes, const std::string& what) {
    // Checked before allocating: a corrupt length must not turn into a huge allocation.
    if (bytes > remaining()) throwTruncated(bytes, what);
    out.resize(bytes);
    readRaw(out.data(), bytes, what);
    uint32_t payloadCrc = crcUpdate(0, out.data(), bytes);
    crc_ = crcCombine(crc_, payloadCrc, bytes);
    return payloadCrc;
  }
  [[noreturn]] void throwTruncated(uint64_t bytes, const std::string& what) const {
    throwCorrupt(path_, fmt::format("truncated at byte {}: {} needs {} bytes at offset {}", size_,
                                    what, bytes, offset_));
  }

 private:
  void readRaw(void* out, uint64_t bytes, const std::string& what);

  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t offset_ = 0;
  uint32_t crc_ = 0;
};

FileReader::FileReader(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0 && errno == ENOENT) throwCorrupt(path_, "missing (no such file)");
  if (fd_ < 0) {
    throw SystemError(fmt::format("cannot open checkpoint '{}': {}", path_, errnoText(errno)),
                      {.operation = kReadOperation, .hint = "check the file's permissions"});
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    ::close(fd_);
    throw SystemError(fmt::format("cannot stat checkpoint '{}': {}", path_, errnoText(err)),
                      {.operation = kReadOperation});
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throwCorrupt(path_, "not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

void FileReader::readRaw(void* out, uint64_t bytes, const std::string& what) {
  if (bytes > remaining()) throwTruncated(bytes, what);
  auto* p = static_cast<uint8_t*>(out);
  uint64_t done = 0;
  while (done < bytes) {
    ssize_t n = ::read(fd_, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      throw SystemError(fmt::format("cannot read checkpoint '{}' at offset {}: {}", path_,
                                    offset_ + done, errnoText(errno)),
                        {.operation = kReadOperation, .hint = "check the storage device"});
    }
    // The file shrank after fstat (another process truncating it): still a truncation.
    if (n == 0) throwTruncated(bytes, what);
    done += static_cast<uint64_t>(n);
  }
  offset_ += bytes;
}

// Magic, version and section count. Compares the magic before reporting truncation so that a
// short non-checkpoint file is called what it is.
uint32_t readHeader(FileReader& in) {
  uint8_t magic[sizeof kMagic] = {};
  uint64_t present = std::min<uint64_t>(in.remaining(), sizeof kMagic);
  in.read(magic, present, "the magic");
  if (std::memcmp(magic, kMagic, present) != 0) {
    throwCorrupt(in.path(), "bad magic (not a gradsync checkpoint)");
  }
  if (present < sizeof kMagic) in.throwTruncated(sizeof kMagic - present, "the magic");
  uint8_t fields[8];
  in.read(fields, sizeof fields, "the header");
  uint32_t version = getLe<uint32_t>(fields);
  if (version != kFormatVersion) {
    throwCorrupt(in.path(), fmt::format("unsupported format version {} (this build reads {})",
                                        version, kFormatVersion));
  }
  uint32_t count = getLe<uint32_t>(fields + 4);
  if (count > kMaxSections) {
    throwCorrupt(in.path(),
                 fmt::format("section count {} exceeds the limit of {}", count, kMaxSections));
  }
  return count;
}

Section readSection(FileReader& in, uint32_t index) {
  Section section;
  std::string where = fmt::format("section #{}", index);
  uint8_t lengthBytes[2];
  in.read(lengthBytes, sizeof lengthBytes, where + " name length");
  uint16_t nameLength = getLe<uint16_t>(lengthBytes);
  if (nameLength > kMaxSectionNameBytes) {
    throwCorrupt(in.path(), fmt::format("{} name length {} at offset {} exceeds the limit of {}",
                                        where, nameLength, in.offset() - 2, kMaxSectionNameBytes));
  }
  section.name.resize(nameLength);
  in.read(section.name.data(), nameLength, where + " name");
  where = fmt::format("section \"{}\"", printable(section.name));
  uint8_t fields[12];
  in.read(fields, sizeof fields, where + " length and checksum");
  uint64_t length = getLe<uint64_t>(fields);
  uint32_t storedCrc = getLe<uint32_t>(fields + 8);
  uint32_t actualCrc = in.readPayload(section.data, length, where + " payload");
  if (actualCrc != storedCrc) {
    throwCorrupt(in.path(), fmt::format("checksum mismatch in {} (stored {:08x}, computed {:08x})",
                                        where, storedCrc, actualCrc));
  }
  return section;
}

void readTrailer(FileReader& in) {
  uint32_t expectedCrc = in.crc();  // of every byte before the trailer
  uint8_t trailer[kTrailerBytes];
  in.read(trailer, sizeof trailer, "the trailer");
  if (std::memcmp(trailer + 4, kMagic, sizeof kMagic) != 0) {
    throwCorrupt(in.path(), fmt::format("bad trailer magic at offset {}", in.offset() - 8));
  }
  uint32_t storedCrc = getLe<uint32_t>(trailer);
  if (storedCrc != expectedCrc) {
    throwCorrupt(in.path(),
                 fmt::format("file checksum mismatch (stored {:08x}, computed {:08x}): a header "
                             "or section length is corrupt",
                             storedCrc, expectedCrc));
  }
  if (in.remaining() != 0) {
    throwCorrupt(in.path(), fmt::format("trailing garbage: {} bytes after the trailer, which ends "
                                        "at byte {}",
                                        in.remaining(), in.offset()));
  }
}

}  // namespace
}  // namespace ckpt

void writeCheckpointFile(const std::string& path, const std::vector<Section>& sections) {
  ckpt::validateSections(path, sections);
  {
    ckpt::TempFile file(path, fmt::format("{}.tmp.{}", path, ::getpid()));
    ckpt::writeSections(file, sections);
    file.syncAndRename();
  }
  ckpt::syncDirectory(path);
}

std::vector<Section> readCheckpointFile(const std::string& path) {
  ckpt::FileReader in(path);
  uint32_t count = ckpt::readHeader(in);
  std::vector<Section> sections;
  sections.reserve(count);  // at most kMaxSections small structs
  std::set<std::string> names;
  for (uint32_t i = 0; i < count; ++i) {
    sections.push_back(ckpt::readSection(in, i));
    if (!names.insert(sections.back().name).second) {
      ckpt::throwCorrupt(path, fmt::format("duplicate section name \"{}\"",
                                           ckpt::printable(sections.back().name)));
    }
  }
  ckpt::readTrailer(in);
  return sections;
}

const Section& findSection(const std::vector<Section>& sections, const std::string& name) {
  std::string present;
  for (const Section& s : sections) {
    if (s.name == name) return s;
    present += fmt::format("{}\"{}\"", present.empty() ? "" : ", ", ckpt::printable(s.name));
  }
  throw DataError(fmt::format("checkpoint has no section \"{}\" (sections: {})",
                              ckpt::printable(name), present.empty() ? "none" : present),
                  {.operation = ckpt::kReadOperation,
                   .hint = "was it written by a different trainer or an older version of it?"});
}

}  // namespace gradsync
