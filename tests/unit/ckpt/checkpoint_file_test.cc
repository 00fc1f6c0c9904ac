#include "ckpt/checkpoint_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <random>

#include "ckpt_test_util.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::dataErrorOf;
using testing::readBytes;
using testing::ScratchDir;
using testing::toBytes;
using testing::writeBytes;

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// A small checkpoint exercising every field: several sections, an empty payload, an empty name.
std::vector<Section> smallSections() {
  return {{"meta", toBytes(R"({"step":7})")}, {"", {}}, {"w", randomBytes(9, 1)}};
}

void expectEqual(const std::vector<Section>& a, const std::vector<Section>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name) << i;
    EXPECT_TRUE(a[i].data == b[i].data) << "section " << i << " payload differs";
  }
}

bool noTempFiles(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) return false;
  }
  return true;
}

TEST(CheckpointFile, RoundTripsSectionsInOrder) {
  ScratchDir dir;
  std::string binaryName("name with spaces\0\xff\n", 19);
  std::vector<Section> sections = {{"empty", {}},
                                   {binaryName, randomBytes(1000, 2)},
                                   {"big", randomBytes(10 << 20, 3)},
                                   {std::string(ckpt::kMaxSectionNameBytes, 'n'), {42}}};
  writeCheckpointFile(dir / "a.gsckpt", sections);
  expectEqual(readCheckpointFile(dir / "a.gsckpt"), sections);
  EXPECT_TRUE(noTempFiles(dir.path()));
}

TEST(CheckpointFile, RoundTripsZeroSections) {
  ScratchDir dir;
  writeCheckpointFile(dir / "z.gsckpt", {});
  EXPECT_TRUE(readCheckpointFile(dir / "z.gsckpt").empty());
  // Header (16 bytes) and trailer (12): nothing else.
  EXPECT_EQ(readBytes(dir / "z.gsckpt").size(), 28u);
}

TEST(CheckpointFile, OverwritesAtomically) {
  ScratchDir dir;
  writeCheckpointFile(dir / "a.gsckpt", smallSections());
  std::vector<Section> second = {{"only", toBytes("second")}};
  writeCheckpointFile(dir / "a.gsckpt", second);
  expectEqual(readCheckpointFile(dir / "a.gsckpt"), second);
}

TEST(CheckpointFile, LayoutIsAsDocumented) {
  ScratchDir dir;
  writeCheckpointFile(dir / "a.gsckpt", {{"ab", {1, 2, 3}}});
  std::vector<uint8_t> b = readBytes(dir / "a.gsckpt");
  std::vector<uint8_t> head = {'G', 'S', 'C', 'K', 'P', 'T', 0, 0, 1, 0, 0, 0, 1, 0,
                               0,   0,   2,   0,   'a', 'b', 3, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_EQ(b.size(), head.size() + 4 + 3 + 4 + 8);
  EXPECT_TRUE(std::equal(head.begin(), head.end(), b.begin()));
  EXPECT_EQ(b[28] | b[29] << 8 | b[30] << 16 | static_cast<uint32_t>(b[31]) << 24,
            0x55bc801du);  // CRC32 of {1, 2, 3}
  EXPECT_TRUE(std::equal(b.end() - 8, b.end(), head.begin()));
}

TEST(CheckpointFile, RejectsInvalidSectionsBeforeWriting) {
  ScratchDir dir;
  std::string path = dir / "x.gsckpt";
  EXPECT_THROW(writeCheckpointFile(path, {{std::string(257, 'n'), {}}}), ConfigError);
  EXPECT_THROW(writeCheckpointFile(path, {{"a", {}}, {"a", {1}}}), ConfigError);
  EXPECT_THROW(writeCheckpointFile(path, std::vector<Section>(ckpt::kMaxSections + 1)),
               ConfigError);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(CheckpointFile, MissingFileIsDataErrorNamingIt) {
  ScratchDir dir;
  std::string message = dataErrorOf([&] { readCheckpointFile(dir / "nope.gsckpt"); });
  EXPECT_NE(message.find(dir / "nope.gsckpt"), std::string::npos) << message;
  EXPECT_NE(message.find("missing"), std::string::npos) << message;
}

TEST(CheckpointFile, TruncationAtEveryOffsetIsDetected) {
  ScratchDir dir;
  writeCheckpointFile(dir / "full", smallSections());
  std::vector<uint8_t> full = readBytes(dir / "full");
  for (size_t size = 0; size < full.size(); ++size) {
    writeBytes(dir / "cut", {full.begin(), full.begin() + static_cast<ptrdiff_t>(size)});
    std::string message = dataErrorOf([&] { readCheckpointFile(dir / "cut"); });
    EXPECT_NE(message.find(fmt::format("truncated at byte {}", size)), std::string::npos)
        << "size " << size << ": " << message;
  }
}

TEST(CheckpointFile, TrailingGarbageIsDetected) {
  ScratchDir dir;
  writeCheckpointFile(dir / "a", smallSections());
  std::vector<uint8_t> bytes = readBytes(dir / "a");
  bytes.push_back(0);
  writeBytes(dir / "a", bytes);
  std::string message = dataErrorOf([&] { readCheckpointFile(dir / "a"); });
  EXPECT_NE(message.find("trailing garbage"), std::string::npos) << message;
}

// Every value of every byte: a single corrupted byte can never load. See docs/checkpoints.md for
// why this holds for any file, not just this one (the trailer CRC always covers bytes [0, N-12)).
// The file is tiny (60 bytes, 15k variants) but has every kind of field, an empty section included.
TEST(CheckpointFile, EverySingleByteCorruptionIsDetected) {
  ScratchDir dir;
  std::string path = dir / "a";
  writeCheckpointFile(path, {{"m", {1, 2, 3}}, {"", {}}});
  std::vector<uint8_t> bytes = readBytes(path);
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  size_t undetected = 0;
  for (size_t offset = 0; offset < bytes.size(); ++offset) {
    for (int mask = 1; mask < 256; ++mask) {
      uint8_t changed = bytes[offset] ^ static_cast<uint8_t>(mask);
      ASSERT_EQ(::pwrite(fd, &changed, 1, static_cast<off_t>(offset)), 1);
      try {
        readCheckpointFile(path);
        // Reports the first few only: a broken check would otherwise print thousands of lines.
        if (++undetected <= 10) ADD_FAILURE() << "undetected: byte " << offset << " xor " << mask;
      } catch (const DataError&) {
      }
    }
    ASSERT_EQ(::pwrite(fd, &bytes[offset], 1, static_cast<off_t>(offset)), 1);
  }
  ::close(fd);
  EXPECT_EQ(undetected, 0u);
}

// Rewrites the little-endian field at `offset` of a valid file.
void patch(const std::string& path, size_t offset, uint64_t value, int width) {
  std::vector<uint8_t> bytes = readBytes(path);
  for (int i = 0; i < width; ++i) bytes[offset + i] = static_cast<uint8_t>(value >> (8 * i));
  writeBytes(path, bytes);
}

TEST(CheckpointFile, ReportsWhatIsWrong) {
  ScratchDir dir;
  std::string p = dir / "a";
  auto expectMessage = [&](const std::string& part) {
    std::string message = dataErrorOf([&] { readCheckpointFile(p); });
    EXPECT_NE(message.find(part), std::string::npos) << message;
    EXPECT_NE(message.find(p), std::string::npos) << message;
  };
  std::vector<Section> one = {{"w", toBytes("payload")}};
  // Offsets in `one`: version 8, count 12, name length 16, name 18, payload length 19, CRC 27,
  // payload 31..37, trailer 38.
  writeCheckpointFile(p, one);
  patch(p, 0, 'X', 1);
  expectMessage("bad magic");
  writeCheckpointFile(p, one);
  patch(p, 8, 2, 4);
  expectMessage("unsupported format version 2 (this build reads 1)");
  writeCheckpointFile(p, one);
  patch(p, 31, 'P', 1);
  expectMessage("checksum mismatch in section \"w\"");
  writeCheckpointFile(p, one);
  patch(p, 12, 5000, 4);
  expectMessage("section count 5000 exceeds the limit of 4096");
  writeCheckpointFile(p, one);
  patch(p, 16, 300, 2);
  expectMessage("name length 300 at offset 16 exceeds the limit of 256");
  writeBytes(p, toBytes("hello"));
  expectMessage("bad magic");
}

// A corrupt length must be checked against the file size, not allocated (this would be 1 EiB).
TEST(CheckpointFile, HugeLengthFieldIsTruncationNotAllocation) {
  ScratchDir dir;
  std::string p = dir / "a";
  writeCheckpointFile(p, {{"w", toBytes("payload")}});
  patch(p, 19, uint64_t{1} << 60, 8);
  std::string message = dataErrorOf([&] { readCheckpointFile(p); });
  EXPECT_NE(message.find("truncated at byte 50"), std::string::npos) << message;
}

TEST(CheckpointFile, FindSection) {
  std::vector<Section> sections = smallSections();
  EXPECT_EQ(&findSection(sections, "w"), &sections[2]);
  EXPECT_EQ(&findSection(sections, ""), &sections[1]);
  std::string message = dataErrorOf([&] { findSection(sections, "optimizer"); });
  EXPECT_NE(message.find("no section \"optimizer\""), std::string::npos) << message;
  EXPECT_NE(message.find("\"meta\""), std::string::npos) << message;
}

// rename(2) over a non-empty directory fails after the data was written and synced: the temp
// file must not be left behind.
TEST(CheckpointFile, FailedRenameRemovesTempFile) {
  ScratchDir dir;
  std::filesystem::create_directories(dir / "a.gsckpt/inside");
  EXPECT_THROW(writeCheckpointFile(dir / "a.gsckpt", smallSections()), SystemError);
  EXPECT_TRUE(noTempFiles(dir.path()));
}

// Lowers the file size limit: writes beyond it fail with EFBIG, like a full disk. Works as root,
// where permission bits do not stop writes.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    previousHandler_ = std::signal(SIGXFSZ, SIG_IGN);  // fail with EFBIG instead of dying
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previousHandler_);
  }

 private:
  rlimit saved_{};
  void (*previousHandler_)(int) = nullptr;
};

TEST(CheckpointFile, WriteFailureMidFileKeepsPreviousAndRemovesTemp) {
  ScratchDir dir;
  std::string p = dir / "a.gsckpt";
  writeCheckpointFile(p, smallSections());
  try {
    FileSizeLimit limit(1 << 16);
    writeCheckpointFile(p, {{"big", randomBytes(1 << 18, 4)}});
    FAIL() << "expected SystemError";
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
  expectEqual(readCheckpointFile(p), smallSections());
  EXPECT_TRUE(noTempFiles(dir.path()));
}

}  // namespace
}  // namespace gradsync
