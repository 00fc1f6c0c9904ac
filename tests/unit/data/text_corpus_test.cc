// Text for language models (data/text_corpus.h): the corpus a file or folder gives, its held-out
// split and windows, and an error naming the file for each way a path can be wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "data/text_corpus.h"
#include "gradsync/error.h"
#include "support/scratch_dir.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The DataError's message, which must name `path`.
std::string loadError(const std::string& path, size_t window) {
  try {
    loadTextCorpus(path, window);
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error for " << path;
  return "";
}

TEST(TextCorpus, AFileSplitsIntoTrainingAndHeldOutParts) {
  const fs::path dir = testing::scratchDir("text_corpus", "file");
  std::string text;
  for (int i = 0; i < 100; ++i) text += static_cast<char>('a' + i % 26);
  write(dir / "t.txt", text);
  const TextCorpus corpus = loadTextCorpus((dir / "t.txt").string(), 5);
  ASSERT_EQ(corpus.heldOut.size(), 10u);  // the last tenth
  EXPECT_EQ(std::string(corpus.train.begin(), corpus.train.end()), text.substr(0, 90));
  EXPECT_EQ(std::string(corpus.heldOut.begin(), corpus.heldOut.end()), text.substr(90));
  EXPECT_EQ(corpus.files, std::vector<std::string>{(dir / "t.txt").string()});
  testing::removeScratch(dir);
}

// Each window's last token is the next one's first, so every token after the first is a target
// exactly once; a partial window at the end is dropped.
TEST(TextCorpus, WindowsCoverEveryTargetOnce) {
  std::vector<uint8_t> text(23);
  std::iota(text.begin(), text.end(), 0);
  EXPECT_EQ(windowCount(text, 5), 5u);  // (23 - 1) / 4
  std::vector<int64_t> tokens(5);
  copyWindow(text, 5, 0, tokens);
  EXPECT_EQ(tokens, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  copyWindow(text, 5, 4, tokens);
  EXPECT_EQ(tokens, (std::vector<int64_t>{16, 17, 18, 19, 20}));
  EXPECT_EQ(windowCount(std::span(text).first(4), 5), 0u);
  EXPECT_EQ(windowCount(std::span(text).first(5), 5), 1u);
  EXPECT_EQ(windowCount({}, 5), 0u);
}

// A folder's text files in name order; binary files (fortunes' .dat indexes) and symbolic links
// (fortunes' .u8 twins) are left out.
TEST(TextCorpus, AFolderReadsItsTextFilesInNameOrder) {
  const fs::path dir = testing::scratchDir("text_corpus", "folder");
  write(dir / "b", std::string(50, 'b'));
  write(dir / "a", std::string(50, 'a'));
  write(dir / "a.dat", std::string("\0\1\2", 3));
  fs::create_symlink(dir / "a", dir / "a.u8");
  const TextCorpus corpus = loadTextCorpus(dir.string(), 5);
  EXPECT_EQ(corpus.files, (std::vector<std::string>{(dir / "a").string(), (dir / "b").string()}));
  EXPECT_EQ(corpus.skipped, std::vector<std::string>{(dir / "a.dat").string()});
  EXPECT_EQ(corpus.train.front(), 'a');
  EXPECT_EQ(corpus.train.size() + corpus.heldOut.size(), 100u);
  testing::removeScratch(dir);
}

TEST(TextCorpus, EveryWrongPathIsNamedWithWhatIsWrong) {
  const fs::path dir = testing::scratchDir("text_corpus", "errors");
  EXPECT_NE(loadError((dir / "missing.txt").string(), 5).find("does not exist"), std::string::npos);
  write(dir / "empty.txt", "");
  EXPECT_NE(loadError((dir / "empty.txt").string(), 5).find("empty"), std::string::npos);
  write(dir / "binary", std::string("text\0more", 9));
  EXPECT_NE(loadError((dir / "binary").string(), 5).find("not text"), std::string::npos);
  write(dir / "latin1.txt", "caf\xe9 au lait, a long enough line of text");
  EXPECT_NE(loadError((dir / "latin1.txt").string(), 5).find("not text"), std::string::npos);
  write(dir / "short.txt", std::string(40, 'x'));  // 4 held-out bytes: no window of 5
  EXPECT_NE(loadError((dir / "short.txt").string(), 5).find("too short"), std::string::npos);
  fs::create_directories(dir / "no-text");
  write(dir / "no-text" / "x.dat", std::string("\0", 1));
  EXPECT_NE(loadError((dir / "no-text").string(), 5).find("no text file"), std::string::npos);
  testing::removeScratch(dir);
}

TEST(TextCorpus, Utf8IsCheckedSequenceBySequence) {
  auto text = [](const std::string& s) {
    return isUtf8Text({reinterpret_cast<const uint8_t*>(s.data()), s.size()});
  };
  EXPECT_TRUE(text("plain ascii\n"));
  EXPECT_TRUE(text("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // 2, 3 and 4 bytes
  EXPECT_FALSE(text("\xc3"));                                      // cut short
  EXPECT_FALSE(text("\xc0\xaf"));                                  // overlong
  EXPECT_FALSE(text("\xe2\x28\xa1"));                              // bad continuation
  EXPECT_FALSE(text("\xf5\x80\x80\x80"));                          // past U+10FFFF
  EXPECT_FALSE(text(std::string("a\0b", 3)));
}

}  // namespace
}  // namespace gradsync
