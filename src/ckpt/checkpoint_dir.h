// A directory of checkpoints, one file per training step (dir/step-000000001200.gsckpt), with
// retention of the newest few and a loud refusal to resume from a corrupt newest one.
// See docs/checkpoints.md.
//
// Thread-safety: const members may be called concurrently, also while another process writes the
// directory (files appear by atomic rename, so a reader sees whole files only). write() must not
// run concurrently with another write() to the same directory (threads or processes): in a job,
// let one rank write. All members block on disk I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint_file.h"

namespace gradsync {

struct LoadedCheckpoint {
  int64_t step = 0;
  std::string path;
  std::vector<Section> sections;
};

class CheckpointDir {
 public:
  // `keep` (>= 1) is how many checkpoints write() retains; pass INT_MAX to keep them all.
  // Throws ConfigError for an empty `dir` or keep < 1. Touches no files.
  explicit CheckpointDir(std::string dir, int keep = 2);

  const std::string& dir() const { return dir_; }
  int keep() const { return keep_; }

  // dir/step-000000001200.gsckpt: 12 digits, zero-padded so that names sort like steps (larger
  // steps get more digits; steps() sorts numerically, so they are still found in order).
  // Throws ConfigError for a negative step.
  std::string pathForStep(int64_t step) const;

  // Creates the directory if needed, writes the checkpoint atomically (writeCheckpointFile), and
  // only then deletes the oldest checkpoints older than `step` so that `keep` remain counting this
  // one. Checkpoints with a larger step than `step` are never deleted (a run restarted from an
  // older step must not destroy a newer one; a warning is logged). Also deletes temp files left by
  // crashed writes of steps <= `step`. Throws what writeCheckpointFile throws, and SystemError if
  // the directory cannot be created or listed; on any throw, existing checkpoints are untouched.
  // A failure to delete an old file is only logged: the new checkpoint is safe.
  void write(int64_t step, const std::vector<Section>& sections);

  // Steps of the checkpoint files present, ascending. Ignores temp files of interrupted writes
  // (*.tmp.<pid>) and any name pathForStep() would not produce (e.g. "step-5.gsckpt"). A missing
  // directory has none; an unreadable one throws SystemError. Does not open the files.
  std::vector<int64_t> steps() const;
  std::optional<int64_t> latest() const;

  // Reads the newest checkpoint. Never silently falls back to an older one: if the newest is
  // corrupt, throws DataError naming the corrupt file, what is wrong with it and the newest older
  // checkpoint that reads cleanly (verified), with the hint to delete the corrupt file to resume
  // from it (or saying no intact one exists). DataError "no checkpoint in DIR" when there is none.
  // SystemError when a file cannot be read at all (permissions, I/O error): that is not corruption.
  LoadedCheckpoint loadLatest() const;

 private:
  void prune(int64_t writtenStep) const;

  std::string dir_;
  int keep_;
};

}  // namespace gradsync
