// Wire format of the TCP transport (docs/architecture.md#wire-format). Pure functions: bytes in,
// values or an error string out; no I/O, no allocation beyond the returned values, so the
// decoders can be fuzzed (tests/fuzz/frame_fuzz.cc).
//
// Every connection starts with a handshake that authenticates both sides on the job token
// without sending it (common/auth.h): Hello (connecting side: rank, size, job id, its nonce),
// Challenge (accepting side: its verdict, its nonce and its proof), Proof (connecting side: its
// verdict on the acceptor's proof, and its own proof), Ack (accepting side: the final verdict).
// After that both directions carry frames: a 24-byte header and `length` payload bytes. All
// integers are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/auth.h"

namespace gradsync::tcp {

constexpr uint32_t kFrameMagic = 0x46595347;      // "GSYF"
constexpr uint32_t kHelloMagic = 0x4c485347;      // "GSHL"
constexpr uint32_t kAckMagic = 0x4b415347;        // "GSAK"
constexpr uint32_t kChallengeMagic = 0x48435347;  // "GSCH"
constexpr uint32_t kProofMagic = 0x46505347;      // "GSPF"
// 2: challenge-response on the job token (1 sent the token itself).
constexpr uint16_t kProtocolVersion = 2;
constexpr size_t kFrameHeaderBytes = 24;
constexpr size_t kHelloFixedBytes = 20 + auth::kNonceBytes;
constexpr size_t kChallengeBytes = 8 + auth::kNonceBytes + auth::kProofBytes;
constexpr size_t kProofMessageBytes = 8 + auth::kProofBytes;
constexpr size_t kAckBytes = 8;
constexpr size_t kMaxHelloField = 256;

// kData carries a message; kGoodbye announces an orderly close; kAbort carries the reason a rank
// is failing (e.g. "lost connection to rank 2") and, in its tag, 1 + the rank where the failure
// began (0: unknown), so its peers name the real culprit rather than the rank that merely exited
// after noticing.
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
  auth::Nonce nonce{};
};

// Hello: magic u32 | version u16 | reserved u16 | rank i32 | size i32 | idLen u16 | reserved u16
//        | nonce[32] | jobId.
std::vector<uint8_t> encodeHello(const Hello& hello);
// Decodes the fixed part; on success sets out->rank/size/nonce and the job id's length.
std::string decodeHelloFixed(const uint8_t* data, Hello* out, size_t* idLength);

// Why an accepting rank refused a Hello; sent back in the Ack.
enum class AckStatus : uint32_t {
  kOk = 0,
  kWrongJob = 1,
  kWrongToken = 2,
  kBadRank = 3,
  kDuplicateRank = 4,
  // One side uses TLS (--tls) and the other does not; sent in plaintext, by either side.
  kTlsMismatch = 5,
};
const char* ackStatusText(AckStatus status);

// Ack: magic u32 | status u32.
void encodeAck(AckStatus status, uint8_t out[kAckBytes]);
std::string decodeAck(const uint8_t* data, AckStatus* out);

// The accepting side's answer to a Hello: its verdict so far, and (when kOk) its nonce and its
// proof of the job token.
struct Challenge {
  AckStatus status = AckStatus::kOk;
  auth::Nonce nonce{};
  auth::Proof proof{};
};
// Challenge: magic u32 | status u32 | nonce[32] | proof[32].
void encodeChallenge(const Challenge& challenge, uint8_t out[kChallengeBytes]);
std::string decodeChallenge(const uint8_t* data, Challenge* out);

// The connecting side's answer: kOk and its proof, or kWrongToken when the acceptor's proof did
// not verify (then no proof: it is shown only to a peer that holds the token).
struct ProofMessage {
  AckStatus status = AckStatus::kOk;
  auth::Proof proof{};
};
// Proof: magic u32 | status u32 | proof[32].
void encodeProof(const ProofMessage& proof, uint8_t out[kProofMessageBytes]);
std::string decodeProof(const uint8_t* data, ProofMessage* out);

}  // namespace gradsync::tcp
