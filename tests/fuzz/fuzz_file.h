// A file in memory for the fuzzers of readers that take a path (checkpoints, IDX files): a memfd,
// named by /proc/self/fd/N, rewritten with each input. No disk I/O and no temp files left behind
// when a run is killed, and the reader opens it as it would any regular file.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>

namespace gradsync::fuzz {

class MemFile {
 public:
  explicit MemFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  ~MemFile() { ::close(fd_); }

  const std::string& path() const { return path_; }

  // Replaces the contents with `bytes`. A failure here is the harness's, not the reader's.
  void write(std::span<const uint8_t> bytes) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace gradsync::fuzz
