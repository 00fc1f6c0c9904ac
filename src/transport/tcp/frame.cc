#include "transport/tcp/frame.h"

#include <fmt/format.h>

namespace gradsync::tcp {
namespace {

template <typename T>
void put(uint8_t* out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out[i] = static_cast<uint8_t>(static_cast<uint64_t>(value) >> (8 * i));
  }
}

template <typename T>
T get(const uint8_t* in) {
  uint64_t value = 0;
  for (size_t i = 0; i < sizeof(T); ++i) value |= static_cast<uint64_t>(in[i]) << (8 * i);
  return static_cast<T>(value);
}

}  // namespace

void encodeFrameHeader(const FrameHeader& header, uint8_t out[kFrameHeaderBytes]) {
  put<uint32_t>(out, kFrameMagic);
  put<uint16_t>(out + 4, kProtocolVersion);
  put<uint16_t>(out + 6, static_cast<uint16_t>(header.type));
  put<uint64_t>(out + 8, header.tag);
  put<uint64_t>(out + 16, header.length);
}

std::string decodeFrameHeader(const uint8_t* data, uint64_t maxLength, FrameHeader* out) {
  uint32_t magic = get<uint32_t>(data);
  if (magic != kFrameMagic) return fmt::format("bad frame magic {:#010x}", magic);
  uint16_t version = get<uint16_t>(data + 4);
  if (version != kProtocolVersion) {
    return fmt::format("protocol version {} (this build speaks {})", version, kProtocolVersion);
  }
  uint16_t type = get<uint16_t>(data + 6);
  if (type < static_cast<uint16_t>(FrameType::kData) ||
      type > static_cast<uint16_t>(FrameType::kAbort)) {
    return fmt::format("unknown frame type {}", type);
  }
  out->type = static_cast<FrameType>(type);
  out->tag = get<uint64_t>(data + 8);
  out->length = get<uint64_t>(data + 16);
  if (out->length > maxLength) {
    return fmt::format("frame of {} bytes exceeds the limit of {}", out->length, maxLength);
  }
  if (out->type == FrameType::kGoodbye && out->length != 0) return "goodbye frame with a payload";
  if (out->type == FrameType::kAbort && out->length > kMaxAbortBytes)
    return "oversized abort frame";
  return "";
}

std::vector<uint8_t> encodeHello(const Hello& hello) {
  std::vector<uint8_t> out(kHelloFixedBytes + hello.jobId.size());
  put<uint32_t>(out.data(), kHelloMagic);
  put<uint16_t>(out.data() + 4, kProtocolVersion);
  put<uint16_t>(out.data() + 6, 0);
  put<int32_t>(out.data() + 8, hello.rank);
  put<int32_t>(out.data() + 12, hello.size);
  put<uint16_t>(out.data() + 16, static_cast<uint16_t>(hello.jobId.size()));
  put<uint16_t>(out.data() + 18, 0);
  std::copy(hello.nonce.begin(), hello.nonce.end(), out.begin() + 20);
  std::copy(hello.jobId.begin(), hello.jobId.end(), out.begin() + kHelloFixedBytes);
  return out;
}

std::string decodeHelloFixed(const uint8_t* data, Hello* out, size_t* idLength) {
  uint32_t magic = get<uint32_t>(data);
  if (magic != kHelloMagic) {
    return fmt::format("bad handshake magic {:#010x} (not a gradsync peer?)", magic);
  }
  uint16_t version = get<uint16_t>(data + 4);
  if (version != kProtocolVersion) {
    return fmt::format("protocol version {} (this build speaks {})", version, kProtocolVersion);
  }
  out->rank = get<int32_t>(data + 8);
  out->size = get<int32_t>(data + 12);
  *idLength = get<uint16_t>(data + 16);
  std::copy(data + 20, data + 20 + auth::kNonceBytes, out->nonce.begin());
  if (*idLength > kMaxHelloField) return "handshake field longer than 256 bytes";
  return "";
}

const char* ackStatusText(AckStatus status) {
  switch (status) {
    case AckStatus::kOk:
      return "ok";
    case AckStatus::kWrongJob:
      return "wrong job id";
    case AckStatus::kWrongToken:
      return "wrong job token";
    case AckStatus::kBadRank:
      return "rank or world size does not match";
    case AckStatus::kDuplicateRank:
      return "another process already connected as this rank";
    case AckStatus::kTlsMismatch:
      return "TLS (--tls) is on one side only";
  }
  return "unknown status";
}

void encodeAck(AckStatus status, uint8_t out[kAckBytes]) {
  put<uint32_t>(out, kAckMagic);
  put<uint32_t>(out + 4, static_cast<uint32_t>(status));
}

namespace {

std::string decodeStatus(uint32_t status, AckStatus* out) {
  if (status > static_cast<uint32_t>(AckStatus::kTlsMismatch)) {
    return fmt::format("unknown handshake status {}", status);
  }
  *out = static_cast<AckStatus>(status);
  return "";
}

}  // namespace

std::string decodeAck(const uint8_t* data, AckStatus* out) {
  if (get<uint32_t>(data) != kAckMagic) return "bad handshake reply (not a gradsync peer?)";
  return decodeStatus(get<uint32_t>(data + 4), out);
}

void encodeChallenge(const Challenge& challenge, uint8_t out[kChallengeBytes]) {
  put<uint32_t>(out, kChallengeMagic);
  put<uint32_t>(out + 4, static_cast<uint32_t>(challenge.status));
  std::copy(challenge.nonce.begin(), challenge.nonce.end(), out + 8);
  std::copy(challenge.proof.begin(), challenge.proof.end(), out + 8 + auth::kNonceBytes);
}

std::string decodeChallenge(const uint8_t* data, Challenge* out) {
  if (get<uint32_t>(data) != kChallengeMagic) {
    return "bad handshake challenge (not a gradsync peer, or an older version?)";
  }
  std::copy(data + 8, data + 8 + auth::kNonceBytes, out->nonce.begin());
  std::copy(data + 8 + auth::kNonceBytes, data + kChallengeBytes, out->proof.begin());
  return decodeStatus(get<uint32_t>(data + 4), &out->status);
}

void encodeProof(const ProofMessage& proof, uint8_t out[kProofMessageBytes]) {
  put<uint32_t>(out, kProofMagic);
  put<uint32_t>(out + 4, static_cast<uint32_t>(proof.status));
  std::copy(proof.proof.begin(), proof.proof.end(), out + 8);
}

std::string decodeProof(const uint8_t* data, ProofMessage* out) {
  if (get<uint32_t>(data) != kProofMagic) return "bad handshake proof (not a gradsync peer?)";
  std::copy(data + 8, data + kProofMessageBytes, out->proof.begin());
  return decodeStatus(get<uint32_t>(data + 4), &out->status);
}

}  // namespace gradsync::tcp
