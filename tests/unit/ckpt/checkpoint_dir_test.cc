#include "ckpt/checkpoint_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>

#include "ckpt_test_util.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::dataErrorOf;
using testing::readBytes;
using testing::ScratchDir;
using testing::toBytes;
using testing::writeBytes;

std::vector<Section> sectionsForStep(int64_t step) {
  return {{"step", toBytes(std::to_string(step))}, {"weights", std::vector<uint8_t>(64, 7)}};
}

int64_t stepInside(const LoadedCheckpoint& loaded) {
  const auto& data = findSection(loaded.sections, "step").data;
  return std::stoll(std::string(data.begin(), data.end()));
}

void flipByte(const std::string& path, size_t offset) {
  std::vector<uint8_t> bytes = readBytes(path);
  bytes.at(offset) ^= 0x40;
  writeBytes(path, bytes);
}

TEST(CheckpointDir, PathsAreZeroPaddedSoNamesSort) {
  CheckpointDir dir("/ckpts");
  EXPECT_EQ(dir.pathForStep(1200), "/ckpts/step-000000001200.gsckpt");
  EXPECT_EQ(dir.pathForStep(0), "/ckpts/step-000000000000.gsckpt");
  EXPECT_EQ(dir.pathForStep(INT64_MAX), "/ckpts/step-9223372036854775807.gsckpt");
  EXPECT_THROW(dir.pathForStep(-1), ConfigError);
  EXPECT_THROW(CheckpointDir("/ckpts", 0), ConfigError);
  EXPECT_THROW(CheckpointDir(""), ConfigError);
}

TEST(CheckpointDir, EmptyOrMissingDirectoryHasNoCheckpoint) {
  ScratchDir scratch;
  CheckpointDir dir(scratch / "not-yet");
  EXPECT_TRUE(dir.steps().empty());
  EXPECT_FALSE(dir.latest().has_value());
  std::string message = dataErrorOf([&] { dir.loadLatest(); });
  EXPECT_NE(message.find("no checkpoint in " + (scratch / "not-yet")), std::string::npos)
      << message;
}

TEST(CheckpointDir, WritesCreatesDirectoryAndLoadsLatest) {
  ScratchDir scratch;
  CheckpointDir dir(scratch / "a/b", 4);
  dir.write(10, sectionsForStep(10));
  dir.write(1200, sectionsForStep(1200));
  dir.write(300, sectionsForStep(300));
  dir.write(INT64_MAX, sectionsForStep(INT64_MAX));
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{10, 300, 1200, INT64_MAX}));
  std::filesystem::remove(dir.pathForStep(INT64_MAX));
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{10, 300, 1200}));
  EXPECT_EQ(dir.latest(), 1200);
  LoadedCheckpoint loaded = dir.loadLatest();
  EXPECT_EQ(loaded.step, 1200);
  EXPECT_EQ(loaded.path, dir.pathForStep(1200));
  EXPECT_EQ(stepInside(loaded), 1200);
}

// A crash mid-write leaves step-*.gsckpt.tmp.<pid> behind; it must never be taken for a
// checkpoint. Unrelated names are ignored as well.
TEST(CheckpointDir, IgnoresStaleTempFilesAndUnrelatedNames) {
  ScratchDir scratch;
  CheckpointDir dir(scratch.path());
  dir.write(1, sectionsForStep(1));
  dir.write(2, sectionsForStep(2));
  std::vector<uint8_t> partial = readBytes(dir.pathForStep(2));
  partial.resize(partial.size() / 2);
  writeBytes(dir.pathForStep(3) + ".tmp.12345", partial);
  // Includes non-canonical spellings of a step, which pathForStep() would not find again.
  for (const char* name : {"notes.txt", "step-.gsckpt", "step-12a.gsckpt", "step-5.gsckpt~",
                           "xstep-9.gsckpt", "step-9.gsckpt", "step-00000000000009.gsckpt",
                           "step-0000000000000000009.gsckpt", "step-000000000007.gsckpt.tmp.x"}) {
    writeBytes(scratch / name, toBytes("junk"));
  }
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(dir.latest(), 2);
  EXPECT_EQ(stepInside(dir.loadLatest()), 2);
  // Writing a later step deletes the stale temp file of an earlier one, and nothing foreign.
  writeBytes(dir.pathForStep(9) + ".tmp.777", partial);
  dir.write(4, sectionsForStep(4));
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{2, 4}));
  EXPECT_FALSE(std::filesystem::exists(dir.pathForStep(3) + ".tmp.12345"));
  EXPECT_TRUE(std::filesystem::exists(dir.pathForStep(9) + ".tmp.777"));
  EXPECT_TRUE(std::filesystem::exists(scratch / "notes.txt"));
  EXPECT_TRUE(std::filesystem::exists(scratch / "step-9.gsckpt"));
  EXPECT_TRUE(std::filesystem::exists(scratch / "step-000000000007.gsckpt.tmp.x"));
}

TEST(CheckpointDir, KeepsTheNewestTwo) {
  ScratchDir scratch;
  CheckpointDir dir(scratch.path(), 2);
  for (int64_t step = 100; step <= 500; step += 100) {
    dir.write(step, sectionsForStep(step));
    EXPECT_LE(dir.steps().size(), 2u);
  }
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{400, 500}));
  CheckpointDir one(scratch / "one", 1);
  one.write(1, sectionsForStep(1));
  one.write(2, sectionsForStep(2));
  EXPECT_EQ(one.steps(), (std::vector<int64_t>{2}));
}

// A run restarted from an older step must not delete the newer checkpoints it finds.
TEST(CheckpointDir, NeverDeletesNewerCheckpoints) {
  ScratchDir scratch;
  CheckpointDir dir(scratch.path(), 2);
  dir.write(400, sectionsForStep(400));
  dir.write(500, sectionsForStep(500));
  dir.write(100, sectionsForStep(100));
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{100, 400, 500}));
  dir.write(500, sectionsForStep(500));  // rewriting a step replaces it
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{400, 500}));
}

// Runs in a forked child because, as root, permission bits do not stop writes: the child drops to
// an unprivileged user first. Exit code 0: SystemError naming the file.
int writeIntoReadOnlyDirectory(const std::string& path) {
  if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 2;
  CheckpointDir dir(path);
  try {
    dir.write(2, sectionsForStep(2));
  } catch (const SystemError& e) {
    return std::string(e.what()).find(dir.pathForStep(2)) != std::string::npos ? 0 : 3;
  } catch (...) {
    return 4;
  }
  return 1;
}

TEST(CheckpointDir, UnwritableDirectoryIsSystemErrorAndKeepsPrevious) {
  ScratchDir scratch;
  std::string path = scratch / "ckpts";
  CheckpointDir dir(path);
  dir.write(1, sectionsForStep(1));
  ASSERT_EQ(::chmod(scratch.path().c_str(), 0755), 0);  // the child user must reach the directory
  ASSERT_EQ(::chmod(path.c_str(), 0555), 0);
  // A plain fork (not a death test, whose threadsafe style re-runs this whole test in the child).
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(writeIntoReadOnlyDirectory(path));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  ASSERT_EQ(::chmod(path.c_str(), 0755), 0);
  EXPECT_EQ(dir.steps(), (std::vector<int64_t>{1}));
  EXPECT_EQ(stepInside(dir.loadLatest()), 1);
}

// The newest is corrupt: loading refuses, naming it and the newest older one that is intact.
TEST(CheckpointDir, CorruptNewestNamesTheOlderIntactOne) {
  ScratchDir scratch;
  CheckpointDir dir(scratch.path(), 4);
  for (int64_t step : {1, 2, 3, 4}) dir.write(step, sectionsForStep(step));
  flipByte(dir.pathForStep(4), 60);  // inside the "weights" payload
  std::vector<uint8_t> truncated = readBytes(dir.pathForStep(3));
  truncated.resize(truncated.size() - 5);
  writeBytes(dir.pathForStep(3), truncated);
  std::string message = dataErrorOf([&] { dir.loadLatest(); });
  EXPECT_NE(message.find("newest checkpoint (step 4) is corrupt: checkpoint '" +
                         dir.pathForStep(4) + "': checksum mismatch"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the newest intact one is " + dir.pathForStep(2) + " (step 2)"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("delete " + dir.pathForStep(4) + " and " + dir.pathForStep(3) +
                         " to resume from " + dir.pathForStep(2)),
            std::string::npos)
      << message;
  // Following the hint works.
  std::filesystem::remove(dir.pathForStep(4));
  std::filesystem::remove(dir.pathForStep(3));
  EXPECT_EQ(stepInside(dir.loadLatest()), 2);
}

TEST(CheckpointDir, AllCorruptSaysNoIntactOne) {
  ScratchDir scratch;
  CheckpointDir dir(scratch.path());
  dir.write(1, sectionsForStep(1));
  dir.write(2, sectionsForStep(2));
  flipByte(dir.pathForStep(1), 20);
  flipByte(dir.pathForStep(2), 20);
  std::string message = dataErrorOf([&] { dir.loadLatest(); });
  EXPECT_NE(message.find("no older intact checkpoint"), std::string::npos) << message;
}

}  // namespace
}  // namespace gradsync
