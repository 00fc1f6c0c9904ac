#include "data/criteo_tsv.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/socket.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr size_t kIndexStride = 1024;

// Reads one line into `line` (without the newline); false at the end of the file.
bool readLine(std::FILE* file, std::string& line) {
  line.clear();
  int c;
  while ((c = std::getc(file)) != EOF && c != '\n') line.push_back(static_cast<char>(c));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return c != EOF || !line.empty();
}

std::vector<std::string_view> splitTabs(const std::string& line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  for (;;) {
    size_t tab = line.find('\t', start);
    fields.emplace_back(line.data() + start,
                        (tab == std::string::npos ? line.size() : tab) - start);
    if (tab == std::string::npos) return fields;
    start = tab + 1;
  }
}

[[noreturn]] void malformed(const std::string& where, const std::string& field,
                            std::string_view value, const std::string& expected) {
  throw DataError(
      fmt::format("criteo log {}: field {} is '{}', expected {}", where, field, value, expected),
      {.hint = "the Criteo TSV format is label, I1..I13, C1..C26, tab-separated"});
}

}  // namespace

ClickRecord parseCriteoLine(const std::string& line, int tables, const std::string& where) {
  std::vector<std::string_view> fields = splitTabs(line);
  const size_t expected = 1 + kCriteoDenseFeatures + static_cast<size_t>(tables);
  if (fields.size() != expected) {
    throw DataError(
        fmt::format("criteo log {}: {} tab-separated fields, expected {} (label, {} counts, {} "
                    "categorical)",
                    where, fields.size(), expected, kCriteoDenseFeatures, tables));
  }
  ClickRecord record;
  if (fields[0] != "0" && fields[0] != "1") malformed(where, "label", fields[0], "0 or 1");
  record.label = fields[0] == "1" ? 1 : 0;
  record.counts.resize(kCriteoDenseFeatures);
  for (int j = 0; j < kCriteoDenseFeatures; ++j) {
    std::string_view text = fields[1 + j];
    if (text.empty()) continue;
    int64_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc() || end != text.data() + text.size()) {
      malformed(where, fmt::format("I{}", j + 1), text, "an integer or nothing");
    }
    record.counts[j] = value;
  }
  record.hashes.resize(static_cast<size_t>(tables));
  for (int t = 0; t < tables; ++t) {
    std::string_view text = fields[1 + kCriteoDenseFeatures + t];
    if (text.empty()) continue;
    uint32_t value = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
    if (error != std::errc() || end != text.data() + text.size() || text.size() > 8) {
      malformed(where, fmt::format("C{}", t + 1), text, "up to 8 hex digits or nothing");
    }
    record.hashes[static_cast<size_t>(t)] = value;
  }
  return record;
}

std::string formatCriteoLine(const ClickRecord& record) {
  std::string line = record.label != 0 ? "1" : "0";
  for (const auto& count : record.counts) {
    line += '\t';
    if (count) line += std::to_string(*count);
  }
  for (const auto& hash : record.hashes) {
    line += '\t';
    if (hash) line += fmt::format("{:08x}", *hash);
  }
  return line;
}

void writeCriteoTsv(const std::string& path, const ClickData& log, size_t first, size_t count) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (!file) {
    throw SystemError(fmt::format("cannot write criteo log '{}': {}", path, errnoText(errno)));
  }
  bool ok = true;
  for (size_t i = 0; i < count && ok; ++i) {
    std::string line = formatCriteoLine(log.record(first + i)) + "\n";
    ok = std::fwrite(line.data(), 1, line.size(), file) == line.size();
  }
  const int err = errno;
  if (std::fclose(file) != 0 || !ok) {
    throw SystemError(fmt::format("cannot write criteo log '{}': {}", path, errnoText(err)));
  }
}

CriteoTsvLog::CriteoTsvLog(std::string path, std::vector<uint64_t> tableRows)
    : path_(std::move(path)) {
  schema_.tableRows = std::move(tableRows);
  file_ = std::fopen(path_.c_str(), "r");
  if (!file_) {
    throw DataError(fmt::format("cannot open criteo log '{}': {}", path_, errnoText(errno)),
                    {.hint = "pass the directory holding train.txt and test.txt as --data-dir"});
  }
  const size_t expectedTabs = kCriteoDenseFeatures + schema_.tableRows.size();
  for (;;) {
    const long offset = std::ftell(file_);
    if (!readLine(file_, line_)) break;
    if (lines_ % kIndexStride == 0) index_.push_back(offset);
    ++lines_;
    if (static_cast<size_t>(std::count(line_.begin(), line_.end(), '\t')) != expectedTabs) {
      parseCriteoLine(line_, schema_.tables(), fmt::format("'{}' line {}", path_, lines_));
    }
  }
  if (std::ferror(file_)) {
    throw DataError(fmt::format("cannot read criteo log '{}': {}", path_, errnoText(errno)));
  }
  seekTo(0);
}

CriteoTsvLog::~CriteoTsvLog() {
  if (file_) std::fclose(file_);
}

void CriteoTsvLog::seekTo(size_t line) const {
  if (cursor_ == line && line != 0) return;
  const size_t base = line / kIndexStride;
  std::clearerr(file_);
  if (index_.empty() || std::fseek(file_, index_[base], SEEK_SET) != 0) {
    std::rewind(file_);
  }
  cursor_ = index_.empty() ? 0 : base * kIndexStride;
  while (cursor_ < line) {
    readLine(file_, line_);
    ++cursor_;
  }
}

ClickRecord CriteoTsvLog::parseNext() const {
  if (!readLine(file_, line_)) {
    throw DataError(fmt::format("criteo log '{}' ended at line {}: it changed after it was opened",
                                path_, cursor_ + 1));
  }
  ++cursor_;
  return parseCriteoLine(line_, schema_.tables(), fmt::format("'{}' line {}", path_, cursor_));
}

void CriteoTsvLog::read(size_t first, size_t count, ClickBatch& out) const {
  GS_CHECK_LE(first + count, lines_);
  out.resize(schema_, count);
  std::lock_guard<std::mutex> lock(mutex_);
  seekTo(first);
  for (size_t i = 0; i < count; ++i) putRecord(schema_, parseNext(), i, out);
}

ClickRecord CriteoTsvLog::record(size_t index) const {
  GS_CHECK_LT(index, lines_);
  std::lock_guard<std::mutex> lock(mutex_);
  seekTo(index);
  return parseNext();
}

}  // namespace gradsync
