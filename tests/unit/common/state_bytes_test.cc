#include "common/state_bytes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/crc32c.h"
#include "common/simd.h"
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

// CRC-32C (Castagnoli, reflected) bit by bit, the reference for a hasher and for crc32c's paths.
uint32_t naiveCrc32c(std::span<const uint8_t> bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (uint8_t byte : bytes) {
    crc ^= byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// Every path gives the reference's value, at every length and alignment, extended piece by
// piece or in one call; and the standard check value.
TEST(Crc32c, EveryPathGivesTheReferencesValue) {
  const std::string check = "123456789";
  EXPECT_EQ(naiveCrc32c({reinterpret_cast<const uint8_t*>(check.data()), check.size()}),
            0xE3069283u);
  std::vector<uint8_t> bytes(300);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  for (simd::Path path : {simd::Path::kScalar, simd::supported()}) {
    simd::ScopedPath forced(path);
    EXPECT_EQ(crc32c(0, check.data(), check.size()), 0xE3069283u) << simd::name(path);
    for (size_t at : {0, 1, 3, 8}) {
      for (size_t size : {0, 1, 7, 8, 9, 63, 64, 65, 200}) {
        const std::span<const uint8_t> piece(bytes.data() + at, size);
        EXPECT_EQ(crc32c(0, piece.data(), size), naiveCrc32c(piece))
            << simd::name(path) << " at " << at << ", " << size << " bytes";
      }
    }
    const uint32_t first = crc32c(0, bytes.data(), 101);
    EXPECT_EQ(crc32c(first, bytes.data() + 101, 199), naiveCrc32c(bytes)) << simd::name(path);
  }
}

// A hasher gives the CRC-32C of exactly the bytes a writer keeps; another value changes it.
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
  EXPECT_EQ(hasher.hash(), naiveCrc32c(writer.bytes()));
  StateWriter other = StateWriter::hasher();
  write(other, -1.5f);
  EXPECT_NE(other.hash(), hasher.hash());
  EXPECT_EQ(StateWriter::hasher().hash(), naiveCrc32c({}));
}

// Bulk arrays between a gatherer and a scatterer: the gatherer keeps the other arrays and the
// bulk ones' counts, and lists the bulk bytes where they lie; a scatterer of its bytes lists
// where each goes. Copying each segment to its destination gives what a writer and a reader
// would have; a writer and a hasher take a bulk array as any other.
TEST(StateBytes, BulkArraysAreListedWhereTheyLieAndWhereTheyGo) {
  const std::vector<uint8_t> first(1000, 3), second(5, 9), empty;
  const auto write = [&](StateWriter& out) {
    out.write(uint64_t{7});
    out.writeBulk(first);
    out.write(std::vector<double>{0.25});
    out.writeBulk(empty);
    out.writeBulk(second);
  };
  StateWriter gatherer = StateWriter::gatherer();
  write(gatherer);
  ASSERT_EQ(gatherer.segments().size(), 3u);
  EXPECT_EQ(gatherer.segments()[0].data(), first.data());
  EXPECT_EQ(gatherer.segments()[2].data(), second.data());
  // Five arrays of one value each (a bulk one: its byte count), each counted: 5 x (8 + 8) bytes.
  EXPECT_EQ(gatherer.size(), 5u * 16) << "the counts only of bulk arrays";
  StateWriter writer;
  write(writer);
  StateWriter hasher = StateWriter::hasher();
  write(hasher);
  EXPECT_EQ(hasher.hash(), naiveCrc32c(writer.bytes()));
  EXPECT_EQ(gatherer.writtenSize(), writer.size());
  EXPECT_EQ(hasher.writtenSize(), writer.size());
  EXPECT_EQ(writer.writtenSize(), writer.size());

  std::vector<uint8_t> a(1000), b, c(5);
  double quarter = 0;
  StateReader in = StateReader::scatterer(gatherer.bytes(), "test state");
  EXPECT_EQ(in.readU64(), 7u);
  in.readBulk(a);
  in.readExact(std::span<double>(&quarter, 1));
  in.readBulk(b);
  in.readBulk(c);
  in.expectEnd();
  EXPECT_EQ(quarter, 0.25);
  ASSERT_EQ(in.destinations().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(in.destinations()[i].size(), gatherer.segments()[i].size());
    std::copy(gatherer.segments()[i].begin(), gatherer.segments()[i].end(),
              in.destinations()[i].begin());
  }
  EXPECT_EQ(a, first);
  EXPECT_EQ(c, second);

  std::vector<uint8_t> plain(1000);  // a writer's bulk arrays read as any other
  StateReader reader(writer.bytes(), "test state");
  reader.readU64();
  reader.readBulk(plain);
  EXPECT_EQ(plain, first);
  EXPECT_TRUE(reader.destinations().empty());
}

TEST(StateBytes, ABulkArrayOfAnotherLengthIsRefusedByAScatterer) {
  StateWriter gatherer = StateWriter::gatherer();
  gatherer.writeBulk(std::vector<uint8_t>(10));
  std::vector<uint8_t> nine(9);
  StateReader in = StateReader::scatterer(gatherer.bytes(), "test state");
  expectDataError([&] { in.readBulk(nine); }, "holds 10 values where this run has 9");
}

}  // namespace
}  // namespace gradsync
