#include "data/text_corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "gradsync/error.h"

namespace gradsync {
namespace fs = std::filesystem;
namespace {

std::vector<uint8_t> readBytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw DataError(fmt::format("cannot read text file {}", file.string()));
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The length of the UTF-8 sequence that `lead` starts (0: not a lead byte). Overlong two-byte
// forms (0xC0, 0xC1) and lead bytes past U+10FFFF (0xF5 on) are invalid.
int sequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

std::vector<fs::path> folderFiles(const fs::path& folder) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(folder)) {
    if (entry.is_regular_file() && !entry.is_symlink()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

bool isUtf8Text(std::span<const uint8_t> bytes) {
  for (size_t i = 0; i < bytes.size();) {
    if (bytes[i] == 0) return false;
    const int length = sequenceLength(bytes[i]);
    if (length == 0 || i + static_cast<size_t>(length) > bytes.size()) return false;
    for (int k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return false;
    }
    i += static_cast<size_t>(length);
  }
  return true;
}

TextCorpus loadTextCorpus(const std::string& path, size_t window) {
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw DataError(fmt::format("text corpus {} does not exist", path),
                    {.hint = path == kFortunesDir ? kFortunesInstallHint
                                                  : "pass a UTF-8 file or a folder of them"});
  }
  TextCorpus corpus;
  std::vector<uint8_t> text;
  const bool folder = fs::is_directory(status);
  for (const fs::path& file : folder ? folderFiles(path) : std::vector<fs::path>{path}) {
    std::vector<uint8_t> bytes = readBytes(file);
    if (!isUtf8Text(bytes)) {
      if (!folder) {
        throw DataError(fmt::format("{} is not text: it holds a NUL byte or invalid UTF-8", path),
                        {.hint = "--dataset text:PATH reads UTF-8 text"});
      }
      corpus.skipped.push_back(file.string());
      continue;
    }
    corpus.files.push_back(file.string());
    text.insert(text.end(), bytes.begin(), bytes.end());
  }
  if (text.empty()) {
    throw DataError(folder ? fmt::format("folder {} holds no text file", path)
                           : fmt::format("text file {} is empty", path));
  }
  const auto heldOut = static_cast<size_t>(static_cast<double>(text.size()) * kHeldOutFraction);
  if (heldOut < window || text.size() - heldOut < window) {
    throw DataError(
        fmt::format("text corpus {} is too short: {} bytes, and each of its parts (the last {:g}% "
                    "held out) must hold a window of {} tokens (the context + 1)",
                    path, text.size(), 100 * kHeldOutFraction, window),
        {.hint = "use more text or a shorter context"});
  }
  corpus.heldOut.assign(text.end() - static_cast<std::ptrdiff_t>(heldOut), text.end());
  text.resize(text.size() - heldOut);
  corpus.train = std::move(text);
  return corpus;
}

size_t windowCount(std::span<const uint8_t> text, size_t window) {
  if (window < 2 || text.size() < window) return 0;
  return (text.size() - 1) / (window - 1);
}

void copyWindow(std::span<const uint8_t> text, size_t window, size_t index,
                std::span<int64_t> tokens) {
  const size_t start = index * (window - 1);
  for (size_t i = 0; i < window; ++i) tokens[i] = text[start + i];
}

}  // namespace gradsync
