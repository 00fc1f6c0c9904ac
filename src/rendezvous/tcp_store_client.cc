// The TCP store client: blocking request/response, one request in flight per connection.
//
// Connections come from a small pool so that concurrent callers never queue behind one another
// (a get() parked on the server would otherwise hold up the set() that completes it). A
// connection goes back to the pool only after a complete exchange; after a timeout or a broken
// frame it is closed, so a late reply can never be read as the answer to the next request.
#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "gradsync/error.h"
#include "rendezvous/store_util.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_wire.h"

namespace gradsync {
namespace {

namespace wire = rendezvous::wire;
using namespace std::chrono_literals;
using rendezvous::describeKeys;
using rendezvous::throwStoreTimeout;

// The server answers an expired get/wait itself (naming the missing keys); the client waits this
// much longer before it gives up on the server too.
constexpr auto kReplyGrace = std::chrono::milliseconds(500);
// Idle connections kept for reuse; more would only hold sockets open on the server.
constexpr size_t kMaxIdle = 4;

uint32_t clampMillis(std::chrono::milliseconds timeout) {
  return static_cast<uint32_t>(rendezvous::clampTimeout(timeout).count());
}

class TcpStoreClient final : public Store {
 public:
  TcpStoreClient(const SocketAddress& server, const TcpStoreOptions& options)
      : server_(server), options_(options) {
    if (options.jobId.size() > wire::kMaxJobFieldBytes ||
        options.jobToken.size() > wire::kMaxJobFieldBytes) {  // the token's limit: bootstrap's
      throw ConfigError(
          "job id and job token must be at most 256 bytes each",
          {.operation = "store connect", .hint = "use a shorter --job-id/--job-token"});
    }
    // Connect now, so that an unreachable server or a refused handshake fails here, early.
    release(connect());
  }

  void set(const std::string& key, const Bytes& value) override {
    expect<wire::OkReply>(
        roundTrip(wire::SetRequest{key, value}, options_.requestTimeout, "store.set", {key}));
  }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    wire::Message reply =
        roundTrip(wire::GetRequest{key, clampMillis(timeout)}, timeout, "store.get", {key});
    return std::move(expect<wire::ValueReply>(reply).value);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    return expect<wire::IntegerReply>(
               roundTrip(wire::AddRequest{key, delta}, options_.requestTimeout, "store.add", {key}))
        .value;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    expect<wire::OkReply>(
        roundTrip(wire::WaitRequest{keys, clampMillis(timeout)}, timeout, "store.wait", keys));
  }

 private:
  std::string where() const { return fmt::format("the TCP store at {}", server_.toString()); }

  template <typename T>
  T& expect(wire::Message& reply) {
    if (auto* typed = std::get_if<T>(&reply)) return *typed;
    throw ProtocolError(
        fmt::format("unexpected {} reply from {}", wire::typeName(wire::typeOf(reply)), where()));
  }
  template <typename T>
  T expect(wire::Message&& reply) {
    return std::move(expect<T>(reply));
  }

  Fd connect();
  // Throws the ProtocolError of a handshake that ended with `reply` instead of going on.
  [[noreturn]] void throwRefusal(const wire::Message& reply) const;
  void release(Fd fd);
  Fd acquire();
  wire::Message exchange(int fd, const Bytes& frame, const Deadline& deadline);
  wire::Message readReply(int fd, const Deadline& deadline);
  wire::Message roundTrip(const wire::Message& request, std::chrono::milliseconds timeout,
                          const std::string& operation, const std::vector<std::string>& keys);

  SocketAddress server_;
  TcpStoreOptions options_;
  std::mutex mutex_;
  std::vector<Fd> idle_;
};

// The handshake (tcp_store_wire.h): this side's nonce, the store's challenge, checked before
// this side's proof goes out (a store without the token never sees it), then the verdict.
Fd TcpStoreClient::connect() {
  Deadline deadline(rendezvous::clampTimeout(options_.connectTimeout));
  Fd fd = connectTcp(server_, deadline);
  const auth::Nonce mine = auth::freshNonce();
  try {
    wire::Message reply =
        exchange(fd.get(), wire::encodeFrame(wire::Hello{options_.jobId, mine}), deadline);
    const auto* challenge = std::get_if<wire::Challenge>(&reply);
    if (challenge == nullptr) throwRefusal(reply);
    const auth::Exchange proved{
        .jobId = options_.jobId, .initiator = mine, .responder = challenge->nonce};
    if (!auth::verify(options_.jobToken, auth::kStoreServer, proved, challenge->proof)) {
      const Bytes refusal = wire::encodeFrame(wire::Proof{.refused = true});
      writeFully(fd.get(), refusal.data(), refusal.size(), deadline);
      throwRefusal(wire::ErrorReply{"wrong job token"});
    }
    reply = exchange(
        fd.get(),
        wire::encodeFrame(wire::Proof{auth::prove(options_.jobToken, auth::kStoreClient, proved)}),
        deadline);
    if (!std::holds_alternative<wire::HelloOk>(reply)) throwRefusal(reply);
  } catch (const TimeoutError&) {
    throw TimeoutError(
        fmt::format("{} accepted the connection but did not answer the handshake "
                    "within {} ms",
                    where(), options_.connectTimeout.count()),
        {.operation = "store connect", .hint = "is another program listening on the master port?"});
  }
  return fd;
}

void TcpStoreClient::throwRefusal(const wire::Message& reply) const {
  if (const auto* error = std::get_if<wire::ErrorReply>(&reply)) {
    bool token = error->message.find("token") != std::string::npos;
    throw ProtocolError(
        fmt::format("{} refused the handshake: {}", where(), error->message),
        {.operation = "store connect",
         .hint = token ? "every process of one job must use the same --job-token / "
                         "GRADSYNC_JOB_TOKEN"
                       : "every process of one job must use the same --job-id / GRADSYNC_JOB_ID "
                         "and gradsync version"});
  }
  throw ProtocolError(fmt::format("unexpected {} reply to the handshake from {}",
                                  wire::typeName(wire::typeOf(reply)), where()),
                      {.operation = "store connect"});
}

void TcpStoreClient::release(Fd fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.size() < kMaxIdle) idle_.push_back(std::move(fd));
}

Fd TcpStoreClient::acquire() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      Fd fd = std::move(idle_.back());
      idle_.pop_back();
      return fd;
    }
  }
  return connect();  // outside the lock: connecting may take up to connectTimeout
}

wire::Message TcpStoreClient::exchange(int fd, const Bytes& frame, const Deadline& deadline) {
  writeFully(fd, frame.data(), frame.size(), deadline);
  return readReply(fd, deadline);
}

wire::Message TcpStoreClient::readReply(int fd, const Deadline& deadline) {
  uint8_t headerBytes[wire::kHeaderBytes];
  readFully(fd, headerBytes, sizeof headerBytes, deadline);
  wire::HeaderResult header = wire::decodeHeader(headerBytes);
  if (header.status != wire::HeaderResult::Status::kComplete) {
    throw ProtocolError(fmt::format("malformed reply from {}: {}", where(), header.error));
  }
  Bytes payload(header.header.payloadBytes);
  readFully(fd, payload.data(), payload.size(), deadline);
  wire::MessageResult decoded = wire::decodePayload(header.header.type, payload);
  if (!decoded.message) {
    throw ProtocolError(fmt::format("malformed reply from {}: {}", where(), decoded.error));
  }
  return std::move(*decoded.message);
}

wire::Message TcpStoreClient::roundTrip(const wire::Message& request,
                                        std::chrono::milliseconds timeout,
                                        const std::string& operation,
                                        const std::vector<std::string>& keys) {
  Bytes frame = wire::encodeFrame(request);
  if (frame.size() > wire::kHeaderBytes + wire::kMaxPayloadBytes) {
    throw ProtocolError(fmt::format("request for {} is {} bytes, above the limit of {}",
                                    describeKeys(keys), frame.size(), wire::kMaxPayloadBytes),
                        {.operation = operation, .hint = "store large data elsewhere"});
  }
  bool waits = operation == "store.get" || operation == "store.wait";
  Deadline deadline(rendezvous::clampTimeout(timeout) + (waits ? kReplyGrace : 0ms));
  Fd fd = acquire();
  wire::Message reply;
  try {
    reply = exchange(fd.get(), frame, deadline);
  } catch (const TimeoutError&) {
    if (waits) throwStoreTimeout(operation, keys, keys.size(), timeout, where());
    throw TimeoutError(fmt::format("no reply from {} within {} ms for {}", where(), timeout.count(),
                                   describeKeys(keys)),
                       {.operation = operation, .hint = "is the store's process overloaded?"});
  } catch (const PeerLostError& e) {
    throw PeerLostError(
        fmt::format("lost the connection to {} during {} of {}: {}", where(), operation,
                    describeKeys(keys), e.detail()),
        {.operation = operation, .hint = "the process serving the store (rank 0) may have exited"});
  }
  if (auto* error = std::get_if<wire::ErrorReply>(&reply)) {
    // Not reused: the server may be closing it (it also answers protocol violations this way).
    throw ProtocolError(fmt::format("{} refused {} of {}: {}", where(), operation,
                                    describeKeys(keys), error->message),
                        {.operation = operation});
  }
  release(std::move(fd));
  if (auto* timedOut = std::get_if<wire::TimedOutReply>(&reply)) {
    throwStoreTimeout(operation, timedOut->missing, keys.size(), timeout, where());
  }
  return reply;
}

}  // namespace

std::shared_ptr<Store> makeTcpStoreClient(const SocketAddress& server,
                                          const TcpStoreOptions& options) {
  return std::make_shared<TcpStoreClient>(server, options);
}

}  // namespace gradsync
