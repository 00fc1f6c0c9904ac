#include "ckpt/checkpoint_dir.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <system_error>

#include "common/logging.h"
#include "common/socket.h"  // errnoText
#include "gradsync/error.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "step-";
constexpr std::string_view kSuffix = ".gsckpt";
// INT64_MAX has 19 digits; longer runs of digits are not steps (and would only slow from_chars).
constexpr size_t kMaxStepDigits = 19;
constexpr std::string_view kTempInfix = ".tmp.";

bool allDigits(std::string_view text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string stepFileName(int64_t step) {
  return fmt::format("{}{:012d}{}", kPrefix, step, kSuffix);
}

// The step of a name pathForStep() produces, or nullopt for any other name: temp files of
// interrupted writes (".tmp.<pid>" appended) and non-canonical spellings such as "step-5.gsckpt",
// which pathForStep() would not find again.
std::optional<int64_t> stepOfName(std::string_view name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.size() > kMaxStepDigits || !allDigits(digits)) return std::nullopt;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || stepFileName(step) != name) return std::nullopt;
  return step;
}

// The step of "<checkpoint name>.tmp.<pid>", left behind by a write that crashed.
std::optional<int64_t> stepOfTempName(std::string_view name) {
  size_t at = name.rfind(kTempInfix);
  if (at == std::string_view::npos || !allDigits(name.substr(at + kTempInfix.size()))) {
    return std::nullopt;
  }
  return stepOfName(name.substr(0, at));
}

// File names in `dir`; none when it does not exist.
std::vector<std::string> listNames(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return names;
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  if (ec) {
    throw SystemError(fmt::format("cannot list checkpoint directory '{}': {}", dir, ec.message()),
                      {.operation = "checkpoint dir", .hint = "check the path and permissions"});
  }
  return names;
}

void removeOrWarn(const std::string& path, const char* what) {
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) GS_LOG(kWarn, "cannot delete {} '{}': {}", what, path, ec.message());
}

[[noreturn]] void throwCreateFailed(const std::string& dir, const std::string& what) {
  throw SystemError(fmt::format("cannot create checkpoint directory '{}': {}", dir, what),
                    {.operation = "checkpoint write", .hint = "check the path and permissions"});
}

// mkdir -p, then fsync the parent of every directory it created: the first checkpoint's own
// directory fsync does not make the new directory's entry in its parent durable, and a power loss
// could otherwise take the whole new directory, checkpoint included, away.
void createDirectoryDurably(const std::string& dir) {
  fs::path missing = fs::absolute(dir);
  std::vector<fs::path> created;
  std::error_code ec;
  while (!missing.empty() && !fs::exists(missing, ec) && missing != missing.parent_path()) {
    created.push_back(missing);
    missing = missing.parent_path();
  }
  fs::create_directories(dir, ec);
  if (ec) throwCreateFailed(dir, ec.message());
  for (const fs::path& child : created) {
    int fd = ::open(child.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || ::fsync(fd) != 0) {
      int err = errno;
      if (fd >= 0) ::close(fd);
      throwCreateFailed(
          dir, fmt::format("fsync '{}' failed: {}", child.parent_path().string(), errnoText(err)));
    }
    ::close(fd);
  }
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  if (dir_.empty()) {
    throw ConfigError("checkpoint directory is empty", {.operation = "checkpoint dir"});
  }
  if (keep_ < 1) {
    throw ConfigError(fmt::format("checkpoints to keep must be at least 1, got {}", keep_),
                      {.operation = "checkpoint dir",
                       .hint = "pass a large number (INT_MAX) to keep every checkpoint"});
  }
}

std::string CheckpointDir::pathForStep(int64_t step) const {
  if (step < 0) {
    throw ConfigError(fmt::format("checkpoint step must be >= 0, got {}", step),
                      {.operation = "checkpoint dir"});
  }
  return dir_ + "/" + stepFileName(step);
}

void CheckpointDir::write(int64_t step, const std::vector<Section>& sections) {
  std::string path = pathForStep(step);
  createDirectoryDurably(dir_);
  std::optional<int64_t> newest = latest();
  if (newest && *newest > step) {
    GS_LOG(kWarn,
           "writing checkpoint step {} into '{}', which holds a newer one (step {}): "
           "resuming will load step {} unless it is removed",
           step, dir_, *newest, *newest);
  }
  writeCheckpointFile(path, sections);
  // Only now, with the new checkpoint durable under its final name, is deleting old ones safe.
  try {
    prune(step);
  } catch (const SystemError& e) {
    // The checkpoint is written; failing the caller now would make it retry a successful write.
    GS_LOG(kWarn, "checkpoint step {} written, but old ones were not pruned: {}", step, e.what());
  }
}

void CheckpointDir::prune(int64_t writtenStep) const {
  std::vector<int64_t> older;
  for (const std::string& name : listNames(dir_)) {
    if (auto step = stepOfName(name); step && *step < writtenStep) older.push_back(*step);
    // A crashed write's partial file: useless, and possibly large. With one writer per directory
    // (the contract), none at or below the step just written can still be in progress.
    if (auto step = stepOfTempName(name); step && *step <= writtenStep) {
      removeOrWarn(dir_ + "/" + name, "the temp file of an interrupted checkpoint write");
    }
  }
  std::sort(older.begin(), older.end());
  size_t olderToKeep = static_cast<size_t>(keep_ - 1);
  for (size_t i = 0; i + olderToKeep < older.size(); ++i) {
    removeOrWarn(pathForStep(older[i]), "old checkpoint");
  }
}

std::vector<int64_t> CheckpointDir::steps() const {
  std::vector<int64_t> found;
  for (const std::string& name : listNames(dir_)) {
    if (auto step = stepOfName(name)) found.push_back(*step);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::optional<int64_t> CheckpointDir::latest() const {
  std::vector<int64_t> all = steps();
  if (all.empty()) return std::nullopt;
  return all.back();
}

LoadedCheckpoint CheckpointDir::loadLatest() const {
  std::vector<int64_t> all = steps();
  if (all.empty()) {
    throw DataError(fmt::format("no checkpoint in {}", dir_),
                    {.operation = "checkpoint load",
                     .hint = "start without resuming, or point at the directory the run wrote"});
  }
  LoadedCheckpoint newest{.step = all.back(), .path = pathForStep(all.back())};
  std::string problem;
  try {
    newest.sections = readCheckpointFile(newest.path);
    return newest;
  } catch (const DataError& e) {
    problem = e.detail();  // names the file and what is wrong with it
  }
  // Verify older ones fully before recommending one: a hint pointing at another corrupt file
  // would cost the user a second failed restart.
  std::vector<std::string> corrupt = {newest.path};
  for (auto it = all.rbegin() + 1; it != all.rend(); ++it) {
    std::string path = pathForStep(*it);
    try {
      readCheckpointFile(path);
    } catch (const DataError&) {
      corrupt.push_back(path);
      continue;
    }
    throw DataError(
        fmt::format("newest checkpoint (step {}) is corrupt: {}; the newest intact one is {} "
                    "(step {})",
                    newest.step, problem, path, *it),
        {.operation = "checkpoint load",
         .hint = fmt::format("delete {} to resume from {}", fmt::join(corrupt, " and "), path)});
  }
  throw DataError(
      fmt::format("newest checkpoint (step {}) is corrupt: {}; no older intact checkpoint in {}",
                  newest.step, problem, dir_),
      {.operation = "checkpoint load",
       .hint = "restore the files from a backup or start without resuming"});
}

}  // namespace gradsync
