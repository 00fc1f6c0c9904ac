// Scratch directories and raw file access for the checkpoint tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gradsync/error.h"

namespace gradsync::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string base = std::filesystem::temp_directory_path() / "gradsync-ckpt-XXXXXX";
    if (::mkdtemp(base.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = base;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    // A test may leave a read-only directory behind on failure; make it removable.
    for (const auto& entry : std::filesystem::recursive_directory_iterator(path_, ec)) {
      std::filesystem::permissions(entry.path(), std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::add, ec);
    }
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void writeBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

inline std::vector<uint8_t> toBytes(const std::string& text) {
  return {text.begin(), text.end()};
}

// Runs `body` expecting DataError; returns its message.
template <typename F>
std::string dataErrorOf(F&& body) {
  try {
    body();
  } catch (const DataError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DataError";
  return "";
}

}  // namespace gradsync::testing
