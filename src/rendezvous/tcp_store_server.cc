// The TCP store server: one thread, one poll(2) loop, non-blocking sockets.
//
// The loop thread owns every connection and the KeyTable, so nothing here needs a lock. Per
// connection it keeps the bytes received but not yet decoded and the replies not yet written.
// Memory per connection stays bounded: before the handshake a frame may be no larger than a
// hello, after it no larger than wire::kMaxPayloadBytes; reading stops while a request is parked
// or while more than kMaxPendingOutput of replies wait to be written (a client that does not read
// cannot make the server buffer without end).
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"
#include "rendezvous/key_table.h"
#include "rendezvous/store_util.h"
#include "rendezvous/tcp_store.h"
#include "rendezvous/tcp_store_wire.h"

namespace gradsync {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

constexpr size_t kReadChunk = 64 * 1024;
// Read at most this much per connection per loop turn, so one busy client cannot starve others.
constexpr size_t kReadPerTurn = 16 * kReadChunk;
// The largest handshake frame, a hello: the job id (at most kMaxJobFieldBytes) and a nonce,
// each with a 4-byte length.
constexpr uint32_t kMaxHelloPayload =
    4 + rendezvous::wire::kMaxJobFieldBytes + 4 + auth::kNonceBytes;
constexpr size_t kMaxPendingOutput = 1 << 20;
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

struct Connection {
  uint64_t id = 0;
  Fd fd;
  std::string peer;
  bool challenged = false;  // its hello is answered; its proof is due
  bool authenticated = false;
  bool closed = false;
  auth::Exchange exchange;  // the handshake's nonces (jobId and binding: the store's options)
  SteadyTime handshakeDeadline;
  Bytes in;   // received, not yet decoded
  Bytes out;  // encoded replies; out[0..outSent) already written
  size_t outSent = 0;

  size_t pendingOut() const { return out.size() - outSent; }
};

}  // namespace

class TcpStoreServer::Impl {
 public:
  Impl(const SocketAddress& address, const TcpStoreOptions& options);
  ~Impl();

  SocketAddress address_;

 private:
  void run();
  void runLoop();
  int pollTimeoutMs() const;
  void acceptAll();
  void service(Connection& c, short revents);
  void readFrom(Connection& c);
  void processInput(Connection& c);
  void handleMessage(Connection& c, rendezvous::wire::Message message);
  void handshake(Connection& c, const rendezvous::wire::Message& message);
  void challenge(Connection& c, const rendezvous::wire::Message& message);
  void deliver(const std::vector<rendezvous::KeyTable::Reply>& replies, uint64_t current);
  void send(Connection& c, const rendezvous::wire::Message& message);
  void flush(Connection& c);
  void refuse(Connection& c, const std::string& reason);
  void reap();

  TcpStoreOptions options_;
  Fd listen_;
  Fd wake_;  // eventfd: the destructor writes to it to stop the loop
  std::map<uint64_t, Connection> conns_;
  rendezvous::KeyTable table_;
  uint64_t nextId_ = 1;
  SteadyTime acceptPausedUntil_;
  // Set when a connection became able to make progress without a new poll event (a parked
  // request was answered, or its output drained while decoded-but-unhandled input waits).
  bool rescan_ = false;
  std::thread thread_;
};

TcpStoreServer::Impl::Impl(const SocketAddress& address, const TcpStoreOptions& options)
    : options_(options) {
  if (options.jobId.size() > rendezvous::wire::kMaxJobFieldBytes ||
      options.jobToken.size() > rendezvous::wire::kMaxJobFieldBytes) {
    throw ConfigError("job id and job token must be at most 256 bytes each",
                      {.operation = "store server", .hint = "use a shorter --job-id/--job-token"});
  }
  listen_ = listenTcp(address.host, address.port);
  setNonBlocking(listen_.get());
  address_ = SocketAddress{address.host, boundPort(listen_.get())};
  wake_ = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake_.valid()) {
    throw SystemError(fmt::format("eventfd failed: {}", errnoText(errno)),
                      {.operation = "store server"});
  }
  thread_ = std::thread([this] { run(); });
  GS_LOG(kInfo, "rendezvous store serving job '{}' on {}", options_.jobId, address_.toString());
}

TcpStoreServer::Impl::~Impl() {
  uint64_t one = 1;
  // An eventfd write of 8 bytes cannot block or fail short; nothing useful to do if it failed.
  [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
  thread_.join();
}

void TcpStoreServer::Impl::run() {
  try {
    runLoop();
  } catch (const std::exception& e) {
    GS_LOG(kError, "rendezvous store on {} stopped: {}", address_.toString(), e.what());
  }
  conns_.clear();  // closes every client socket: blocked clients get PeerLostError
}

void TcpStoreServer::Impl::runLoop() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    bool accepting = std::chrono::steady_clock::now() >= acceptPausedUntil_;
    fds.assign({pollfd{wake_.get(), POLLIN, 0},
                pollfd{listen_.get(), static_cast<short>(accepting ? POLLIN : 0), 0}});
    ids.clear();
    for (auto& [id, c] : conns_) {
      short events = POLLRDHUP;
      bool wantsInput = !table_.isParked(id) && c.pendingOut() < kMaxPendingOutput;
      if (wantsInput) events |= POLLIN;
      if (c.pendingOut() > 0) events |= POLLOUT;
      fds.push_back(pollfd{c.fd.get(), events, 0});
      ids.push_back(id);
    }
    int timeout = pollTimeoutMs();
    rescan_ = false;
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      throw SystemError(fmt::format("poll failed: {}", errnoText(errno)));
    }
    if (fds[0].revents != 0) return;  // stop requested
    if (fds[1].revents != 0) acceptAll();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (fds[i + 2].revents != 0) service(conns_.at(ids[i]), fds[i + 2].revents);
    }
    // Decode before flushing: a set handled here may answer parked gets of other connections.
    for (auto& [id, c] : conns_) processInput(c);
    reap();
    for (auto& [id, c] : conns_) flush(c);
  }
}

int TcpStoreServer::Impl::pollTimeoutMs() const {
  if (rescan_) return 0;
  std::optional<SteadyTime> next = table_.nextDeadline();
  if (acceptPausedUntil_ > std::chrono::steady_clock::now() &&
      (!next || acceptPausedUntil_ < *next)) {
    next = acceptPausedUntil_;
  }
  for (const auto& [id, c] : conns_) {
    if (!c.authenticated && (!next || c.handshakeDeadline < *next)) next = c.handshakeDeadline;
  }
  if (!next) return -1;
  auto left =
      std::chrono::ceil<std::chrono::milliseconds>(*next - std::chrono::steady_clock::now());
  // Capped so that far deadlines (timeouts of days) do not overflow poll's int.
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
}

void TcpStoreServer::Impl::acceptAll() {
  for (;;) {
    Fd fd(::accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if (err == EMFILE || err == ENFILE) {
        // Out of descriptors: the pending connection stays queued and would wake every poll, so
        // stop watching the listening socket for a moment instead of spinning.
        acceptPausedUntil_ = std::chrono::steady_clock::now() + kAcceptPause;
      }
      if (err != EAGAIN && err != EWOULDBLOCK) {
        GS_LOG(kError, "rendezvous store on {}: accept failed: {}", address_.toString(),
               errnoText(err));
      }
      return;
    }
    setNoDelay(fd.get());
    Connection c;
    c.id = nextId_++;
    c.peer = peerName(fd.get());
    c.fd = std::move(fd);
    c.handshakeDeadline =
        std::chrono::steady_clock::now() + rendezvous::clampTimeout(options_.handshakeTimeout);
    GS_LOG(kDebug, "rendezvous store: connection from {}", c.peer);
    conns_.emplace(c.id, std::move(c));
  }
}

void TcpStoreServer::Impl::service(Connection& c, short revents) {
  if ((revents & POLLIN) != 0) {
    readFrom(c);
  } else if ((revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
    // Not reading (a request is parked or replies are unread) and the peer went away.
    GS_LOG(kDebug, "rendezvous store: {} disconnected", c.peer);
    c.closed = true;
  }
}

void TcpStoreServer::Impl::readFrom(Connection& c) {
  size_t limit = c.authenticated ? kReadPerTurn : kReadChunk;
  uint8_t buffer[kReadChunk];
  for (size_t total = 0; total < limit && !c.closed;) {
    ssize_t n = ::recv(c.fd.get(), buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) {
      c.in.insert(c.in.end(), buffer, buffer + n);
      total += static_cast<size_t>(n);
    } else if (n == 0) {
      if (!c.in.empty()) {
        // A client closes only between requests, so leftover bytes mean a truncated frame.
        GS_LOG(kError, "rendezvous store on {}: {} closed the connection mid-frame ({} bytes)",
               address_.toString(), c.peer, c.in.size());
      }
      c.closed = true;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return;
    } else if (errno != EINTR) {
      GS_LOG(kDebug, "rendezvous store: reading from {}: {}", c.peer, errnoText(errno));
      c.closed = true;
    }
  }
}

void TcpStoreServer::Impl::processInput(Connection& c) {
  namespace wire = rendezvous::wire;
  size_t consumed = 0;
  while (!c.closed && !table_.isParked(c.id) && c.pendingOut() < kMaxPendingOutput) {
    std::span<const uint8_t> rest(c.in.data() + consumed, c.in.size() - consumed);
    wire::HeaderResult header = wire::decodeHeader(rest);
    if (header.status == wire::HeaderResult::Status::kInvalid) return refuse(c, header.error);
    if (header.status == wire::HeaderResult::Status::kNeedMore) break;
    if (!c.authenticated && header.header.payloadBytes > kMaxHelloPayload) {
      return refuse(c, fmt::format("first frame of {} bytes is too large for a handshake",
                                   header.header.payloadBytes));
    }
    size_t frameBytes = wire::kHeaderBytes + header.header.payloadBytes;
    if (rest.size() < frameBytes) break;
    wire::MessageResult decoded = wire::decodePayload(
        header.header.type, rest.subspan(wire::kHeaderBytes, frameBytes - wire::kHeaderBytes));
    consumed += frameBytes;
    if (!decoded.message) return refuse(c, decoded.error);
    handleMessage(c, std::move(*decoded.message));
  }
  c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(consumed));
}

void TcpStoreServer::Impl::handleMessage(Connection& c, rendezvous::wire::Message message) {
  namespace wire = rendezvous::wire;
  if (!c.authenticated) return handshake(c, message);
  wire::MessageType type = wire::typeOf(message);
  if (type != wire::MessageType::kSet && type != wire::MessageType::kGet &&
      type != wire::MessageType::kAdd && type != wire::MessageType::kWait) {
    return refuse(c, fmt::format("unexpected {} frame from a client", wire::typeName(type)));
  }
  std::vector<rendezvous::KeyTable::Reply> replies;
  table_.handle(c.id, std::move(message), std::chrono::steady_clock::now(), replies);
  deliver(replies, c.id);
}

void TcpStoreServer::Impl::deliver(const std::vector<rendezvous::KeyTable::Reply>& replies,
                                   uint64_t current) {
  for (const auto& reply : replies) {
    Connection& target = conns_.at(reply.conn);
    send(target, reply.message);
    // A parked connection may hold more requests, unread until now: look at it again at once.
    if (target.id != current && !target.in.empty()) rescan_ = true;
  }
}

// The handshake (tcp_store_wire.h): a hello is answered with this store's nonce and proof, and
// the client's proof that follows decides. The token is never logged, echoed or sent.
void TcpStoreServer::Impl::handshake(Connection& c, const rendezvous::wire::Message& message) {
  namespace wire = rendezvous::wire;
  if (!c.challenged) return challenge(c, message);
  const auto* proof = std::get_if<wire::Proof>(&message);
  if (proof == nullptr) {
    return refuse(
        c, fmt::format("expected a proof frame, got {}", wire::typeName(wire::typeOf(message))));
  }
  if (proof->refused) return refuse(c, "wrong job token (the client could not verify the store)");
  if (!auth::verify(options_.jobToken, auth::kStoreClient, c.exchange, proof->proof)) {
    return refuse(c, "wrong job token");
  }
  c.authenticated = true;
  send(c, wire::HelloOk{});
  GS_LOG(kDebug, "rendezvous store: {} joined job '{}'", c.peer, options_.jobId);
}

void TcpStoreServer::Impl::challenge(Connection& c, const rendezvous::wire::Message& message) {
  namespace wire = rendezvous::wire;
  const auto* hello = std::get_if<wire::Hello>(&message);
  if (hello == nullptr) {
    return refuse(c, fmt::format("expected a hello frame first, got {}",
                                 wire::typeName(wire::typeOf(message))));
  }
  if (hello->jobId != options_.jobId) {
    return refuse(c, fmt::format("wrong job id '{}' (this store serves job '{}')", hello->jobId,
                                 options_.jobId));
  }
  c.exchange = {
      .jobId = options_.jobId, .initiator = hello->nonce, .responder = auth::freshNonce()};
  c.challenged = true;
  send(c, wire::Challenge{c.exchange.responder,
                          auth::prove(options_.jobToken, auth::kStoreServer, c.exchange)});
}

void TcpStoreServer::Impl::send(Connection& c, const rendezvous::wire::Message& message) {
  Bytes frame = rendezvous::wire::encodeFrame(message);
  c.out.insert(c.out.end(), frame.begin(), frame.end());
}

void TcpStoreServer::Impl::flush(Connection& c) {
  while (!c.closed && c.pendingOut() > 0) {
    ssize_t n =
        ::send(c.fd.get(), c.out.data() + c.outSent, c.pendingOut(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.outSent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      GS_LOG(kDebug, "rendezvous store: writing to {}: {}", c.peer, errnoText(errno));
      c.closed = true;
    }
  }
  if (c.pendingOut() == 0 && !c.out.empty()) {
    c.out.clear();
    c.outSent = 0;
    if (!c.in.empty()) rescan_ = true;  // input held back by the output limit can go on now
  }
}

void TcpStoreServer::Impl::refuse(Connection& c, const std::string& reason) {
  GS_LOG(kError, "rendezvous store on {}: refused connection from {}: {}", address_.toString(),
         c.peer, reason);
  // Best effort: tell the client why (one non-blocking attempt), then close.
  send(c, rendezvous::wire::ErrorReply{reason});
  flush(c);
  c.closed = true;
}

void TcpStoreServer::Impl::reap() {
  auto now = std::chrono::steady_clock::now();
  std::vector<rendezvous::KeyTable::Reply> expired;
  table_.expire(now, expired);
  deliver(expired, 0);
  for (auto it = conns_.begin(); it != conns_.end();) {
    Connection& c = it->second;
    if (!c.closed && !c.authenticated && now >= c.handshakeDeadline) {
      refuse(c, fmt::format("no handshake within {} ms", options_.handshakeTimeout.count()));
    }
    if (c.closed) {
      table_.dropConnection(c.id);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

TcpStoreServer::TcpStoreServer(const SocketAddress& address, const TcpStoreOptions& options)
    : impl_(std::make_unique<Impl>(address, options)) {}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const {
  return impl_->address_.port;
}

SocketAddress TcpStoreServer::address() const {
  return impl_->address_;
}

}  // namespace gradsync
