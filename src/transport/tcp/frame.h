// Wire format of the TCP transport (docs/architecture.md#wire-format). Pure functions: bytes in,
// values or an error string out; no I/O, no allocation beyond the returned values, so the
// decoders can be fuzzed (tests/fuzz/frame_fuzz.cc).
//
// Every connection starts with a Hello from the connecting side and an Ack from the accepting
// side; after that both directions carry frames: a 24-byte header and `length` payload bytes.
// All integers are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradsync::tcp {

constexpr uint32_t kFrameMagic = 0x46595347;  // "GSYF"
constexpr uint32_t kHelloMagic = 0x4c485347;  // "GSHL"
constexpr uint32_t kAckMagic = 0x4b415347;    // "GSAK"
constexpr uint16_t kProtocolVersion = 1;
constexpr size_t kFrameHeaderBytes = 24;
constexpr size_t kHelloFixedBytes = 20;
constexpr size_t kAckBytes = 8;
constexpr size_t kMaxHelloField = 256;

// kData carries a message; kGoodbye announces an orderly close; kAbort carries the reason a rank
// is failing (e.g. "lost connection to rank 2"), so its peers name the real culprit rather than
// the rank that merely exited after noticing.
enum class FrameType : uint16_t { kData = 1, kGoodbye = 2, kAbort = 3 };
constexpr size_t kMaxAbortBytes = 4096;

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint64_t tag = 0;
  uint64_t length = 0;
};

// Header: magic u32 | version u16 | type u16 | tag u64 | length u64.
void encodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]);
// Decodes exactly kFrameHeaderBytes; returns "" on success or why the header is invalid
// (bad magic, unknown version or type, length above maxLength).
std::string decodeFrameHeader(const uint8_t* data, uint64_t maxLength, FrameHeader* out);

struct Hello {
  int32_t rank = 0;
  int32_t size = 0;
  std::string jobId;
  std::string jobToken;
};

// Hello: magic u32 | version u16 | reserved u16 | rank i32 | size i32 | idLen u16 | tokenLen u16
//        | jobId | jobToken.
std::vector<uint8_t> encodeHello(const Hello& hello);
// Decodes the fixed part; on success sets out->rank/size and the two field lengths.
std::string decodeHelloFixed(const uint8_t* data, Hello* out, size_t* idLength,
                             size_t* tokenLength);

// Why an accepting rank refused a Hello; sent back in the Ack.
enum class AckStatus : uint32_t {
  kOk = 0,
  kWrongJob = 1,
  kWrongToken = 2,
  kBadRank = 3,
  kDuplicateRank = 4,
};
const char* ackStatusText(AckStatus status);

// Ack: magic u32 | status u32.
void encodeAck(AckStatus status, uint8_t out[kAckBytes]);
std::string decodeAck(const uint8_t* data, AckStatus* out);

}  // namespace gradsync::tcp
