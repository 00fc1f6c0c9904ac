#include "rendezvous/tcp_store_wire.h"

#include <fmt/format.h>

#include <array>
#include <cstring>

namespace gradsync::rendezvous::wire {
namespace {

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(v); }
  void u32(uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) out_.push_back(static_cast<uint8_t>(v >> shift));
  }
  void i64(int64_t v) {
    auto u = static_cast<uint64_t>(v);
    for (int shift = 56; shift >= 0; shift -= 8) out_.push_back(static_cast<uint8_t>(u >> shift));
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  void str(const Bytes& b) {
    u32(static_cast<uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
  }
  Bytes& bytes() { return out_; }

 private:
  Bytes out_;
};

// Reads fields front to back; the first failure sticks, so callers check once at the end.
class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}

  uint32_t u32(const char* what) {
    if (!need(4, what)) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = (v << 8) | in_[pos_ + i];
    pos_ += 4;
    return v;
  }
  int64_t i64(const char* what) {
    if (!need(8, what)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | in_[pos_ + i];
    pos_ += 8;
    return static_cast<int64_t>(v);
  }
  // A length-prefixed field; the length is checked against the bytes present before copying, so
  // a lying length costs nothing.
  template <typename T>
  T str(const char* what, size_t maxBytes = kMaxPayloadBytes) {
    uint32_t n = u32(what);
    if (!error_.empty()) return T{};
    if (n > maxBytes) {
      error_ = fmt::format("{} is {} bytes, above the limit of {}", what, n, maxBytes);
      return T{};
    }
    if (!need(n, what)) return T{};
    T out(in_.begin() + static_cast<ptrdiff_t>(pos_),
          in_.begin() + static_cast<ptrdiff_t>(pos_ + n));
    pos_ += n;
    return out;
  }
  // A field of exactly N bytes (a nonce, a proof), or of none when `emptyAllowed` (then false).
  template <size_t N>
  bool fixed(const char* what, std::array<uint8_t, N>& out, bool emptyAllowed = false) {
    const auto field = str<std::string>(what, N);
    if (!error_.empty()) return false;
    if (field.empty() && emptyAllowed) return false;
    if (field.size() != N) {
      error_ = fmt::format("{} is {} bytes, not {}", what, field.size(), N);
      return false;
    }
    std::memcpy(out.data(), field.data(), N);
    return true;
  }
  size_t left() const { return in_.size() - pos_; }
  bool ok() const { return error_.empty(); }
  // The error of the first failed read, or of trailing bytes after a complete message.
  std::string finish() {
    if (error_.empty() && left() != 0) error_ = fmt::format("{} unexpected trailing bytes", left());
    return error_;
  }
  void fail(std::string error) {
    if (error_.empty()) error_ = std::move(error);
  }

 private:
  bool need(size_t n, const char* what) {
    if (!error_.empty()) return false;
    if (left() < n) {
      error_ = fmt::format("truncated {}: need {} bytes, {} left", what, n, left());
      return false;
    }
    return true;
  }

  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  std::string error_;
};

std::vector<std::string> readKeys(Reader& r) {
  uint32_t count = r.u32("key count");
  std::vector<std::string> keys;
  // Every key takes at least its 4-byte length, which bounds a lying count.
  if (count > r.left() / 4) r.fail(fmt::format("key count {} exceeds the payload", count));
  for (uint32_t i = 0; i < count && r.ok(); ++i) keys.push_back(r.str<std::string>("key"));
  return keys;
}

void writeKeys(const std::vector<std::string>& keys, Writer& w) {
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& key : keys) w.str(key);
}

Message readMessage(MessageType type, Reader& r) {
  switch (type) {
    case MessageType::kHello: {
      Hello hello{.jobId = r.str<std::string>("job id", kMaxJobFieldBytes)};
      r.fixed("nonce", hello.nonce);
      return hello;
    }
    case MessageType::kChallenge: {
      Challenge challenge;
      r.fixed("nonce", challenge.nonce);
      r.fixed("proof", challenge.proof);
      return challenge;
    }
    case MessageType::kProof: {
      Proof proof;
      proof.refused = !r.fixed("proof", proof.proof, /*emptyAllowed=*/true) && r.ok();
      return proof;
    }
    case MessageType::kHelloOk:
      return HelloOk{};
    case MessageType::kSet: {
      auto key = r.str<std::string>("key");
      return SetRequest{std::move(key), r.str<Bytes>("value")};
    }
    case MessageType::kGet: {
      auto key = r.str<std::string>("key");
      return GetRequest{std::move(key), r.u32("timeout")};
    }
    case MessageType::kAdd: {
      auto key = r.str<std::string>("key");
      return AddRequest{std::move(key), r.i64("delta")};
    }
    case MessageType::kWait: {
      uint32_t timeoutMs = r.u32("timeout");
      return WaitRequest{readKeys(r), timeoutMs};
    }
    case MessageType::kOk:
      return OkReply{};
    case MessageType::kValue:
      return ValueReply{r.str<Bytes>("value")};
    case MessageType::kInteger:
      return IntegerReply{r.i64("integer")};
    case MessageType::kError:
      return ErrorReply{r.str<std::string>("error message")};
    case MessageType::kTimedOut:
      return TimedOutReply{readKeys(r)};
  }
  r.fail(fmt::format("unknown message type {}", static_cast<int>(type)));
  return OkReply{};
}

void writePayload(const Message& message, Writer& w) {
  std::visit(
      [&w](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        auto raw = [](const auto& array) {
          return std::string_view(reinterpret_cast<const char*>(array.data()), array.size());
        };
        if constexpr (std::is_same_v<T, Hello>) {
          w.str(m.jobId);
          w.str(raw(m.nonce));
        } else if constexpr (std::is_same_v<T, Challenge>) {
          w.str(raw(m.nonce));
          w.str(raw(m.proof));
        } else if constexpr (std::is_same_v<T, Proof>) {
          w.str(m.refused ? std::string_view() : raw(m.proof));
        } else if constexpr (std::is_same_v<T, SetRequest>) {
          w.str(m.key);
          w.str(m.value);
        } else if constexpr (std::is_same_v<T, GetRequest>) {
          w.str(m.key);
          w.u32(m.timeoutMs);
        } else if constexpr (std::is_same_v<T, AddRequest>) {
          w.str(m.key);
          w.i64(m.delta);
        } else if constexpr (std::is_same_v<T, WaitRequest>) {
          w.u32(m.timeoutMs);
          writeKeys(m.keys, w);
        } else if constexpr (std::is_same_v<T, ValueReply>) {
          w.str(m.value);
        } else if constexpr (std::is_same_v<T, IntegerReply>) {
          w.i64(m.value);
        } else if constexpr (std::is_same_v<T, ErrorReply>) {
          w.str(m.message);
        } else if constexpr (std::is_same_v<T, TimedOutReply>) {
          writeKeys(m.missing, w);
        }
      },
      message);
}

}  // namespace

MessageType typeOf(const Message& message) {
  static constexpr MessageType kTypes[] = {
      MessageType::kHello,   MessageType::kHelloOk, MessageType::kSet,      MessageType::kGet,
      MessageType::kAdd,     MessageType::kWait,    MessageType::kOk,       MessageType::kValue,
      MessageType::kInteger, MessageType::kError,   MessageType::kTimedOut, MessageType::kChallenge,
      MessageType::kProof};
  return kTypes[message.index()];
}

std::string typeName(MessageType type) {
  static constexpr const char* kNames[] = {"hello",     "hello-ok",  "set",   "get",     "add",
                                           "wait",      "ok",        "value", "integer", "error",
                                           "timed-out", "challenge", "proof"};
  auto index = static_cast<unsigned>(type);
  if (index >= 1 && index <= std::size(kNames)) return kNames[index - 1];
  return fmt::format("unknown({})", index);
}

HeaderResult decodeHeader(std::span<const uint8_t> bytes) {
  HeaderResult result;
  size_t magicBytes = std::min(bytes.size(), sizeof kMagic);
  if (magicBytes > 0 && std::memcmp(bytes.data(), kMagic, magicBytes) != 0) {
    result.status = HeaderResult::Status::kInvalid;
    result.error = "bad magic (not a gradsync store client, or a corrupted stream)";
    return result;
  }
  if (bytes.size() < kHeaderBytes) return result;  // kNeedMore
  result.status = HeaderResult::Status::kInvalid;
  if (bytes[4] != kVersion) {
    result.error = fmt::format("protocol version {} is not supported (this build speaks {})",
                               bytes[4], kVersion);
    return result;
  }
  if (bytes[6] != 0 || bytes[7] != 0) {
    result.error = "reserved header bytes are not zero";
    return result;
  }
  uint32_t length = 0;
  for (int i = 8; i < 12; ++i) length = (length << 8) | bytes[i];
  if (length > kMaxPayloadBytes) {
    result.error =
        fmt::format("frame of {} bytes exceeds the limit of {}", length, kMaxPayloadBytes);
    return result;
  }
  result.status = HeaderResult::Status::kComplete;
  result.header = FrameHeader{static_cast<MessageType>(bytes[5]), length};
  return result;
}

MessageResult decodePayload(MessageType type, std::span<const uint8_t> payload) {
  Reader reader(payload);
  Message message = readMessage(type, reader);
  MessageResult result;
  result.error = reader.finish();
  if (result.error.empty()) {
    result.message = std::move(message);
  } else {
    result.error = fmt::format("malformed {} frame: {}", typeName(type), result.error);
  }
  return result;
}

Bytes encodeFrame(const Message& message) {
  Writer w;
  w.bytes().insert(w.bytes().end(), std::begin(kMagic), std::end(kMagic));
  w.u8(kVersion);
  w.u8(static_cast<uint8_t>(typeOf(message)));
  w.u8(0);
  w.u8(0);
  w.u32(0);  // length, patched below
  writePayload(message, w);
  Bytes& out = w.bytes();
  auto length = static_cast<uint32_t>(out.size() - kHeaderBytes);
  for (int i = 0; i < 4; ++i) out[8 + i] = static_cast<uint8_t>(length >> (24 - 8 * i));
  return out;
}

}  // namespace gradsync::rendezvous::wire
