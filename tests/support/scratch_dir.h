// Per-run scratch folders of the e2e tests: TMP/PREFIX-PID/NAME, removed after a passing test.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace gradsync::testing {

inline std::filesystem::path scratchDir(const std::string& prefix, const std::string& name) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / (prefix + "-" + std::to_string(::getpid())) / name;
  std::filesystem::create_directories(dir);
  return dir;
}

// The test's folder, and the run's folder once empty.
inline void removeScratch(const std::filesystem::path& dir) {
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  std::filesystem::remove(dir.parent_path(), ignored);  // fails while another test's is there
}

}  // namespace gradsync::testing
