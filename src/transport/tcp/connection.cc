#include "transport/tcp/connection.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync::tcp {
namespace {

// Bytes read from one peer before the loop turns to the others.
constexpr size_t kReadBudget = size_t{8} << 20;

bool wouldBlock(int err) {
  return err == EAGAIN || err == EWOULDBLOCK;
}

}  // namespace

Connection::Connection(int rank, int peer, Fd fd, Mailbox& mailbox, uint64_t maxMessageBytes)
    : rank_(rank),
      peer_(peer),
      fd_(std::move(fd)),
      mailbox_(mailbox),
      maxMessageBytes_(maxMessageBytes) {}

void Connection::lost(const std::string& why) const {
  throw PeerLostError(
      fmt::format("lost connection to rank {}: {}", peer_, why),
      {.rank = rank_,
       .peer = peer_,
       .operation = "tcp",
       .hint = fmt::format("rank {} probably crashed or was killed; check its output", peer_)});
}

Connection::FlushResult Connection::flush(Nanos now, RateLimiter& limiter) {
  FlushResult result;
  while (!out_.empty()) {
    OutFrame& frame = out_.front();
    if (frame.releaseAt > now) {
      result.wakeAt = frame.releaseAt;
      return result;
    }
    size_t total = kFrameHeaderBytes + frame.bytes;
    size_t allowed = limiter.allowance(now);
    if (allowed < std::min<size_t>(total - frame.sent, limiter.quantum())) {
      result.wakeAt = limiter.readyAt(total - frame.sent);
      return result;
    }
    iovec iov[2];
    int count = 0;
    if (frame.sent < kFrameHeaderBytes) {
      iov[count++] = {frame.header + frame.sent, kFrameHeaderBytes - frame.sent};
    }
    size_t dataSent = frame.sent > kFrameHeaderBytes ? frame.sent - kFrameHeaderBytes : 0;
    if (frame.bytes > dataSent) {
      iov[count++] = {const_cast<uint8_t*>(frame.data) + dataSent, frame.bytes - dataSent};
    }
    // Respect the allowance by trimming the iovecs.
    size_t budget = std::min(allowed, total - frame.sent);
    for (int i = 0; i < count; ++i) {
      iov[i].iov_len = std::min(iov[i].iov_len, budget);
      budget -= iov[i].iov_len;
    }
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = count;
    ssize_t n = ::sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (wouldBlock(errno)) {
        result.socketFull = true;
        return result;
      }
      if (errno == EINTR) continue;
      lost(errnoText(errno));
    }
    limiter.consume(static_cast<size_t>(n));
    frame.sent += static_cast<size_t>(n);
    if (frame.sent == total) {
      WorkPtr work = std::move(frame.work);
      out_.pop_front();
      if (work) work->complete();
    }
  }
  return result;
}

bool Connection::readHeader() {
  ssize_t n =
      ::recv(fd_.get(), header_ + headerRead_, kFrameHeaderBytes - headerRead_, MSG_DONTWAIT);
  if (n == 0) {
    if (goodbyeReceived_ && headerRead_ == 0) {
      closed_ = true;
      return false;
    }
    lost(headerRead_ == 0 ? "connection closed" : "connection closed inside a frame header");
  }
  if (n < 0) {
    if (wouldBlock(errno) || errno == EINTR) return false;
    lost(errnoText(errno));
  }
  headerRead_ += static_cast<size_t>(n);
  bytesRead_ += static_cast<uint64_t>(n);
  if (headerRead_ < kFrameHeaderBytes) return true;
  headerRead_ = 0;
  FrameHeader header;
  if (std::string error = decodeFrameHeader(header_, maxMessageBytes_, &header); !error.empty()) {
    throw ProtocolError(fmt::format("malformed frame from rank {}: {}", peer_, error),
                        {.rank = rank_, .peer = peer_, .operation = "tcp read"});
  }
  if (header.type == FrameType::kGoodbye) {
    goodbyeReceived_ = true;
    mailbox_.closePeer(peer_, std::make_exception_ptr(PeerLostError(
                                  fmt::format("rank {} has shut down", peer_),
                                  {.rank = rank_, .peer = peer_, .operation = "recv"})));
    return true;
  }
  if (header.type == FrameType::kAbort) {
    abortIncoming_ = true;
    delivery_ = {};
    delivery_.discard.resize(header.length);
    delivery_.dest = delivery_.discard.data();
    delivery_.bytes = header.length;
  } else {
    delivery_ = mailbox_.beginDelivery(peer_, header.tag, header.length);
  }
  payloadRead_ = 0;
  inPayload_ = true;
  return true;
}

bool Connection::readPayload() {
  if (payloadRead_ < delivery_.bytes) {
    ssize_t n = ::recv(fd_.get(), delivery_.dest + payloadRead_, delivery_.bytes - payloadRead_,
                       MSG_DONTWAIT);
    if (n == 0) lost("connection closed inside a message");
    if (n < 0) {
      if (wouldBlock(errno) || errno == EINTR) return false;
      lost(errnoText(errno));
    }
    payloadRead_ += static_cast<size_t>(n);
    bytesRead_ += static_cast<uint64_t>(n);
  }
  if (payloadRead_ == delivery_.bytes) {
    inPayload_ = false;
    if (abortIncoming_) {
      std::string reason(delivery_.discard.begin(), delivery_.discard.end());
      throw PeerLostError(fmt::format("rank {} failed: {}", peer_, reason),
                          {.rank = rank_, .peer = peer_, .operation = "tcp"});
    }
    mailbox_.endDelivery(delivery_);
    delivery_ = {};
  }
  return true;
}

void Connection::readAvailable() {
  uint64_t start = bytesRead_;
  while (!closed_ && bytesRead_ - start < kReadBudget) {
    bool progressed = inPayload_ ? readPayload() : readHeader();
    if (!progressed) return;
  }
}

void Connection::sendAbort(const std::string& reason) {
  if (closed_) return;
  if (!out_.empty() && out_.front().sent > 0) {  // mid-frame: no room for a reason, but still
    ::shutdown(fd_.get(), SHUT_WR);              // end the stream so the peer fails at once
    return;
  }
  std::string text = reason.substr(0, kMaxAbortBytes);
  uint8_t header[kFrameHeaderBytes];
  encodeFrameHeader({FrameType::kAbort, 0, text.size()}, header);
  iovec iov[2] = {{header, sizeof header}, {text.data(), text.size()}};
  msghdr message{};
  message.msg_iov = iov;
  message.msg_iovlen = 2;
  ssize_t ignored = ::sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
  // Stop sending after the reason, so the peer reads it before the end of the stream.
  ::shutdown(fd_.get(), SHUT_WR);
}

void Connection::failQueued(const std::exception_ptr& error) {
  for (OutFrame& frame : out_) {
    if (frame.work) frame.work->fail(error);
  }
  out_.clear();
  if (inPayload_) {
    mailbox_.abandonDelivery(delivery_, error);
    inPayload_ = false;
  }
}

}  // namespace gradsync::tcp
