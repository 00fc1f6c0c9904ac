#include "transport/tcp/connection.h"

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync::tcp {
namespace {

// Bytes read from one peer before the loop turns to the others.
constexpr size_t kReadBudget = size_t{8} << 20;

}  // namespace

Connection::Connection(int rank, int peer, std::unique_ptr<Link> link, Mailbox& mailbox,
                       uint64_t maxMessageBytes)
    : rank_(rank),
      peer_(peer),
      link_(std::move(link)),
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
    // The link trims to the allowance (a blocked TLS write excepted: it must be retried whole).
    IoResult io = link_->writeSome(iov, count, std::min(allowed, total - frame.sent));
    if (io.status == IoResult::Status::kWouldBlock) {
      result.socketFull = true;
      return result;
    }
    if (io.status != IoResult::Status::kOk) {
      lost(io.status == IoResult::Status::kClosed ? "connection closed" : io.error);
    }
    const size_t n = io.bytes;
    limiter.consume(n);
    frame.sent += n;
    if (frame.sent == total) {
      WorkPtr work = std::move(frame.work);
      out_.pop_front();
      if (work) work->complete();
    }
  }
  return result;
}

ssize_t Connection::readSome(void* data, size_t bytes) {
  IoResult io = link_->readSome(data, bytes);
  switch (io.status) {
    case IoResult::Status::kOk:
      return static_cast<ssize_t>(io.bytes);
    case IoResult::Status::kWouldBlock:
      return 0;
    case IoResult::Status::kClosed:
      return -1;
    case IoResult::Status::kFailed:
      break;
  }
  lost(io.error);
}

bool Connection::readHeader() {
  ssize_t n = readSome(header_ + headerRead_, kFrameHeaderBytes - headerRead_);
  if (n < 0) {
    if (goodbyeReceived_ && headerRead_ == 0) {
      closed_ = true;
      return false;
    }
    lost(headerRead_ == 0 ? "connection closed" : "connection closed inside a frame header");
  }
  if (n == 0) return false;
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
    abortOrigin_ =
        header.tag > 0 ? static_cast<int>(std::min<uint64_t>(header.tag - 1, INT32_MAX)) : peer_;
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
    ssize_t n = readSome(delivery_.dest + payloadRead_, delivery_.bytes - payloadRead_);
    if (n < 0) lost("connection closed inside a message");
    if (n == 0) return false;
    payloadRead_ += static_cast<size_t>(n);
    bytesRead_ += static_cast<uint64_t>(n);
  }
  if (payloadRead_ == delivery_.bytes) {
    inPayload_ = false;
    if (abortIncoming_) {
      std::string reason(delivery_.discard.begin(), delivery_.discard.end());
      throw PeerLostError(
          fmt::format("rank {} failed: {}", peer_, reason),
          {.rank = rank_, .peer = peer_, .operation = "tcp", .origin = abortOrigin_});
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

std::exception_ptr Connection::peerAbortReason() {
  try {
    for (uint64_t before = ~uint64_t{0}; !closed_ && bytesRead_ != before;) {
      before = bytesRead_;
      readAvailable();
    }
  } catch (const PeerLostError&) {
    if (abortIncoming_) return std::current_exception();
  } catch (const Error&) {
  }
  return nullptr;
}

void Connection::sendAbort(const std::string& reason, int origin) {
  if (closed_) return;
  // Mid-frame (or mid-record): no room for a reason, but still end the stream so that the peer
  // fails at once.
  const bool midFrame = (!out_.empty() && out_.front().sent > 0) || link_->writeInProgress();
  std::string text = midFrame ? "" : reason.substr(0, kMaxAbortBytes);
  std::string frame(kFrameHeaderBytes, '\0');
  const uint64_t originTag = origin >= 0 ? static_cast<uint64_t>(origin) + 1 : 0;
  encodeFrameHeader({FrameType::kAbort, originTag, text.size()},
                    reinterpret_cast<uint8_t*>(frame.data()));
  frame += text;
  // Stop sending after the reason, so the peer reads it before the end of the stream.
  link_->writeLastWords(frame.data(), midFrame ? 0 : frame.size());
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
