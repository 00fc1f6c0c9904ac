#include "data/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "gradsync/error.h"
#include "idx_test_util.h"

namespace gradsync {
namespace {

using testing::idxBytes;
using testing::writeGz;
using testing::writePlain;

constexpr int kCount = 5;
constexpr int kRows = 3;
constexpr int kCols = 4;

std::vector<uint8_t> pixelPayload(size_t n = size_t{kCount} * kRows * kCols) {
  std::vector<uint8_t> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i * 7);
  return p;
}
std::vector<uint8_t> labelPayload() {
  return {0, 9, 3, 3, 7};
}

// Writes a valid pair of files; each test then damages one of them.
class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    writeGz(images_, idxBytes({kCount, kRows, kCols}, pixelPayload()));
    writeGz(labels_, idxBytes({kCount}, labelPayload()));
  }
  // Expects readImageSet to throw DataError naming `file` and containing `fragment`.
  void expectError(const std::string& file, const std::string& fragment, int classes = 10) {
    try {
      readImageSet(images_, labels_, classes);
      FAIL() << "no error; expected one containing '" << fragment << "'";
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << what;
      EXPECT_NE(what.find(fragment), std::string::npos) << what;
    }
  }

  testing::TempDir dir_;
  std::string images_ = dir_.file("images-idx3-ubyte.gz");
  std::string labels_ = dir_.file("labels-idx1-ubyte.gz");
};

TEST_F(IdxTest, RoundTrip) {
  const ImageSet set = readImageSet(images_, labels_);
  EXPECT_EQ(set.count, kCount);
  EXPECT_EQ(set.rows, kRows);
  EXPECT_EQ(set.cols, kCols);
  EXPECT_EQ(set.pixels, pixelPayload());
  EXPECT_EQ(set.labels, labelPayload());
}

TEST_F(IdxTest, RoundTripLargerThanOneReadChunk) {
  // 3 MiB of payload crosses the reader's 1 MiB initial buffer and its growth steps.
  const uint32_t count = 3 * 1024, side = 32;
  std::vector<uint8_t> pixels = pixelPayload(size_t(count) * side * side);
  writeGz(images_, idxBytes({count, side, side}, pixels));
  writeGz(labels_, idxBytes({count}, std::vector<uint8_t>(count, 4)));
  const ImageSet set = readImageSet(images_, labels_);
  EXPECT_EQ(set.count, count);
  EXPECT_EQ(set.pixels, pixels);
}

TEST_F(IdxTest, ReadIdxGzGivesDims) {
  const IdxArray array = readIdxGz(images_, 3);
  EXPECT_EQ(array.dims, (std::vector<int64_t>{kCount, kRows, kCols}));
  EXPECT_EQ(array.data, pixelPayload());
}

TEST_F(IdxTest, WrongMagic) {
  auto bytes = idxBytes({kCount, kRows, kCols}, pixelPayload());
  bytes[0] = 0x12;
  writeGz(images_, bytes);
  expectError(images_, "bad magic number 0x12000803");
}

TEST_F(IdxTest, WrongElementType) {
  writeGz(images_, idxBytes({kCount, kRows, kCols}, pixelPayload(), 0x0D));
  expectError(images_, "element type 0x0D (float)");
}

TEST_F(IdxTest, WrongDimensionCount) {
  writeGz(images_, idxBytes({kCount, kRows * kCols}, pixelPayload()));
  expectError(images_, "has 2 dimensions, expected 3");
  SetUp();
  writeGz(labels_, idxBytes({kCount, 1}, labelPayload()));
  expectError(labels_, "has 2 dimensions, expected 1");
}

TEST_F(IdxTest, LabelsFilePassedAsImages) {
  std::swap(images_, labels_);
  expectError(images_, "has 1 dimensions, expected 3");
}

TEST_F(IdxTest, TruncatedHeader) {
  writeGz(images_, {0, 0, 8});
  expectError(images_, "ends inside the IDX header (3 of 4 magic bytes)");
  writeGz(images_, {0, 0, 8, 3, 0, 0});
  expectError(images_, "ends inside the IDX header (2 of 12 dimension bytes)");
  writeGz(images_, {});
  expectError(images_, "ends inside the IDX header (0 of 4 magic bytes)");
}

TEST_F(IdxTest, TruncatedPayload) {
  auto payload = pixelPayload();
  payload.pop_back();
  writeGz(images_, idxBytes({kCount, kRows, kCols}, payload));
  expectError(images_,
              "payload is truncated: dimensions 5 x 3 x 4 need 60 bytes, the file holds 59");
}

TEST_F(IdxTest, TrailingBytes) {
  auto payload = labelPayload();
  payload.insert(payload.end(), {1, 2, 3});
  writeGz(labels_, idxBytes({kCount}, payload));
  expectError(labels_, "3 trailing bytes after the 5-byte payload");
}

TEST_F(IdxTest, TruncatedGzipStream) {
  // A large incompressible-ish payload, cut in the middle of the compressed stream.
  std::vector<uint8_t> pixels(size_t(kCount) * 200 * 200);
  uint32_t x = 1;
  for (auto& p : pixels) p = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
  writeGz(images_, idxBytes({kCount, 200, 200}, pixels));
  std::filesystem::resize_file(images_, std::filesystem::file_size(images_) / 2);
  expectError(images_, "the gzip stream ends early (the file is truncated)");
}

TEST_F(IdxTest, CorruptGzipStream) {
  writeGz(images_, idxBytes({kCount, kRows, kCols}, pixelPayload()));
  std::vector<uint8_t> bytes(std::filesystem::file_size(images_));
  {
    std::ifstream in(images_, std::ios::binary);
    in.read(reinterpret_cast<char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  bytes[bytes.size() - 6] ^= 0xFF;  // inside the CRC-32 trailer
  writePlain(images_, bytes);
  expectError(images_, "corrupt gzip stream: incorrect data check");
}

TEST_F(IdxTest, NotGzip) {
  writePlain(images_, idxBytes({kCount, kRows, kCols}, pixelPayload()));
  expectError(images_, "not a gzip file");
  SetUp();
  const std::string text = "this is not a dataset\n";
  writePlain(labels_, std::vector<uint8_t>(text.begin(), text.end()));
  expectError(labels_, "not a gzip file");
}

TEST_F(IdxTest, EmptyPlainFile) {
  writePlain(images_, {});
  try {
    readImageSet(images_, labels_);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(images_), std::string::npos) << e.what();
  }
}

TEST_F(IdxTest, CountMismatch) {
  writeGz(labels_, idxBytes({kCount - 1}, {0, 1, 2, 3}));
  expectError(labels_, "holds 4 labels but " + images_ + " holds 5 images");
}

TEST_F(IdxTest, LabelOutOfRange) {
  expectError(labels_, "label 9 at index 1 is out of range [0, 5)", 5);
  writeGz(labels_, idxBytes({kCount}, {0, 1, 10, 3, 4}));
  expectError(labels_, "label 10 at index 2 is out of range [0, 10)");
  EXPECT_THROW(readImageSet(images_, labels_, 0), ConfigError);
  EXPECT_THROW(readImageSet(images_, labels_, 257), ConfigError);
}

TEST_F(IdxTest, ZeroImageSize) {
  writeGz(images_, idxBytes({kCount, 0, kCols}, {}));
  expectError(images_, "image size 0 x 4 is empty");
}

TEST_F(IdxTest, HugeHeaderIsRefusedWithoutAllocating) {
  // Claims 4 G x 4 G x 4 G bytes: refused from the header alone.
  writeGz(images_, idxBytes({0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {}));
  expectError(images_, "more than the 1073741824 bytes this reader accepts");
  // Claims 1 GiB (within the cap) with 60 bytes present: the reader must fail on the data, not
  // allocate the claimed size first (run under ASan/ulimit this would show; here: it is quick).
  writeGz(images_, idxBytes({1024, 1024, 1024}, pixelPayload()));
  expectError(images_, "the file holds 60");
}

TEST_F(IdxTest, MissingFileHasPathAndHint) {
  const std::string missing = dir_.file("no-such-file.gz");
  for (const std::string& path : {missing, dir_.file("no-such-dir/x.gz")}) {
    try {
      readIdxGz(path, 3);
      FAIL();
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find("No such file or directory"), std::string::npos) << what;
      EXPECT_NE(what.find("apt-get install dataset-fashion-mnist"), std::string::npos) << what;
      EXPECT_NE(what.find("--data-dir"), std::string::npos) << what;
    }
  }
  try {
    loadFashionMnist(dir_.path(), false);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir_.file("t10k-images-idx3-ubyte.gz")), std::string::npos)
        << e.what();
  }
}

TEST_F(IdxTest, DirectoryIsAnError) {
  images_ = dir_.path();
  expectError(images_, "is a directory");
}

TEST(FashionMnistPath, Names) {
  EXPECT_EQ(fashionMnistPath("/d", true, true), "/d/train-images-idx3-ubyte.gz");
  EXPECT_EQ(fashionMnistPath("/d", true, false), "/d/train-labels-idx1-ubyte.gz");
  EXPECT_EQ(fashionMnistPath("/d", false, true), "/d/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(fashionMnistPath("/d", false, false), "/d/t10k-labels-idx1-ubyte.gz");
}

}  // namespace
}  // namespace gradsync
