// Helpers for the dataset tests: a temporary directory and writers of (gzipped) IDX files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// IDX bytes: magic 0x0000 <type> <dims.size()>, big-endian dims, then payload.
std::vector<uint8_t> idxBytes(const std::vector<uint32_t>& dims,
                              const std::vector<uint8_t>& payload, uint8_t type = 0x08);
// Writes `bytes` gzip-compressed to `path`.
void writeGz(const std::string& path, const std::vector<uint8_t>& bytes);
// Writes `bytes` as they are (no compression).
void writePlain(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace gradsync::testing
