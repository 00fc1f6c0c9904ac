// Bit packing (compress/bit_pack.h) against a bit-by-bit reference, for every width, for
// counts around group (8) and chunk (kCodeChunk) boundaries, and in pieces of any size.
#include <random>

#include <gtest/gtest.h>

#include "codec_checks.h"
#include "compress/bit_pack.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

using testing::readCode;
using testing::writeCode;

const size_t kCounts[] = {0, 1, 7, 8, 9, 63, kCodeChunk - 1, kCodeChunk, kCodeChunk + 1, 10001};

// Random codes with random high bits, which packing must ignore.
std::vector<uint8_t> randomBytes(size_t count, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<uint8_t> codes(count);
  for (uint8_t& c : codes) c = static_cast<uint8_t>(engine());
  return codes;
}

std::vector<uint8_t> naivePack(const std::vector<uint8_t>& codes, int bits) {
  std::vector<uint8_t> out((codes.size() * bits + 7) / 8, 0);
  for (size_t i = 0; i < codes.size(); ++i) writeCode(out, 0, bits, i, codes[i]);
  return out;
}

uint8_t low(uint8_t code, int bits) {
  return static_cast<uint8_t>(code & ((1u << bits) - 1));
}

TEST(BitPack, BytesOfCounts) {
  EXPECT_EQ(packedBytes(0, 3), 0u);
  EXPECT_EQ(packedBytes(1, 1), 1u);
  EXPECT_EQ(packedBytes(8, 1), 1u);
  EXPECT_EQ(packedBytes(9, 1), 2u);
  EXPECT_EQ(packedBytes(3, 6), 3u);  // 18 bits
  EXPECT_EQ(packedBytes(8, 7), 7u);
  EXPECT_EQ(packedBytes(5, 8), 5u);
}

TEST(BitPack, PackMatchesTheBitByBitReferenceAndWritesNothingPastTheEnd) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t count : kCounts) {
      std::vector<uint8_t> codes = randomBytes(count, 10 * bits + count);
      std::vector<uint8_t> expected = naivePack(codes, bits);
      std::vector<uint8_t> out(packedBytes(count, bits) + 16, 0xa5);
      packBits(codes, bits, out.data());
      for (size_t i = 0; i < expected.size(); ++i) {
        ASSERT_EQ(out[i], expected[i]) << "bits " << bits << " count " << count << " byte " << i;
      }
      for (size_t i = expected.size(); i < out.size(); ++i) {
        ASSERT_EQ(out[i], 0xa5) << "bits " << bits << " count " << count << " wrote byte " << i;
      }
    }
  }
}

TEST(BitPack, UnpackReadsTheReferenceStream) {
  for (int bits = 1; bits <= 8; ++bits) {
    for (size_t count : kCounts) {
      std::vector<uint8_t> codes = randomBytes(count, 7 * bits + count);
      std::vector<uint8_t> packed = naivePack(codes, bits);  // exactly sized: no slack to read
      std::vector<uint8_t> out(count + 16, 0x5a);
      unpackBits(packed.data(), bits, {out.data(), count});
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], low(codes[i], bits))
            << "bits " << bits << " count " << count << " #" << i;
        ASSERT_EQ(out[i], readCode(packed, 0, bits, i));
      }
      for (size_t i = count; i < out.size(); ++i) ASSERT_EQ(out[i], 0x5a) << "wrote code " << i;
    }
  }
}

TEST(BitPack, WriterAndReaderInPiecesMatchTheWholeStream) {
  const size_t pieces[] = {1, 7, 4095, 3, 8, 5000, 2, 700, 1};
  size_t count = 0;
  for (size_t p : pieces) count += p;
  for (int bits = 1; bits <= 8; ++bits) {
    std::vector<uint8_t> codes = randomBytes(count, bits);
    std::vector<uint8_t> out(packedBytes(count, bits) + 8, 0xa5);
    PackedWriter writer(bits, out.data());
    size_t at = 0;
    for (size_t p : pieces) {
      for (size_t done = 0; done < p;) {
        std::span<uint8_t> room = writer.room(p - done);
        ASSERT_GE(room.size(), 1u);
        ASSERT_LE(room.size(), p - done);
        std::copy_n(codes.begin() + at + done, room.size(), room.begin());
        writer.commit(room.size());
        done += room.size();
      }
      at += p;
    }
    writer.finish();
    std::vector<uint8_t> expected = naivePack(codes, bits);
    ASSERT_TRUE(std::equal(expected.begin(), expected.end(), out.begin())) << "bits " << bits;
    ASSERT_EQ(out[expected.size()], 0xa5);

    PackedReader reader(expected.data(), count, bits, static_cast<uint8_t>((1u << bits) - 1));
    at = 0;
    for (size_t p : pieces) {
      for (size_t done = 0; done < p;) {
        std::span<const uint8_t> got = reader.next(p - done);
        ASSERT_GE(got.size(), 1u);
        ASSERT_LE(got.size(), p - done);
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(got[i], low(codes[at + done + i], bits)) << "bits " << bits;
        }
        done += got.size();
      }
      at += p;
    }
  }
}

TEST(BitPack, ReaderRejectsCodesAboveTheLargestValidOne) {
  const size_t count = 3 * kCodeChunk;
  std::vector<uint8_t> codes(count, 2);
  std::vector<uint8_t> packed = naivePack(codes, 2);
  auto readAll = [&](const std::vector<uint8_t>& bytes) {
    PackedReader reader(bytes.data(), count, 2, 2);
    for (size_t done = 0; done < count;) done += reader.next(count - done).size();
  };
  EXPECT_NO_THROW(readAll(packed));
  for (size_t bad : {size_t{0}, kCodeChunk + 5, count - 1}) {
    std::vector<uint8_t> corrupt = packed;
    writeCode(corrupt, 0, 2, bad, 3);
    EXPECT_THROW(readAll(corrupt), ProtocolError) << "code 3 at " << bad;
  }
}

// Wide codes (1..32 bits) against the bit-by-bit layout of the narrow ones: bit b of code i is
// stream bit i * bits + b.
TEST(BitPack, WideWriterAndReaderFollowTheSameBitLayout) {
  for (int bits : {1, 2, 7, 8, 9, 12, 14, 17, 24, 31, 32}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1001}}) {
      std::mt19937_64 engine(100 * bits + count);
      std::vector<uint32_t> codes(count);
      for (uint32_t& c : codes) c = static_cast<uint32_t>(engine());  // high bits to ignore
      std::vector<uint8_t> out(packedBytes(count, bits) + 8, 0xa5);
      WideWriter writer(bits, out.data());
      for (uint32_t c : codes) writer.put(c);
      writer.finish();
      for (size_t i = packedBytes(count, bits); i < out.size(); ++i) {
        ASSERT_EQ(out[i], 0xa5) << "bits " << bits << " count " << count << " wrote byte " << i;
      }
      const uint32_t mask = bits == 32 ? ~0u : (1u << bits) - 1;
      WideReader reader(bits, out.data());
      for (size_t i = 0; i < count; ++i) {
        uint32_t expected = 0;
        for (int b = 0; b < bits; ++b) {
          const size_t bit = i * bits + b;
          expected |= static_cast<uint32_t>((out[bit / 8] >> (bit % 8)) & 1) << b;
        }
        ASSERT_EQ(expected, codes[i] & mask) << "bits " << bits << " code " << i;
        ASSERT_EQ(reader.get(), codes[i] & mask) << "bits " << bits << " code " << i;
      }
    }
  }
}

}  // namespace
}  // namespace gradsync
