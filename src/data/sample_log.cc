#include "data/sample_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {

SampleLog::SampleLog(const std::string& directory, int slot, int restart, const std::string& header)
    : path_(fmt::format("{}/worker-{}-{}.txt", directory, slot, restart)) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  fd_.reset(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644));
  if (!fd_.valid()) {
    throw SystemError(
        fmt::format("cannot write the sample record '{}': {}", path_, errnoText(errno)),
        {.operation = "--record-samples"});
  }
  writeLine(fmt::format("# {}\n", header));
}

void SampleLog::record(int64_t round, int64_t step, int64_t epoch, int rank, int size,
                       std::span<const size_t> indices) {
  std::string line = fmt::format("{} {} {} {} {}", round, step, epoch, rank, size);
  for (size_t index : indices) fmt::format_to(std::back_inserter(line), " {}", index);
  line += '\n';
  writeLine(line);
}

void SampleLog::writeLine(const std::string& line) {
  // One write: a regular file in append mode takes it whole.
  const ssize_t written = ::write(fd_.get(), line.data(), line.size());
  if (written != static_cast<ssize_t>(line.size())) {
    throw SystemError(fmt::format("cannot write the sample record '{}': {}", path_,
                                  written < 0 ? errnoText(errno) : "short write"),
                      {.operation = "--record-samples"});
  }
}

}  // namespace gradsync
