// One checkpoint file: an ordered list of named binary sections (the trainer serialises its
// tensors, optimizer state and a small JSON metadata string to bytes; this layer never looks
// inside them). The byte layout, the atomicity argument and the errors are in docs/checkpoints.md.
//
// Integrity: every payload carries its own CRC32 and a trailer carries the CRC32 of every byte
// before it, so truncation anywhere (even exactly between sections) and any single corrupted byte
// are reported as DataError instead of loading garbage into a model.
//
// Thread-safety: the functions keep no state; concurrent calls on different paths are safe.
// Two writers on the same path at once (threads of one process share the temp-file name) are not.
// All calls block on disk I/O, including fsync.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

struct Section {
  std::string name;  // any bytes (spaces, NUL, UTF-8), at most kMaxSectionNameBytes
  std::vector<uint8_t> data;
};

namespace ckpt {

inline constexpr char kMagic[8] = {'G', 'S', 'C', 'K', 'P', 'T', '\0', '\0'};
// The format this build writes and the only one it reads.
inline constexpr uint32_t kFormatVersion = 1;
inline constexpr size_t kMaxSectionNameBytes = 256;
inline constexpr size_t kMaxSections = 4096;

}  // namespace ckpt

// Writes `sections`, in order, to `path` atomically: readers (and a restart after a crash or power
// loss at any point) see either the previous file at `path` or the complete new one, never a mix.
// It writes `path.tmp.<pid>`, fsyncs it, renames it over `path` and fsyncs the directory.
// Throws ConfigError (before touching the disk) for more than kMaxSections sections, a name longer
// than kMaxSectionNameBytes or two sections with the same name; SystemError (errno text, path) when
// a system call fails, in which case the temp file has been removed and `path` is untouched, except
// when only the final directory fsync failed: the new file is then in place but may not survive a
// power loss.
void writeCheckpointFile(const std::string& path, const std::vector<Section>& sections);

// Reads and verifies a whole checkpoint. Throws DataError naming `path` and what is wrong: missing,
// truncated at byte N, bad magic, unsupported format version, a length field beyond a limit,
// duplicate section name, checksum mismatch in section "name", file checksum mismatch, trailing
// garbage. Throws SystemError when the file exists but cannot be opened or read (permissions, I/O).
// Memory: allocates the payloads only (no copy of the whole file), and never from a length field
// that has not been checked against the file's actual size.
std::vector<Section> readCheckpointFile(const std::string& path);

// The section called `name`; throws DataError listing the names present when there is none.
// The reference points into `sections`.
const Section& findSection(const std::vector<Section>& sections, const std::string& name);

}  // namespace gradsync
