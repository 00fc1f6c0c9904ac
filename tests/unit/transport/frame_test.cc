#include "transport/tcp/frame.h"

#include <gtest/gtest.h>

namespace gradsync::tcp {

TEST(Frame, HeaderRoundTrip) {
  uint8_t bytes[kFrameHeaderBytes];
  encodeFrameHeader({FrameType::kData, 0x1122334455667788ull, 4096}, bytes);
  FrameHeader header;
  EXPECT_EQ(decodeFrameHeader(bytes, 1 << 20, &header), "");
  EXPECT_EQ(header.type, FrameType::kData);
  EXPECT_EQ(header.tag, 0x1122334455667788ull);
  EXPECT_EQ(header.length, 4096u);
}

TEST(Frame, RejectsBadMagicVersionTypeAndOversize) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader header;
  encodeFrameHeader({FrameType::kData, 1, 100}, bytes);
  EXPECT_NE(decodeFrameHeader(bytes, 99, &header).find("exceeds"), std::string::npos);
  uint8_t bad[kFrameHeaderBytes];
  std::copy(bytes, bytes + kFrameHeaderBytes, bad);
  bad[0] ^= 0xff;
  EXPECT_NE(decodeFrameHeader(bad, 1000, &header).find("magic"), std::string::npos);
  std::copy(bytes, bytes + kFrameHeaderBytes, bad);
  bad[4] = 9;
  EXPECT_NE(decodeFrameHeader(bad, 1000, &header).find("version"), std::string::npos);
  std::copy(bytes, bytes + kFrameHeaderBytes, bad);
  bad[6] = 77;
  EXPECT_NE(decodeFrameHeader(bad, 1000, &header).find("type"), std::string::npos);
}

TEST(Frame, HelloRoundTripAndLimits) {
  const auth::Nonce nonce = auth::freshNonce();
  std::vector<uint8_t> bytes = encodeHello({3, 8, "job", nonce});
  EXPECT_EQ(bytes.size(), kHelloFixedBytes + 3);  // the job id follows; no token travels
  Hello hello;
  size_t idLength = 0;
  ASSERT_EQ(decodeHelloFixed(bytes.data(), &hello, &idLength), "");
  EXPECT_EQ(hello.rank, 3);
  EXPECT_EQ(hello.size, 8);
  EXPECT_EQ(hello.nonce, nonce);
  EXPECT_EQ(idLength, 3u);
  bytes[17] = 0xff;  // idLength high byte: 65283 > 256
  EXPECT_NE(decodeHelloFixed(bytes.data(), &hello, &idLength), "");
  bytes[17] = 0;
  bytes[4] = 1;  // a version 1 peer, which sent its token
  EXPECT_NE(decodeHelloFixed(bytes.data(), &hello, &idLength).find("version"), std::string::npos);
}

TEST(Frame, ChallengeAndProofRoundTrip) {
  Challenge challenge{.status = AckStatus::kOk, .nonce = auth::freshNonce()};
  challenge.proof = auth::prove("token", auth::kMeshAcceptor, {.initiator = challenge.nonce});
  uint8_t bytes[kChallengeBytes];
  encodeChallenge(challenge, bytes);
  Challenge decoded;
  ASSERT_EQ(decodeChallenge(bytes, &decoded), "");
  EXPECT_EQ(decoded.nonce, challenge.nonce);
  EXPECT_EQ(decoded.proof, challenge.proof);
  ProofMessage proof{.status = AckStatus::kWrongToken};
  uint8_t proofBytes[kProofMessageBytes];
  encodeProof(proof, proofBytes);
  ProofMessage back;
  ASSERT_EQ(decodeProof(proofBytes, &back), "");
  EXPECT_EQ(back.status, AckStatus::kWrongToken);
  EXPECT_NE(decodeProof(bytes, &back), "") << "a challenge is not a proof";
}

TEST(Frame, AckRoundTrip) {
  uint8_t bytes[kAckBytes];
  encodeAck(AckStatus::kWrongToken, bytes);
  AckStatus status{};
  EXPECT_EQ(decodeAck(bytes, &status), "");
  EXPECT_EQ(status, AckStatus::kWrongToken);
  bytes[4] = 99;
  EXPECT_NE(decodeAck(bytes, &status), "");
}

}  // namespace gradsync::tcp

namespace gradsync::tcp {

TEST(Frame, AbortCarriesABoundedReason) {
  uint8_t bytes[kFrameHeaderBytes];
  FrameHeader header;
  encodeFrameHeader({FrameType::kAbort, 0, 100}, bytes);
  EXPECT_EQ(decodeFrameHeader(bytes, 1 << 30, &header), "");
  EXPECT_EQ(header.type, FrameType::kAbort);
  encodeFrameHeader({FrameType::kAbort, 0, kMaxAbortBytes + 1}, bytes);
  EXPECT_NE(decodeFrameHeader(bytes, 1 << 30, &header), "");
  encodeFrameHeader({FrameType::kGoodbye, 0, 1}, bytes);
  EXPECT_NE(decodeFrameHeader(bytes, 1 << 30, &header), "");
}

}  // namespace gradsync::tcp
