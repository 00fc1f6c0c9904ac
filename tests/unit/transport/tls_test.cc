// TCP over TLS (TcpTransportOptions::tls): TLS and plaintext ranks refuse each other clearly,
// a relay terminating TLS on both sides cannot pass the token proofs on (channel binding), a
// silent TLS peer times out naming its rank, and the rate limiter still paces TLS records.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/socket.h"
#include "gradsync/error.h"
#include "gradsync/store.h"
#include "gradsync/tcp.h"
#include "support/rank_threads.h"
#include "support/transports.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/tls_link.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using MonotonicClock = std::chrono::steady_clock;

TcpTransportOptions options(bool tls, std::chrono::milliseconds timeout) {
  TcpTransportOptions o;
  o.jobToken = "tok";
  o.tls = tls;
  o.transport.timeout = timeout;
  return o;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Rank 1 connects, rank 0 accepts; `tlsOnConnector` says which side has TLS.
void expectMutualRefusal(bool tlsOnConnector) {
  auto store = makeInMemoryStore();
  testing::runRankThreads(2, [&](int rank) {
    const bool tls = (rank == 1) == tlsOnConnector;
    const auto start = MonotonicClock::now();
    if (rank == 1) {  // fails at once, saying why
      try {
        connectTcpTransport(*store, 1, 2, options(tls, 5s));
        FAIL() << "a TLS rank and a plaintext rank must refuse each other";
      } catch (const ProtocolError& e) {
        EXPECT_TRUE(contains(e.what(), tlsOnConnector ? "rank 0 answered without TLS"
                                                      : "rank 0 uses --tls but this rank does not"))
            << e.what();
        EXPECT_TRUE(contains(e.what(), "same --tls setting")) << e.what();
      }
      EXPECT_LT(MonotonicClock::now() - start, 3s);
    } else {  // keeps waiting for the real peer, then names the mismatch in its timeout
      try {
        connectTcpTransport(*store, 0, 2, options(tls, 1500ms));
        FAIL() << "rank 0 must not accept the other kind of peer";
      } catch (const TimeoutError& e) {
        EXPECT_TRUE(contains(e.what(), "ranks 1 did not connect")) << e.what();
        EXPECT_TRUE(contains(e.what(), tls ? "without TLS" : "with TLS")) << e.what();
        EXPECT_TRUE(contains(e.what(), "same --tls setting")) << e.what();
      }
      EXPECT_LT(MonotonicClock::now() - start, 5s);
    }
  });
}

TEST(Tls, PlaintextAcceptorAndTlsConnectorRefuseEachOther) {
  expectMutualRefusal(true);
}

TEST(Tls, TlsAcceptorAndPlaintextConnectorRefuseEachOther) {
  expectMutualRefusal(false);
}

TEST(Tls, SilentPeerTimesOutNamingItsRank) {
  auto store = makeInMemoryStore();
  Fd listener = listenTcp("127.0.0.1", 0);  // accepts (the kernel's backlog) but never answers
  store->setString("tcp/addr/0", "127.0.0.1:" + std::to_string(boundPort(listener.get())));
  const auto start = MonotonicClock::now();
  try {
    connectTcpTransport(*store, 1, 2, options(true, 1s));
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "peer rank 0")) << e.what();
  }
  EXPECT_LT(MonotonicClock::now() - start, 5s);
}

// A relay between rank 1 and rank 0 that speaks the handshake, with TLS or not to each side.
// Without TLS it is invisible; with TLS it holds two sessions, and the proofs fail.
void relayHandshake(int listener, const std::string& target, bool tls) {
  const Deadline deadline(5s);
  Fd accepted = *acceptBefore(listener, deadline);
  Fd connected = connectTcp(SocketAddress::parse(target, "relay"), deadline);
  tcp::TlsContext context;
  std::unique_ptr<tcp::Link> fromRank1 =
      tls ? tcp::acceptTls(std::move(accepted), context, deadline, {})
          : std::make_unique<tcp::PlainLink>(std::move(accepted));
  std::unique_ptr<tcp::Link> toRank0 =
      tls ? tcp::connectTls(std::move(connected), context, deadline, {})
          : std::make_unique<tcp::PlainLink>(std::move(connected));
  auto pass = [&](tcp::Link& from, tcp::Link& to, size_t bytes) {
    std::vector<uint8_t> buffer(bytes);
    from.recvAll(buffer.data(), bytes, deadline);
    to.sendAll(buffer.data(), bytes, deadline);
    return buffer;
  };
  std::vector<uint8_t> fixed = pass(*fromRank1, *toRank0, tcp::kHelloFixedBytes);
  tcp::Hello hello;
  size_t idLength = 0;
  ASSERT_EQ(tcp::decodeHelloFixed(fixed.data(), &hello, &idLength), "");
  pass(*fromRank1, *toRank0, idLength);
  pass(*toRank0, *fromRank1, tcp::kChallengeBytes);
  try {
    pass(*fromRank1, *toRank0, tcp::kProofMessageBytes);
    pass(*toRank0, *fromRank1, tcp::kAckBytes);
  } catch (const Error&) {  // rank 1 refused rank 0's proof and hung up
  }
}

void runThroughRelay(bool tls) {
  auto store0 = makeInMemoryStore();  // rank 0's view
  auto store1 = makeInMemoryStore();  // rank 1's view: rank 0 is at the relay
  Fd listener = listenTcp("127.0.0.1", 0);
  store1->setString("tcp/addr/0", "127.0.0.1:" + std::to_string(boundPort(listener.get())));
  std::thread rank0([&] {
    try {
      connectTcpTransport(*store0, 0, 2, options(tls, 2s));
      EXPECT_FALSE(tls) << "rank 0 accepted a relayed TLS connection";
    } catch (const TimeoutError&) {
      EXPECT_TRUE(tls);
    }
  });
  std::thread relay(
      [&] { relayHandshake(listener.get(), store0->getString("tcp/addr/0", 5s), tls); });
  try {
    connectTcpTransport(*store1, 1, 2, options(tls, 2s));
    EXPECT_FALSE(tls) << "a relay terminating TLS on both sides must not pass the proofs on";
  } catch (const ProtocolError& e) {
    EXPECT_TRUE(tls) << e.what();
    EXPECT_TRUE(contains(e.what(), "wrong job token")) << e.what();
  }
  relay.join();
  rank0.join();
}

TEST(Tls, PlaintextHandshakeCanBeRelayed) {
  runThroughRelay(false);  // the attack TLS exists for: a relay reads and alters everything
}

TEST(Tls, RelayTerminatingTlsOnBothSidesIsRefused) {
  runThroughRelay(true);
}

// Blocked TLS writes are retried with their first length whatever the limiter allows, so the
// pacing must still hold (and the transfer must complete).
TEST(Tls, BandwidthEmulationPacesTlsRecords) {
  TransportOptions link;
  link.bandwidthBytesPerSec = 12.5e6;  // 100 Mbit/s
  testing::runWithTransports(
      testing::TransportKind::kTcpTls, 2,
      [](Transport& t) {
        std::vector<uint8_t> data(2 << 20, 0x5a), received;
        double seconds = testing::timeTransferToRank1(t, data, &received);
        if (t.rank() == 1) {
          double expected = (2 << 20) / 12.5e6;
          EXPECT_GT(seconds, expected * 0.8);
          EXPECT_LT(seconds, expected * 4.0);
          EXPECT_EQ(received, data);
        }
      },
      link);
}

}  // namespace
}  // namespace gradsync
