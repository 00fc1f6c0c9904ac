// Wire format of the TCP rendezvous store (docs/rendezvous.md has the byte layout).
//
// Pure functions: bytes in, a message or an error string out. No I/O, no logging, and malformed
// input never throws or allocates more than the input's own size, so the decoders can be fed
// arbitrary bytes by a fuzzer and are shared by the server's poll loop and the blocking client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/auth.h"
#include "gradsync/store.h"

namespace gradsync::rendezvous::wire {

// Every frame is a 12-byte header followed by `payloadBytes` bytes of payload:
//   [0..4)  magic "GSKV"
//   [4]     protocol version (kVersion)
//   [5]     message type (MessageType)
//   [6..8)  reserved, zero
//   [8..12) payload length, big-endian u32, at most kMaxPayloadBytes
inline constexpr uint8_t kMagic[4] = {'G', 'S', 'K', 'V'};
// 2: challenge-response on the job token (1 sent the token itself).
inline constexpr uint8_t kVersion = 2;
inline constexpr size_t kHeaderBytes = 12;
// Far above any rendezvous value (addresses, small metadata), yet small enough that a hostile
// length prefix cannot make the server reserve much memory.
inline constexpr uint32_t kMaxPayloadBytes = 64u << 20;
// Limit on the job id carried by the handshake (and on the job token, which never travels).
inline constexpr size_t kMaxJobFieldBytes = 256;

enum class MessageType : uint8_t {
  kHello = 1,    // client -> server, first frame of every connection
  kHelloOk = 2,  // server -> client, handshake accepted
  kSet = 3,      // -> kOk
  kGet = 4,      // -> kValue once the key exists, or kTimedOut
  kAdd = 5,      // -> kInteger
  kWait = 6,     // -> kOk once every key exists, or kTimedOut
  kOk = 7,
  kValue = 8,
  kInteger = 9,
  kError = 10,      // server -> client: request failed, or connection refused (then closed)
  kTimedOut = 11,   // server -> client: a get/wait expired; names the keys still missing
  kChallenge = 12,  // server -> client, answers kHello: the server's nonce and proof
  kProof = 13,      // client -> server, answers kChallenge: the client's proof (or refusal)
};

// Payload encodings (integers big-endian; str = u32 length + bytes). The handshake authenticates
// both sides on the job token without sending it (common/auth.h): Hello, Challenge, Proof, then
// HelloOk (or ErrorReply, and the connection closes).
struct Hello {  // str jobId, str nonce (32 bytes)
  std::string jobId;
  auth::Nonce nonce{};
};
struct Challenge {  // str nonce (32 bytes), str proof (32 bytes)
  auth::Nonce nonce{};
  auth::Proof proof{};
};
// The client's proof; `refused`: the server's proof did not verify (sent as an empty proof,
// since the client shows its proof only to a server that holds the token).
struct Proof {  // str proof (32 bytes, or 0: refused)
  auth::Proof proof{};
  bool refused = false;
};
struct HelloOk {};   // empty
struct SetRequest {  // str key, str value
  std::string key;
  Bytes value;
};
// Get and wait carry the caller's timeout: the server answers kTimedOut when it passes, so the
// client learns which keys were missing and keeps its connection.
struct GetRequest {  // str key, u32 timeoutMs
  std::string key;
  uint32_t timeoutMs = 0;
};
struct AddRequest {  // str key, i64 delta
  std::string key;
  int64_t delta = 0;
};
struct WaitRequest {  // u32 timeoutMs, u32 count, count x str key
  std::vector<std::string> keys;
  uint32_t timeoutMs = 0;
};
struct OkReply {};   // empty
struct ValueReply {  // str value
  Bytes value;
};
struct IntegerReply {  // i64 value
  int64_t value = 0;
};
struct ErrorReply {  // str message
  std::string message;
};
struct TimedOutReply {  // u32 count, count x str key
  std::vector<std::string> missing;
};

// Alternatives in MessageType order (typeOf relies on it).
using Message =
    std::variant<Hello, HelloOk, SetRequest, GetRequest, AddRequest, WaitRequest, OkReply,
                 ValueReply, IntegerReply, ErrorReply, TimedOutReply, Challenge, Proof>;

MessageType typeOf(const Message& message);
// "hello", "set", ... or "unknown(N)", for logs and error messages.
std::string typeName(MessageType type);

struct FrameHeader {
  MessageType type = MessageType::kOk;
  uint32_t payloadBytes = 0;
};

struct HeaderResult {
  enum class Status { kNeedMore, kComplete, kInvalid };
  Status status = Status::kNeedMore;
  FrameHeader header;
  std::string error;  // why, when kInvalid
};

// Decodes the header at the start of `bytes`, which may hold only a prefix of it. A wrong magic
// is reported as soon as its first wrong byte is present, so garbage is refused without waiting
// for 12 bytes that may never come. Bytes past the header are ignored.
HeaderResult decodeHeader(std::span<const uint8_t> bytes);

struct MessageResult {
  std::optional<Message> message;
  std::string error;  // why, when there is no message
};

// Decodes the complete payload of a frame whose header said `type`. Truncated fields, trailing
// bytes, unknown types and over-long job fields are errors.
MessageResult decodePayload(MessageType type, std::span<const uint8_t> payload);

// Encodes header + payload. The caller checks the size against kHeaderBytes + kMaxPayloadBytes
// (the peer refuses larger frames).
Bytes encodeFrame(const Message& message);

}  // namespace gradsync::rendezvous::wire
