#include "ckpt/shard_checkpoints.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

std::string shardDir(const std::string& root, int shard) {
  return fmt::format("{}/shard-{}", root, shard);
}

// Reads one file; nullopt (with the error, naming the shard, appended to `problems` and
// logged) when it is corrupt. A file that cannot be read at all (permissions, I/O) still throws.
std::optional<LoadedCheckpoint> readOrSkip(int shard, const std::string& path, int64_t step,
                                           std::vector<std::string>& problems) {
  try {
    return LoadedCheckpoint{step, path, readCheckpointFile(path)};
  } catch (const DataError& e) {
    problems.push_back(fmt::format("shard {}: checkpoint '{}' is corrupt and was passed over: {}",
                                   shard, path, e.detail()));
    GS_LOG(kError, "{}", problems.back());
    return std::nullopt;
  }
}

}  // namespace

ShardCheckpoints::ShardCheckpoints(const std::string& root, int shard, int keepFull)
    : shard_(shard),
      full_(shardDir(root, shard), keepFull),
      partial_(shardDir(root, shard) + "/partial", INT_MAX) {}

void ShardCheckpoints::writeFull(int64_t step, const std::vector<Section>& sections) {
  full_.write(step, sections);
  for (int64_t old : partial_.steps()) {
    if (old > step) continue;
    std::error_code ec;
    std::filesystem::remove(partial_.pathForStep(old), ec);
    if (ec) GS_LOG(kWarn, "cannot delete {}: {}", partial_.pathForStep(old), ec.message());
  }
}

void ShardCheckpoints::writePartial(int64_t step, const std::vector<Section>& sections) {
  partial_.write(step, sections);
}

ShardRestore ShardCheckpoints::loadNewest() const {
  ShardRestore restore;
  std::vector<int64_t> fulls = full_.steps();
  std::optional<LoadedCheckpoint> full;
  for (auto it = fulls.rbegin(); it != fulls.rend() && !full; ++it) {
    full = readOrSkip(shard_, full_.pathForStep(*it), *it, restore.problems);
  }
  if (!full) {
    throw DataError(
        fmt::format("shard {}: no intact full checkpoint in '{}'{}", shard_, full_.dir(),
                    restore.problems.empty() ? "" : ": " + restore.problems.back()),
        {.hint = "a partial recovery needs the shard's full save; restart the job from an older "
                 "checkpoint or from scratch"});
  }
  if (!restore.problems.empty()) {
    GS_LOG(kError, "shard {}: restoring from the previous intact checkpoint '{}' (step {})", shard_,
           full->path, full->step);
  }
  restore.full = std::move(*full);
  for (int64_t step : partial_.steps()) {
    if (step <= restore.full.step) continue;
    auto partial = readOrSkip(shard_, partial_.pathForStep(step), step, restore.problems);
    if (partial) restore.partials.push_back(std::move(*partial));
  }
  return restore;
}

LoadedCheckpoint ShardCheckpoints::loadFullAt(int64_t step) const {
  const std::string path = full_.pathForStep(step);
  try {
    return {step, path, readCheckpointFile(path)};
  } catch (const DataError& e) {
    throw DataError(fmt::format("shard {}: checkpoint '{}' of step {} cannot be restored: {}",
                                shard_, path, step, e.detail()),
                    {.hint = "full recovery falls back to an older step"});
  }
}

std::optional<int64_t> newestCompleteStep(const std::string& root, int shards,
                                          const CheckpointDir& also, int64_t below) {
  std::vector<int64_t> steps = also.steps();
  std::set<int64_t> common(steps.begin(), steps.end());
  for (int s = 0; s < shards && !common.empty(); ++s) {
    std::vector<int64_t> mine = CheckpointDir(shardDir(root, s)).steps();
    std::set<int64_t> both;
    std::set_intersection(common.begin(), common.end(), mine.begin(), mine.end(),
                          std::inserter(both, both.begin()));
    common = std::move(both);
  }
  for (auto it = common.rbegin(); it != common.rend(); ++it) {
    if (*it < below) return *it;
  }
  return std::nullopt;
}

}  // namespace gradsync
