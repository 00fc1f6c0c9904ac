// Criteo's click-log TSV format (the display-advertising challenge's train.txt, and the Terabyte
// days): one sample per line, 1 + 13 + 26 tab-separated fields:
//   label (0 or 1) \t I1 ... I13 (integer counts) \t C1 ... C26 (32-bit hashes, 8 hex digits)
// Any count or hash may be empty (missing). Hashes index their tables modulo the table's size
// (the hashing trick of DLRM's --max-ind-range), see data/click_log.h.
//
// CriteoTsvLog reads a file with random access by line: opening it scans the file once and keeps
// the byte offset of every 1024th line (8 bytes per 1024 samples), so reading a batch seeks to the
// nearest indexed line and parses forward; consecutive reads continue where the last stopped.
// Thread-safe (reads are serialized on the open file).
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/click_log.h"

namespace gradsync {

class CriteoTsvLog final : public ClickData {
 public:
  // Opens and indexes `path` for tables of `tableRows` rows (26 for Criteo). Throws DataError
  // naming the file if it is missing or unreadable, or if a line has the wrong number of fields
  // (found while indexing; values are checked when read).
  CriteoTsvLog(std::string path, std::vector<uint64_t> tableRows);
  ~CriteoTsvLog() override;
  CriteoTsvLog(const CriteoTsvLog&) = delete;
  CriteoTsvLog& operator=(const CriteoTsvLog&) = delete;

  const ClickSchema& schema() const override { return schema_; }
  size_t size() const override { return lines_; }
  // Throws DataError naming the file, the line (1-based) and the field for a malformed value.
  void read(size_t first, size_t count, ClickBatch& out) const override;
  ClickRecord record(size_t index) const override;

 private:
  void seekTo(size_t line) const;  // with the mutex held
  ClickRecord parseNext() const;   // the line at the cursor; with the mutex held

  std::string path_;
  ClickSchema schema_;
  size_t lines_ = 0;
  std::vector<long> index_;  // byte offset of line k * kIndexStride
  mutable std::mutex mutex_;
  mutable std::FILE* file_ = nullptr;
  mutable size_t cursor_ = 0;  // the line the file position is at
  mutable std::string line_;
};

// Parses one line (without its newline). Throws DataError naming `where` (e.g. "file:line") and
// the field when it is malformed.
ClickRecord parseCriteoLine(const std::string& line, int tables, const std::string& where);
// The line of a record (without a newline): the inverse of parseCriteoLine.
std::string formatCriteoLine(const ClickRecord& record);
// Writes samples [first, first + count) of `log` to `path` as Criteo TSV (e.g. to export a
// synthetic log, or for tests). Throws SystemError naming the path when it cannot be written.
void writeCriteoTsv(const std::string& path, const ClickData& log, size_t first, size_t count);

}  // namespace gradsync
