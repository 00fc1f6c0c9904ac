// The TCP transport. Threading: application threads call send/recv, which only lock
// submitMutex_ (to queue a frame) or the Mailbox (to post a receive). The loop thread owns the
// connections, the rate limiter and the epoll/timer state, so those need no locks.
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "gradsync/error.h"
#include "gradsync/tcp.h"
#include "transport/checks.h"
#include "transport/tcp/connection.h"
#include "transport/tcp/mesh.h"

namespace gradsync {
namespace {

using tcp::Connection;

// How long a closing transport waits for its peers' goodbyes before closing anyway.
constexpr std::chrono::milliseconds kGoodbyeWait{10'000};

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, const TcpTransportOptions& options,
               std::vector<std::unique_ptr<tcp::Link>> peers);
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const TransportOptions& options() const override { return options_.transport; }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override;
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override;
  uint64_t bytesSent() const override { return bytesSent_.load(std::memory_order_relaxed); }
  size_t messageOverheadBytes() const override { return tcp::kFrameHeaderBytes; }
  void abort(std::exception_ptr error) override;

 private:
  struct Submission {
    int peer;
    tcp::OutFrame frame;
  };

  void submit(int peer, tcp::OutFrame frame);
  void checkConnected(int peer) const;
  void wake();
  void loop();
  void drainSubmissions();
  void handleEvent(const epoll_event& event);
  void readFrom(Connection& connection);
  void readBuffered();
  void flushAll();
  void armTimer(std::optional<Nanos> at);
  void setWriteInterest(Connection& connection, bool enabled);
  void breakAll(const std::exception_ptr& error);
  bool drained() const;

  const int rank_;
  const int size_;
  const TcpTransportOptions options_;
  const Clock& clock_ = SteadyClock::instance();
  Mailbox mailbox_;

  // Loop-thread state.
  std::vector<std::unique_ptr<Connection>> connections_;  // by peer rank; null for self
  std::vector<bool> writeInterest_;
  tcp::RateLimiter limiter_;
  Fd epoll_, wakeFd_, timerFd_;
  std::optional<Nanos> timerAt_;
  bool broken_ = false;
  bool buffered_ = false;  // some connection holds input epoll cannot see (TLS)

  // Shared with application threads.
  std::mutex submitMutex_;
  std::condition_variable drainedCv_;
  std::vector<Submission> pending_;
  bool wakePending_ = false;
  std::exception_ptr brokenError_;
  std::exception_ptr abortRequest_;  // abort() asks the loop thread to break everything
  bool closing_ = false;
  bool stop_ = false;
  bool drained_ = false;

  std::atomic<uint64_t> bytesSent_{0};
  std::thread thread_;
};

TcpTransport::TcpTransport(int rank, int size, const TcpTransportOptions& options,
                           std::vector<std::unique_ptr<tcp::Link>> peers)
    : rank_(rank),
      size_(size),
      options_(options),
      mailbox_(rank, options.transport.timeout),
      connections_(size),
      writeInterest_(size, false),
      limiter_(options.transport.bandwidthBytesPerSec, clock_.now()),
      epoll_(::epoll_create1(EPOLL_CLOEXEC)),
      wakeFd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)),
      timerFd_(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)) {
  if (!epoll_.valid() || !wakeFd_.valid() || !timerFd_.valid()) {
    throw SystemError(fmt::format("creating the event loop failed: {}", errnoText(errno)));
  }
  auto add = [&](int fd, uint32_t id) {
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.u32 = id;
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      throw SystemError(fmt::format("epoll_ctl failed: {}", errnoText(errno)));
    }
  };
  for (int peer = 0; peer < size; ++peer) {
    if (!peers[peer]) continue;
    setNonBlocking(peers[peer]->fd());
    setBufferSizes(peers[peer]->fd(), options.socketBufferBytes);
    add(peers[peer]->fd(), static_cast<uint32_t>(peer));
    connections_[peer] = std::make_unique<Connection>(rank, peer, std::move(peers[peer]), mailbox_,
                                                      options.transport.maxMessageBytes);
  }
  add(wakeFd_.get(), static_cast<uint32_t>(size));
  add(timerFd_.get(), static_cast<uint32_t>(size + 1));
  thread_ = std::thread([this] {
    setThreadLogRank(rank_);
    tcp::blockSigpipe();  // TLS writes cannot pass MSG_NOSIGNAL (link.h)
    loop();
  });
}

TcpTransport::~TcpTransport() {
  {
    std::unique_lock<std::mutex> lock(submitMutex_);
    closing_ = true;
    if (!brokenError_) {
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank_ || !connections_[peer]) continue;  // null: left out (options.peers)
        tcp::OutFrame goodbye;
        tcp::encodeFrameHeader({tcp::FrameType::kGoodbye, 0, 0}, goodbye.header);
        pending_.push_back({peer, std::move(goodbye)});
      }
    }
    wakePending_ = true;
  }
  wake();
  {
    std::unique_lock<std::mutex> lock(submitMutex_);
    drainedCv_.wait_for(lock, std::min(kGoodbyeWait, options_.transport.timeout),
                        [this] { return drained_ || brokenError_; });
    stop_ = true;
  }
  wake();
  thread_.join();
}

WorkPtr TcpTransport::send(int peer, uint64_t tag, const void* data, size_t bytes) {
  checkPeerRank(rank_, size_, peer);
  checkMessageSize(rank_, peer, bytes, options_.transport.maxMessageBytes);
  auto work = std::make_shared<Work>(Work::Kind::kSend, rank_, peer, tag, bytes,
                                     options_.transport.timeout);
  if (peer == rank_) {  // self-messages skip the sockets
    mailbox_.deliver(rank_, tag, data, bytes);
    work->complete();
    return work;
  }
  checkConnected(peer);
  bytesSent_.fetch_add(bytes + tcp::kFrameHeaderBytes, std::memory_order_relaxed);
  tcp::OutFrame frame;
  tcp::encodeFrameHeader({tcp::FrameType::kData, tag, bytes}, frame.header);
  frame.data = static_cast<const uint8_t*>(data);
  frame.bytes = bytes;
  frame.work = work;
  if (options_.transport.latency.count() > 0)
    frame.releaseAt = clock_.now() + options_.transport.latency;
  submit(peer, std::move(frame));
  return work;
}

// The loop thread owns the queues and the half-read messages, so it does the breaking; abort()
// waits until it has (bounded: a loop that never answers is not worth hanging on).
void TcpTransport::abort(std::exception_ptr error) {
  std::unique_lock<std::mutex> lock(submitMutex_);
  if (brokenError_) return;
  abortRequest_ = error;
  wakePending_ = true;
  lock.unlock();
  wake();
  lock.lock();
  drainedCv_.wait_for(lock, std::chrono::seconds(5), [this] { return brokenError_ != nullptr; });
}

WorkPtr TcpTransport::recv(int peer, uint64_t tag, void* data, size_t bytes) {
  checkPeerRank(rank_, size_, peer);
  if (peer != rank_) checkConnected(peer);
  return mailbox_.postRecv(peer, tag, data, bytes);
}

void TcpTransport::checkConnected(int peer) const {
  if (!connections_[peer]) {
    throw ConfigError(fmt::format("this TCP transport does not connect rank {}", peer),
                      {.rank = rank_,
                       .peer = peer,
                       .operation = "tcp",
                       .hint = "the routed transport reaches it through shared memory"});
  }
}

void TcpTransport::submit(int peer, tcp::OutFrame frame) {
  bool needWake = false;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    if (brokenError_) {
      frame.work->fail(brokenError_);
      return;
    }
    pending_.push_back({peer, std::move(frame)});
    needWake = !wakePending_;
    wakePending_ = true;
  }
  if (needWake) wake();
}

void TcpTransport::wake() {
  uint64_t one = 1;
  ssize_t ignored = ::write(wakeFd_.get(), &one, sizeof one);
  (void)ignored;
}

void TcpTransport::loop() {
  epoll_event events[64];
  // A TLS link may have taken bytes off its socket during the handshake: look before waiting.
  buffered_ = true;
  for (;;) {
    int n = ::epoll_wait(epoll_.get(), events, 64, buffered_ ? 0 : -1);
    if (n < 0 && errno != EINTR) {
      breakAll(std::make_exception_ptr(
          SystemError(fmt::format("epoll_wait failed: {}", errnoText(errno)), {.rank = rank_})));
      return;
    }
    for (int i = 0; i < n; ++i) handleEvent(events[i]);
    readBuffered();
    flushAll();
    std::lock_guard<std::mutex> lock(submitMutex_);
    if (stop_) return;
    if (closing_ && !drained_ && drained()) {
      drained_ = true;
      drainedCv_.notify_all();
    }
  }
}

void TcpTransport::handleEvent(const epoll_event& event) {
  uint32_t id = event.data.u32;
  if (id == static_cast<uint32_t>(size_)) {
    uint64_t count;
    ssize_t ignored = ::read(wakeFd_.get(), &count, sizeof count);
    (void)ignored;
    drainSubmissions();
    return;
  }
  if (id == static_cast<uint32_t>(size_ + 1)) {
    uint64_t expirations;
    ssize_t ignored = ::read(timerFd_.get(), &expirations, sizeof expirations);
    (void)ignored;
    timerAt_.reset();
    return;
  }
  Connection& connection = *connections_[id];
  if (broken_ || connection.closed()) return;
  if ((event.events & (EPOLLIN | EPOLLHUP | EPOLLERR)) == 0) return;
  readFrom(connection);
}

void TcpTransport::readFrom(Connection& connection) {
  try {
    connection.readAvailable();
    if (connection.closed()) {
      ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, connection.fd(), nullptr);
      GS_LOG(kDebug, "rank {} closed its connection after saying goodbye", connection.peer());
    }
  } catch (const Error&) {
    breakAll(std::current_exception());
  }
}

// TLS decrypts whole records, so a read that stopped at its fairness budget (or a header read
// that asked for 24 bytes of a 16 KiB record) can leave input inside the link while the socket
// is empty and epoll stays silent. Such connections are read again here, and the next
// epoll_wait does not block while any still hold input. Plaintext links never do.
void TcpTransport::readBuffered() {
  buffered_ = false;
  if (broken_) return;
  for (auto& connection : connections_) {
    if (!connection || !connection->hasBufferedInput()) continue;
    readFrom(*connection);
    if (broken_) return;
    buffered_ = buffered_ || connection->hasBufferedInput();
  }
}

void TcpTransport::drainSubmissions() {
  std::vector<Submission> submissions;
  std::exception_ptr abortRequest;
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    submissions.swap(pending_);
    wakePending_ = false;
    abortRequest = std::exchange(abortRequest_, nullptr);
  }
  if (abortRequest) breakAll(abortRequest);
  for (Submission& s : submissions) {
    Connection& connection = *connections_[s.peer];
    if (!s.frame.work && connection.closed()) {
      continue;  // our goodbye to a peer that already closed: nobody to tell
    }
    if (s.frame.work && connection.goodbyeReceived()) {
      s.frame.work->fail(std::make_exception_ptr(
          PeerLostError(fmt::format("rank {} has shut down", s.peer),
                        {.rank = rank_, .peer = s.peer, .operation = "send"})));
      continue;
    }
    if (broken_) {
      if (s.frame.work) {
        std::lock_guard<std::mutex> lock(submitMutex_);
        s.frame.work->fail(brokenError_);
      }
      continue;
    }
    connection.enqueue(std::move(s.frame));
  }
}

void TcpTransport::flushAll() {
  if (broken_) return;
  std::optional<Nanos> wakeAt;
  Nanos now = clock_.now();
  for (auto& connection : connections_) {
    if (!connection || !connection->hasOutput()) {
      if (connection) setWriteInterest(*connection, false);
      continue;
    }
    try {
      Connection::FlushResult result = connection->flush(now, limiter_);
      setWriteInterest(*connection, result.socketFull);
      if (result.wakeAt && (!wakeAt || *result.wakeAt < *wakeAt)) wakeAt = result.wakeAt;
    } catch (const Error&) {
      // A peer that aborted (it lost another rank) closes at once, so this rank's write may
      // fail before it read why: its abort frame names the rank that was lost, not the peer.
      std::exception_ptr reason = connection->peerAbortReason();
      breakAll(reason ? reason : std::current_exception());
      return;
    }
  }
  armTimer(wakeAt);
}

void TcpTransport::armTimer(std::optional<Nanos> at) {
  if (at == timerAt_) return;
  itimerspec spec{};
  if (at) {
    Nanos when = std::max(*at, Nanos{1});
    spec.it_value.tv_sec = static_cast<time_t>(when.count() / 1'000'000'000);
    spec.it_value.tv_nsec = static_cast<long>(when.count() % 1'000'000'000);
  }
  ::timerfd_settime(timerFd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
  timerAt_ = at;
}

void TcpTransport::setWriteInterest(Connection& connection, bool enabled) {
  if (writeInterest_[connection.peer()] == enabled) return;
  writeInterest_[connection.peer()] = enabled;
  epoll_event event{};
  event.events = EPOLLIN | (enabled ? EPOLLOUT : 0u);
  event.data.u32 = static_cast<uint32_t>(connection.peer());
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, connection.fd(), &event);
}

void TcpTransport::breakAll(const std::exception_ptr& error) {
  if (broken_) return;
  broken_ = true;
  const AbortNotice notice = abortNoticeOf(error, rank_);
  {
    std::lock_guard<std::mutex> lock(submitMutex_);
    brokenError_ = error;
    drainedCv_.notify_all();
  }
  mailbox_.failAll(error);
  for (auto& connection : connections_) {
    if (!connection) continue;
    connection->sendAbort(notice.reason,
                          notice.origin);  // first: it checks for a half-written frame
    connection->failQueued(error);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, connection->fd(), nullptr);
  }
  drainSubmissions();
  if (options_.onBroken) options_.onBroken(error);
}

bool TcpTransport::drained() const {
  if (!pending_.empty()) return false;
  for (const auto& connection : connections_) {
    if (!connection) continue;
    if (connection->hasOutput()) return false;
    if (!connection->goodbyeReceived() && !connection->closed()) return false;
  }
  return true;
}

}  // namespace

std::unique_ptr<Transport> connectTcpTransport(Store& store, int rank, int size,
                                               const TcpTransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw ConfigError(fmt::format("invalid rank {} for world size {}", rank, size));
  }
  tcp::MeshConfig mesh;
  mesh.rank = rank;
  mesh.size = size;
  mesh.jobId = options.jobId;
  mesh.jobToken = options.jobToken;
  mesh.host = options.host.empty() ? "127.0.0.1" : options.host;
  mesh.keyPrefix = options.keyPrefix;
  mesh.timeout = options.transport.timeout;
  mesh.tls = options.tls;
  mesh.peers = options.peers;
  std::vector<std::unique_ptr<tcp::Link>> peers = tcp::connectMesh(store, mesh);
  return std::make_unique<TcpTransport>(rank, size, options, std::move(peers));
}

}  // namespace gradsync
