// The checkpoints of one embedding shard (an embedding server's rows and optimizer state), kept
// apart from the other shards' so that a failed server restores its own shard alone (partial
// recovery, docs/checkpoints.md "Partial recovery"):
//   ROOT/shard-<s>/step-<step>.gsckpt           full saves (every row of the shard)
//   ROOT/shard-<s>/partial/step-<step>.gsckpt   partial saves (CPR-MFU/SSU: some rows)
// Files are ckpt/ files (checksummed sections, atomic writes); what the sections hold is the
// shard's business (ps/embedding_shard.h).
//
// Thread-safety: const members are safe concurrently, also while another process writes; one
// writer per shard (its server). All members block on disk I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_dir.h"

namespace gradsync {

struct ShardRestore {
  LoadedCheckpoint full;                   // the full save restored
  std::vector<LoadedCheckpoint> partials;  // the partial saves after it, in step order
  // Corrupt files passed over, each as the error that names the shard and the file.
  std::vector<std::string> problems;
  int64_t newestStep() const { return partials.empty() ? full.step : partials.back().step; }
};

class ShardCheckpoints {
 public:
  // `keepFull` (>= 1) full saves are kept; partial saves until a full save supersedes them.
  ShardCheckpoints(const std::string& root, int shard, int keepFull = 2);

  int shard() const { return shard_; }
  const std::string& dir() const { return full_.dir(); }
  std::string fullPath(int64_t step) const { return full_.pathForStep(step); }
  std::string partialPath(int64_t step) const { return partial_.pathForStep(step); }

  // Writes a full save of `step`, then deletes the partial saves it supersedes (steps <= step).
  // Throws as CheckpointDir::write.
  void writeFull(int64_t step, const std::vector<Section>& sections);
  void writePartial(int64_t step, const std::vector<Section>& sections);
  std::vector<int64_t> fullSteps() const { return full_.steps(); }

  // The newest intact full save and every intact partial save after it. A corrupt file is passed
  // over for the previous intact one, with an error logged that names the shard and the file
  // (also returned in `problems`). Throws DataError naming the shard when no intact full save
  // exists.
  ShardRestore loadNewest() const;
  // Exactly the full save of `step` (full recovery puts every shard back to one step). Throws
  // DataError naming the shard and the file when it is missing or corrupt.
  LoadedCheckpoint loadFullAt(int64_t step) const;

 private:
  int shard_;
  CheckpointDir full_;
  CheckpointDir partial_;
};

// The newest step at which every shard has a full save and `also` (the workers' dense
// checkpoint directory) has one: a consistent point for full recovery. Only lists files (the
// servers verify theirs when restoring). nullopt when there is none. `below` excludes newer
// steps (a fallback after a corrupt file).
std::optional<int64_t> newestCompleteStep(const std::string& root, int shards,
                                          const CheckpointDir& also, int64_t below = INT64_MAX);

}  // namespace gradsync
