// The pure parts of the TCP store: frame encoding/decoding and the server's key table.
#include <gtest/gtest.h>

#include <random>

#include "rendezvous/key_table.h"
#include "rendezvous/tcp_store_wire.h"

namespace gradsync::rendezvous {
namespace {

using namespace std::chrono_literals;
using Status = wire::HeaderResult::Status;

wire::Message roundTrip(const wire::Message& message) {
  Bytes frame = wire::encodeFrame(message);
  auto header = wire::decodeHeader(frame);
  EXPECT_EQ(header.status, Status::kComplete) << header.error;
  EXPECT_EQ(header.header.payloadBytes, frame.size() - wire::kHeaderBytes);
  auto decoded = wire::decodePayload(header.header.type,
                                     std::span<const uint8_t>(frame).subspan(wire::kHeaderBytes));
  EXPECT_TRUE(decoded.message) << decoded.error;
  return decoded.message ? *decoded.message : wire::Message{};
}

TEST(TcpStoreWire, EveryMessageRoundTrips) {
  const auth::Nonce nonce = auth::freshNonce();
  auto hello = std::get<wire::Hello>(roundTrip(wire::Hello{"job", nonce}));
  EXPECT_EQ(hello.jobId, "job");
  EXPECT_EQ(hello.nonce, nonce);
  const auth::Proof proof = auth::prove("token", auth::kStoreServer, {.jobId = "job"});
  auto challenge = std::get<wire::Challenge>(roundTrip(wire::Challenge{nonce, proof}));
  EXPECT_EQ(challenge.nonce, nonce);
  EXPECT_EQ(challenge.proof, proof);
  EXPECT_EQ(std::get<wire::Proof>(roundTrip(wire::Proof{proof})).proof, proof);
  EXPECT_FALSE(std::get<wire::Proof>(roundTrip(wire::Proof{proof})).refused);
  EXPECT_TRUE(std::get<wire::Proof>(roundTrip(wire::Proof{.refused = true})).refused);
  auto set = std::get<wire::SetRequest>(roundTrip(wire::SetRequest{"k", Bytes{0, 1, 0}}));
  EXPECT_EQ(set.key, "k");
  EXPECT_EQ(set.value, (Bytes{0, 1, 0}));
  auto get = std::get<wire::GetRequest>(roundTrip(wire::GetRequest{"key", 1234}));
  EXPECT_EQ(get.key, "key");
  EXPECT_EQ(get.timeoutMs, 1234u);
  EXPECT_EQ(std::get<wire::AddRequest>(roundTrip(wire::AddRequest{"c", -5})).delta, -5);
  auto wait = std::get<wire::WaitRequest>(roundTrip(wire::WaitRequest{{"a", "", "c"}, 7}));
  EXPECT_EQ(wait.keys, (std::vector<std::string>{"a", "", "c"}));
  EXPECT_EQ(wait.timeoutMs, 7u);
  EXPECT_TRUE(std::holds_alternative<wire::HelloOk>(roundTrip(wire::HelloOk{})));
  EXPECT_TRUE(std::holds_alternative<wire::OkReply>(roundTrip(wire::OkReply{})));
  EXPECT_EQ(std::get<wire::ValueReply>(roundTrip(wire::ValueReply{Bytes{9}})).value, Bytes{9});
  EXPECT_EQ(std::get<wire::IntegerReply>(roundTrip(wire::IntegerReply{INT64_MIN})).value,
            INT64_MIN);
  EXPECT_EQ(std::get<wire::ErrorReply>(roundTrip(wire::ErrorReply{"why"})).message, "why");
  EXPECT_EQ(std::get<wire::TimedOutReply>(roundTrip(wire::TimedOutReply{{"x"}})).missing,
            std::vector<std::string>{"x"});
}

TEST(TcpStoreWire, HeaderPrefixesNeedMore) {
  Bytes frame = wire::encodeFrame(wire::Hello{"job", {}});
  for (size_t n = 0; n < wire::kHeaderBytes; ++n) {
    EXPECT_EQ(wire::decodeHeader(std::span<const uint8_t>(frame.data(), n)).status,
              Status::kNeedMore)
        << n;
  }
}

TEST(TcpStoreWire, GarbageIsRefusedFromItsFirstByte) {
  Bytes garbage = {'G', 'E'};
  auto result = wire::decodeHeader(garbage);
  EXPECT_EQ(result.status, Status::kInvalid);
  EXPECT_NE(result.error.find("magic"), std::string::npos);
}

TEST(TcpStoreWire, BadHeadersAreRefused) {
  Bytes frame = wire::encodeFrame(wire::OkReply{});
  Bytes version = frame;
  version[4] = 1;  // version 1 clients sent the job token itself: refused
  EXPECT_NE(wire::decodeHeader(version).error.find("version 1"), std::string::npos);
  Bytes reserved = frame;
  reserved[7] = 1;
  EXPECT_EQ(wire::decodeHeader(reserved).status, Status::kInvalid);
  Bytes oversized = frame;
  oversized[8] = 0x04;  // 64 MiB + 1 after the next line
  oversized[11] = 0x01;
  EXPECT_NE(wire::decodeHeader(oversized).error.find("exceeds"), std::string::npos);
  oversized[11] = 0x00;  // exactly the limit is fine
  EXPECT_EQ(wire::decodeHeader(oversized).status, Status::kComplete);
}

TEST(TcpStoreWire, MalformedPayloadsAreErrors) {
  Bytes frame = wire::encodeFrame(wire::SetRequest{"key", Bytes{1, 2, 3}});
  std::span<const uint8_t> payload(frame.data() + wire::kHeaderBytes,
                                   frame.size() - wire::kHeaderBytes);
  for (size_t n = 0; n < payload.size(); ++n) {
    auto result = wire::decodePayload(wire::MessageType::kSet, payload.first(n));
    EXPECT_FALSE(result.message) << n;
    EXPECT_NE(result.error.find("truncated"), std::string::npos) << result.error;
  }
  Bytes trailing(payload.begin(), payload.end());
  trailing.push_back(0);
  EXPECT_NE(wire::decodePayload(wire::MessageType::kSet, trailing).error.find("trailing"),
            std::string::npos);
  Bytes hugeCount = {0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
  EXPECT_FALSE(wire::decodePayload(wire::MessageType::kWait, hugeCount).message);
  EXPECT_FALSE(wire::decodePayload(static_cast<wire::MessageType>(99), {}).message);
  Bytes longId = wire::encodeFrame(wire::Hello{std::string(257, 'j'), "t"});
  EXPECT_NE(wire::decodePayload(wire::MessageType::kHello,
                                std::span<const uint8_t>(longId).subspan(wire::kHeaderBytes))
                .error.find("above the limit"),
            std::string::npos);
}

// A smoke fuzz: random bytes never crash the decoders (a real fuzzer can call the same functions).
TEST(TcpStoreWire, RandomBytesNeverCrash) {
  std::mt19937 random(42);
  for (int i = 0; i < 5000; ++i) {
    Bytes bytes(random() % 64);
    for (auto& b : bytes) b = static_cast<uint8_t>(random());
    if (!bytes.empty() && i % 2 == 0)
      std::copy_n(wire::kMagic, std::min<size_t>(4, bytes.size()), bytes.begin());
    wire::decodeHeader(bytes);
    wire::decodePayload(static_cast<wire::MessageType>(1 + i % 11), bytes);
  }
}

TEST(KeyTable, GetParksUntilSet) {
  KeyTable table;
  std::vector<KeyTable::Reply> replies;
  auto now = std::chrono::steady_clock::now();
  table.handle(1, wire::GetRequest{"k", 1000}, now, replies);
  EXPECT_TRUE(replies.empty());
  EXPECT_TRUE(table.isParked(1));
  table.handle(2, wire::SetRequest{"k", Bytes{5}}, now, replies);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[0].conn, 2u);  // the set's own ok
  EXPECT_EQ(replies[1].conn, 1u);
  EXPECT_EQ(std::get<wire::ValueReply>(replies[1].message).value, Bytes{5});
  EXPECT_FALSE(table.isParked(1));
}

TEST(KeyTable, WaitNeedsEveryKeyAndExpiresNamingTheMissingOnes) {
  KeyTable table;
  std::vector<KeyTable::Reply> replies;
  auto now = std::chrono::steady_clock::now();
  table.handle(1, wire::WaitRequest{{"a", "b", "a"}, 100}, now, replies);
  table.handle(2, wire::AddRequest{"a", 1}, now, replies);
  ASSERT_EQ(replies.size(), 1u);  // only the add's integer
  EXPECT_EQ(table.nextDeadline(), now + 100ms);
  table.expire(now + 99ms, replies);
  EXPECT_EQ(replies.size(), 1u);
  table.expire(now + 100ms, replies);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(std::get<wire::TimedOutReply>(replies[1].message).missing,
            std::vector<std::string>{"b"});
  EXPECT_EQ(table.parkedCount(), 0u);
  replies.clear();
  table.handle(3, wire::SetRequest{"b", {}}, now, replies);
  EXPECT_EQ(replies.size(), 1u);  // nobody is waiting any more
}

TEST(KeyTable, DroppedConnectionsAreForgotten) {
  KeyTable table;
  std::vector<KeyTable::Reply> replies;
  auto now = std::chrono::steady_clock::now();
  table.handle(1, wire::GetRequest{"k", 1000}, now, replies);
  table.dropConnection(1);
  EXPECT_FALSE(table.nextDeadline());
  table.handle(2, wire::SetRequest{"k", {}}, now, replies);
  EXPECT_EQ(replies.size(), 1u);
}

TEST(KeyTable, AddOnTextIsAnErrorReply) {
  KeyTable table;
  std::vector<KeyTable::Reply> replies;
  auto now = std::chrono::steady_clock::now();
  table.handle(1, wire::SetRequest{"k", Bytes{'x'}}, now, replies);
  table.handle(1, wire::AddRequest{"k", 1}, now, replies);
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<wire::ErrorReply>(replies[1].message));
}

}  // namespace
}  // namespace gradsync::rendezvous
