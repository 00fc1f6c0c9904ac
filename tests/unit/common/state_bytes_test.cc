#include "common/state_bytes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gradsync/error.h"

namespace gradsync {
namespace {

std::vector<uint8_t> sample() {
  StateWriter out;
  out.write(uint64_t{7});
  out.write(std::vector<float>{1.5f, -0.0f, 3.25f});
  out.write(std::vector<double>{});
  out.write(std::vector<int>{4, 5});
  return out.take();
}

TEST(StateBytes, WhatIsWrittenReadsBackInOrder) {
  const std::vector<uint8_t> bytes = sample();
  StateReader in(bytes, "test state");
  EXPECT_EQ(in.readU64(), 7u);
  std::vector<float> floats(3);
  in.readExact(floats);
  EXPECT_EQ(floats, (std::vector<float>{1.5f, -0.0f, 3.25f}));
  EXPECT_TRUE(std::signbit(floats[1]));
  std::vector<double> empty{1.0};
  in.read(empty);
  EXPECT_TRUE(empty.empty());
  std::vector<int> ints;
  in.read(ints);
  EXPECT_EQ(ints, (std::vector<int>{4, 5}));
  EXPECT_TRUE(in.atEnd());
  EXPECT_NO_THROW(in.expectEnd());
}

void expectDataError(const std::function<void()>& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error; expected one mentioning '" << needle << "'";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test state"), std::string::npos) << e.what();
  }
}

TEST(StateBytes, AnArrayOfAnotherLengthIsRefused) {
  const std::vector<uint8_t> bytes = sample();
  StateReader in(bytes, "test state");
  in.readU64();
  std::vector<float> four(4);
  expectDataError([&] { in.readExact(four); }, "holds 3 values where this run has 4");
}

TEST(StateBytes, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = sample();
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    std::vector<uint8_t> part(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    expectDataError(
        [&] {
          StateReader in(part, "test state");
          in.readU64();
          std::vector<float> floats(3);
          in.readExact(floats);
          std::vector<double> doubles;
          in.read(doubles);
          std::vector<int> ints;
          in.read(ints);
        },
        "");
  }
}

TEST(StateBytes, AHugeCountIsRefusedBeforeAllocating) {
  StateWriter out;
  out.write(uint64_t{1} << 62);  // read back as an element count
  const std::vector<uint8_t> bytes = out.take();
  StateReader in(std::span<const uint8_t>(bytes).subspan(8), "test state");
  std::vector<float> floats;
  expectDataError([&] { in.read(floats); }, "only 0 bytes left");
}

TEST(StateBytes, LeftoverBytesAreRefused) {
  const std::vector<uint8_t> bytes = sample();
  StateReader in(bytes, "test state");
  in.readU64();
  expectDataError([&] { in.expectEnd(); }, "bytes left over");
  EXPECT_FALSE(in.atEnd());
}

// A hasher counts exactly the bytes a writer keeps, and keeps none; a writer reserved to that
// size writes it all into the one buffer it reserved.
TEST(StateBytes, AHasherCountsWhatAWriterWrites) {
  const auto write = [](StateWriter& out) {
    out.write(uint64_t{7});
    out.write(std::vector<float>(1000, 1.5f));
    out.write(std::vector<uint8_t>{});
    out.write(std::vector<double>{0.25, 2.0, -1.0});
  };
  StateWriter hasher = StateWriter::hasher();
  write(hasher);
  EXPECT_TRUE(hasher.bytes().empty());
  StateWriter writer;
  writer.reserve(hasher.size());
  const uint8_t* buffer = writer.bytes().data();
  write(writer);
  EXPECT_EQ(writer.size(), hasher.size());
  EXPECT_EQ(writer.bytes().size(), 4 * sizeof(uint64_t) + 8 + 4000 + 24);
  EXPECT_EQ(writer.bytes().data(), buffer);  // no reallocation
}

// CRC-32 (IEEE, reflected: zlib's) bit by bit, the reference for a hasher.
uint32_t naiveCrc32(const std::vector<uint8_t>& bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// A hasher gives the CRC32 of exactly the bytes a writer keeps; another value changes it.
TEST(StateBytes, AHasherHashesWhatAWriterWrites) {
  const auto write = [](StateWriter& out, float value) {
    out.write(uint64_t{7});
    out.write(std::vector<float>(1000, value));
    out.write(std::vector<uint8_t>{});
    out.write(std::vector<double>{0.25, 2.0, -1.0});
  };
  StateWriter hasher = StateWriter::hasher();
  write(hasher, 1.5f);
  StateWriter writer;
  write(writer, 1.5f);
  EXPECT_EQ(hasher.hash(), naiveCrc32(writer.bytes()));
  StateWriter other = StateWriter::hasher();
  write(other, -1.5f);
  EXPECT_NE(other.hash(), hasher.hash());
  EXPECT_EQ(StateWriter::hasher().hash(), naiveCrc32({}));
}

}  // namespace
}  // namespace gradsync
