// Text for language models: a UTF-8 file, or every text file of a folder, as bytes (byte-level
// tokens, 256 of them), split into a training part and a held-out part, and cut into windows of
// the model's context plus one token (the inputs and, shifted by one, the targets).
//
// Blocking (file I/O), reentrant and thread-safe: nothing is kept between calls; a TextCorpus is
// immutable once loaded. Failures throw gradsync::DataError naming the file and what is wrong:
// missing or unreadable, empty, not text (a NUL byte or invalid UTF-8), or too short for one
// window in each part.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gradsync {

// Where Debian's fortunes package installs its text: the default corpus (`--dataset text`).
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
inline constexpr const char* kFortunesInstallHint =
    "install Debian's fortunes (apt-get install fortunes) or pass --dataset text:PATH";
// The held-out part: the last tenth of the corpus (of each file's bytes taken in name order,
// concatenated), so that training never sees a held-out window.
inline constexpr double kHeldOutFraction = 0.1;
inline constexpr int kByteVocabulary = 256;

struct TextCorpus {
  std::vector<uint8_t> train;
  std::vector<uint8_t> heldOut;
  std::vector<std::string> files;    // the files read, in order
  std::vector<std::string> skipped;  // a folder's files that are not text (fortunes' .dat indexes)
};

// Reads `path`: a file (which must be text), or a folder whose regular files (symbolic links
// skipped: fortunes links each file to a .u8 twin) are read in name order, those that are not
// text skipped and listed. `window` (context + 1 tokens) must fit into each part at least once.
TextCorpus loadTextCorpus(const std::string& path, size_t window);

// The number of windows of `window` tokens in `text`, each starting `window - 1` tokens after the
// previous one (a window's last token is the next one's first): every token is a target once.
size_t windowCount(std::span<const uint8_t> text, size_t window);
// Copies window `index` of `text` into `tokens` (window values).
void copyWindow(std::span<const uint8_t> text, size_t window, size_t index,
                std::span<int64_t> tokens);

// Whether `bytes` is text: no NUL byte, and valid UTF-8.
bool isUtf8Text(std::span<const uint8_t> bytes);

}  // namespace gradsync
