// TCP store specifics: handshake refusal, hostile bytes on raw sockets, pipelining, shutdown.
#include <poll.h>
#include <sys/socket.h>

#include <gtest/gtest.h>

#include <thread>

#include "common/socket.h"
#include "gradsync/error.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_wire.h"
#include "support/free_port.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;
using testing::freePort;
using MonotonicClock = std::chrono::steady_clock;
namespace wire = rendezvous::wire;

class TcpStoreTest : public ::testing::Test {
 protected:
  TcpStoreTest() {
    options_.jobId = "job-a";
    options_.jobToken = "s3cret";
    options_.connectTimeout = 2s;
    options_.handshakeTimeout = 300ms;
    server_ = std::make_unique<TcpStoreServer>(SocketAddress{"127.0.0.1", 0}, options_);
  }

  std::shared_ptr<Store> client(TcpStoreOptions options) {
    return makeTcpStoreClient(server_->address(), options);
  }
  std::shared_ptr<Store> client() { return client(options_); }

  // A fresh, well-behaved client can still use the store.
  void expectServing() {
    auto store = client();
    store->setString("alive", "yes");
    EXPECT_EQ(store->getString("alive", 1s), "yes");
  }

  Fd raw() { return connectTcp(server_->address(), Deadline(2s)); }

  void sendRaw(const Fd& fd, const Bytes& bytes) {
    writeFully(fd.get(), bytes.data(), bytes.size(), Deadline(2s));
  }

  // True when the server closes `fd` (EOF or reset) within `timeout`; whatever it sends first
  // (an error frame) is discarded.
  static bool closedByServer(const Fd& fd, std::chrono::milliseconds timeout = 2s) {
    Deadline deadline(timeout);
    uint8_t buffer[4096];
    while (!deadline.expired()) {
      pollfd p{fd.get(), POLLIN, 0};
      if (::poll(&p, 1, deadline.pollMillis()) <= 0) continue;
      ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    }
    return false;
  }

  // The client's side of the handshake, by hand: returns the proof frame it sent.
  Bytes handshakeRaw(const Fd& fd) {
    const auth::Nonce mine = auth::freshNonce();
    sendRaw(fd, wire::encodeFrame(wire::Hello{options_.jobId, mine}));
    wire::Message reply = readFrame(fd);
    const auto* challenge = std::get_if<wire::Challenge>(&reply);
    EXPECT_NE(challenge, nullptr);
    if (challenge == nullptr) return {};
    const auth::Exchange exchange{
        .jobId = options_.jobId, .initiator = mine, .responder = challenge->nonce};
    EXPECT_TRUE(auth::verify(options_.jobToken, auth::kStoreServer, exchange, challenge->proof));
    Bytes proof = wire::encodeFrame(
        wire::Proof{auth::prove(options_.jobToken, auth::kStoreClient, exchange)});
    sendRaw(fd, proof);
    EXPECT_TRUE(std::holds_alternative<wire::HelloOk>(readFrame(fd)));
    return proof;
  }

  static wire::Message readFrame(const Fd& fd) {
    uint8_t header[wire::kHeaderBytes];
    readFully(fd.get(), header, sizeof header, Deadline(2s));
    auto decoded = wire::decodeHeader(header);
    EXPECT_EQ(decoded.status, wire::HeaderResult::Status::kComplete);
    Bytes payload(decoded.header.payloadBytes);
    readFully(fd.get(), payload.data(), payload.size(), Deadline(2s));
    auto message = wire::decodePayload(decoded.header.type, payload);
    EXPECT_TRUE(message.message) << message.error;
    return message.message ? *message.message : wire::Message{};
  }

  TcpStoreOptions options_;
  std::unique_ptr<TcpStoreServer> server_;
};

TEST_F(TcpStoreTest, PortZeroPicksAFreePort) {
  EXPECT_GT(server_->port(), 0);
  EXPECT_EQ(server_->address().port, server_->port());
}

TEST_F(TcpStoreTest, WrongTokenIsRefusedAndTheServerKeepsServing) {
  auto good = client();
  good->setString("before", "1");
  TcpStoreOptions wrong = options_;
  wrong.jobToken = "guess";
  try {
    client(wrong);
    FAIL() << "a wrong token was accepted";
  } catch (const ProtocolError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("refused the handshake: wrong job token"), std::string::npos) << what;
    EXPECT_EQ(what.find("s3cret"), std::string::npos) << "the secret leaked: " << what;
    EXPECT_EQ(what.find("guess"), std::string::npos) << "the secret leaked: " << what;
  }
  EXPECT_EQ(good->getString("before", 1s), "1");
  expectServing();
}

TEST_F(TcpStoreTest, WrongJobIdIsRefused) {
  TcpStoreOptions other = options_;
  other.jobId = "job-b";
  try {
    client(other);
    FAIL() << "another job's client was accepted";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("wrong job id 'job-b'"), std::string::npos) << e.what();
  }
  expectServing();
}

// A recorded handshake (a hello and a valid proof) replayed on a new connection is refused:
// the store's nonce differs, so the recorded proof proves nothing there. So is a proof reflected
// back to the store (its own, in the client's role).
TEST_F(TcpStoreTest, ReplayedOrReflectedHandshakesAreRefused) {
  const Fd first = raw();
  const Bytes recordedProof = handshakeRaw(first);
  const Fd replay = raw();
  sendRaw(replay, wire::encodeFrame(wire::Hello{options_.jobId, {}}));
  wire::Message challenge = readFrame(replay);
  ASSERT_TRUE(std::holds_alternative<wire::Challenge>(challenge));
  sendRaw(replay, recordedProof);
  wire::Message verdict = readFrame(replay);
  ASSERT_TRUE(std::holds_alternative<wire::ErrorReply>(verdict));
  EXPECT_NE(std::get<wire::ErrorReply>(verdict).message.find("wrong job token"), std::string::npos);
  EXPECT_TRUE(closedByServer(replay));
  const Fd reflect = raw();
  sendRaw(reflect, wire::encodeFrame(wire::Hello{options_.jobId, {}}));
  wire::Message second = readFrame(reflect);
  ASSERT_TRUE(std::holds_alternative<wire::Challenge>(second));
  sendRaw(reflect, wire::encodeFrame(wire::Proof{std::get<wire::Challenge>(second).proof}));
  ASSERT_TRUE(std::holds_alternative<wire::ErrorReply>(readFrame(reflect)));
  EXPECT_TRUE(closedByServer(reflect));
  expectServing();
}

TEST_F(TcpStoreTest, GarbageBytesCloseTheConnection) {
  Fd fd = raw();
  std::string http = "GET / HTTP/1.1\r\nHost: example\r\n\r\n";
  sendRaw(fd, Bytes(http.begin(), http.end()));
  EXPECT_TRUE(closedByServer(fd));
  expectServing();
}

TEST_F(TcpStoreTest, TruncatedFrameClosesTheConnection) {
  Fd fd = raw();
  Bytes frame = wire::encodeFrame(wire::Hello{options_.jobId, {}});
  frame.resize(frame.size() - 3);
  sendRaw(fd, frame);
  ::shutdown(fd.get(), SHUT_WR);
  EXPECT_TRUE(closedByServer(fd));
  expectServing();
}

TEST_F(TcpStoreTest, FieldLongerThanItsFrameClosesTheConnection) {
  Fd fd = raw();
  Bytes frame = wire::encodeFrame(wire::Hello{"x", {}});
  frame[wire::kHeaderBytes + 2] = 0x10;  // the job id now claims 4 KiB inside a 10-byte payload
  sendRaw(fd, frame);
  EXPECT_TRUE(closedByServer(fd));
  expectServing();
}

TEST_F(TcpStoreTest, OversizedLengthPrefixClosesTheConnection) {
  for (bool authenticated : {false, true}) {
    Fd fd = raw();
    if (authenticated) handshakeRaw(fd);
    Bytes header = wire::encodeFrame(wire::GetRequest{"k", 0});
    header.resize(wire::kHeaderBytes);
    for (int i = 8; i < 12; ++i) header[i] = 0xff;  // 4 GiB
    sendRaw(fd, header);
    EXPECT_TRUE(closedByServer(fd)) << "authenticated=" << authenticated;
  }
  expectServing();
}

TEST_F(TcpStoreTest, RequestBeforeHandshakeIsRefused) {
  Fd fd = raw();
  sendRaw(fd, wire::encodeFrame(wire::SetRequest{"k", Bytes{1}}));
  EXPECT_TRUE(closedByServer(fd));
  EXPECT_THROW(client()->get("k", 100ms), TimeoutError);  // the set was not applied
}

TEST_F(TcpStoreTest, SilentConnectionIsClosedAfterTheHandshakeTimeout) {
  Fd fd = raw();
  auto start = MonotonicClock::now();
  EXPECT_TRUE(closedByServer(fd));
  EXPECT_GE(MonotonicClock::now() - start, 250ms);
  expectServing();
}

TEST_F(TcpStoreTest, PipelinedRequestsAreAnsweredInOrder) {
  Fd fd = raw();
  handshakeRaw(fd);
  Bytes both = wire::encodeFrame(wire::GetRequest{"later", 5000});
  Bytes set = wire::encodeFrame(wire::SetRequest{"mine", Bytes{7}});
  both.insert(both.end(), set.begin(), set.end());
  sendRaw(fd, both);  // the get parks; the set behind it must wait its turn
  std::this_thread::sleep_for(50ms);
  EXPECT_THROW(client()->get("mine", 100ms), TimeoutError);
  client()->setString("later", "now");
  wire::Message first = readFrame(fd);
  ASSERT_TRUE(std::holds_alternative<wire::ValueReply>(first));
  EXPECT_EQ(std::get<wire::ValueReply>(first).value, Bytes({'n', 'o', 'w'}));
  EXPECT_TRUE(std::holds_alternative<wire::OkReply>(readFrame(fd)));
  EXPECT_EQ(client()->get("mine", 1s), Bytes{7});
}

TEST_F(TcpStoreTest, ManyParkedGetsAreAnsweredByOneSet) {
  constexpr int kWaiters = 16;
  auto store = client();
  std::vector<std::thread> threads;
  std::atomic<int> answered{0};
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&] {
      if (store->getString("go", 5s) == "go!") answered.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(50ms);
  client()->setString("go", "go!");
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load(), kWaiters);
}

TEST_F(TcpStoreTest, ClientConnectsToAServerThatStartsLater) {
  int port = freePort();
  std::unique_ptr<TcpStoreServer> late;
  std::thread starter([&] {
    std::this_thread::sleep_for(200ms);
    late = std::make_unique<TcpStoreServer>(SocketAddress{"127.0.0.1", port}, options_);
  });
  auto store = makeTcpStoreClient(SocketAddress{"127.0.0.1", port}, options_);
  starter.join();
  store->setString("k", "v");
  EXPECT_EQ(store->getString("k", 1s), "v");
}

TEST_F(TcpStoreTest, ConnectTimesOutWithoutAServer) {
  TcpStoreOptions options = options_;
  options.connectTimeout = 200ms;
  auto start = MonotonicClock::now();
  EXPECT_THROW(makeTcpStoreClient(SocketAddress{"127.0.0.1", freePort()}, options), TimeoutError);
  EXPECT_LT(MonotonicClock::now() - start, 1500ms);
}

TEST_F(TcpStoreTest, TimeoutMessageNamesTheServerAddress) {
  try {
    client()->get("missing", 100ms);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find(server_->address().toString()), std::string::npos)
        << e.what();
  }
}

TEST_F(TcpStoreTest, DestructorWithConnectedClientsDoesNotHang) {
  auto a = client();
  auto b = client();
  std::exception_ptr error;
  std::thread blocked([&] {
    try {
      a->get("never", 10s);
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::this_thread::sleep_for(100ms);  // let the get park on the server
  auto start = MonotonicClock::now();
  server_.reset();
  EXPECT_LT(MonotonicClock::now() - start, 1s);
  blocked.join();
  EXPECT_LT(MonotonicClock::now() - start, 2s);
  ASSERT_TRUE(error);
  EXPECT_THROW(std::rethrow_exception(error), PeerLostError);
  EXPECT_THROW(b->setString("k", "v"), PeerLostError);
}

}  // namespace
}  // namespace gradsync
