#include "transport/shm/channel.h"

#include <sys/uio.h>

#include <cerrno>

#include <fmt/format.h>

#include "common/socket.h"
#include "gradsync/error.h"

namespace gradsync::shm {

Channel::Channel(const ChannelConfig& config, Ring out, Ring in, Doorbell& peerBell,
                 Mailbox& mailbox)
    : config_(config), out_(out), in_(in), peerBell_(peerBell), mailbox_(mailbox) {}

std::exception_ptr Channel::lostError(const std::string& why) const {
  return std::make_exception_ptr(PeerLostError(
      fmt::format("lost connection to rank {}: {}", config_.peer, why),
      {.rank = config_.rank,
       .peer = config_.peer,
       .operation = "shm",
       .hint =
           fmt::format("rank {} probably crashed or was killed; check its output", config_.peer)}));
}

bool Channel::send(OutFrame frame) {
  std::lock_guard<std::mutex> lock(outMutex_);
  if (failed_) {
    if (frame.work) frame.work->fail(failed_);
    return false;
  }
  if (frame.header.type == FrameType::kSingleCopy) frame.header.id = nextId_++;
  queue_.push_back(std::move(frame));
  if (queue_.size() == 1) writeQueued();
  return !queue_.empty();
}

bool Channel::flush() {
  std::lock_guard<std::mutex> lock(outMutex_);
  return writeQueued();
}

bool Channel::busy() const {
  std::lock_guard<std::mutex> lock(outMutex_);
  return !queue_.empty() || !awaitingAck_.empty();
}

bool Channel::writeQueued() {
  bool wrote = false;
  while (!queue_.empty()) {
    OutFrame& frame = queue_.front();
    if (frame.written < sizeof(FrameHeader)) {
      const auto* header = reinterpret_cast<const uint8_t*>(&frame.header);
      size_t n = out_.write(header + frame.written, sizeof(FrameHeader) - frame.written);
      frame.written += n;
      wrote = wrote || n > 0;
      if (frame.written < sizeof(FrameHeader)) break;
    }
    if (frame.header.type == FrameType::kEager) {
      const size_t done = frame.written - sizeof(FrameHeader);
      size_t n = out_.write(frame.data + done, frame.header.bytes - done);
      frame.written += n;
      wrote = wrote || n > 0;
      if (done + n < frame.header.bytes) break;
    }
    if (frame.header.type == FrameType::kSingleCopy) {
      awaitingAck_.emplace(frame.header.id, std::move(frame.work));
    } else if (frame.work) {
      frame.work->complete();
    }
    queue_.pop_front();
  }
  if (wrote) peerBell_.ring();
  if (queue_.empty()) return wrote;
  // Full: ask the reader for a wake-up once it has made room, then look again, so that a
  // reader that emptied the ring just before the request is not missed.
  out_.control().writerWaiting.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return wrote || out_.writable() > 0;
}

bool Channel::read(size_t budget) {
  bool any = false;
  for (;;) {
    const bool progressed = inPayload_ ? readPayload(budget) : readHeader();
    if (!progressed) break;
    any = true;
    if (budget == 0) break;
  }
  if (any) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (in_.control().writerWaiting.exchange(0, std::memory_order_seq_cst) != 0) {
      peerBell_.ring();
    }
  } else {
    checkFarewell();
  }
  return any;
}

bool Channel::readHeader() {
  auto* bytes = reinterpret_cast<uint8_t*>(&header_);
  size_t n = in_.read(bytes + headerRead_, sizeof(FrameHeader) - headerRead_);
  if (n == 0) return false;
  headerRead_ += n;
  if (headerRead_ < sizeof(FrameHeader)) return true;
  headerRead_ = 0;
  const FrameHeader header = header_;
  const bool known = header.type == FrameType::kEager || header.type == FrameType::kSingleCopy ||
                     header.type == FrameType::kAck;
  if (!known || header.reserved != 0 || header.bytes > config_.maxMessageBytes) {
    throw ProtocolError(
        fmt::format("malformed shared-memory frame from rank {} (type {}, {} bytes)", config_.peer,
                    static_cast<uint32_t>(header.type), header.bytes),
        {.rank = config_.rank, .peer = config_.peer, .operation = "shm read"});
  }
  if (header.type == FrameType::kAck) {
    std::lock_guard<std::mutex> lock(outMutex_);
    auto it = awaitingAck_.find(header.id);
    if (it == awaitingAck_.end()) {
      throw ProtocolError(fmt::format("rank {} acknowledged send {}, which is not pending",
                                      config_.peer, header.id),
                          {.rank = config_.rank, .peer = config_.peer, .operation = "shm read"});
    }
    it->second->complete();
    awaitingAck_.erase(it);
  } else if (header.type == FrameType::kSingleCopy) {
    copyFromPeer(header);
  } else {
    delivery_ = mailbox_.beginDelivery(config_.peer, header.tag, header.bytes);
    inPayload_ = header.bytes > 0;
    payloadRead_ = 0;
    if (!inPayload_) {
      mailbox_.endDelivery(delivery_);
      delivery_ = {};
    }
  }
  return true;
}

bool Channel::readPayload(size_t& budget) {
  const size_t want = std::min<size_t>(delivery_.bytes - payloadRead_, budget);
  const size_t n = in_.read(delivery_.dest + payloadRead_, want);
  if (n == 0) return false;
  payloadRead_ += n;
  budget -= n;
  if (payloadRead_ == delivery_.bytes) {
    inPayload_ = false;
    mailbox_.endDelivery(delivery_);
    delivery_ = {};
  }
  return true;
}

// The payload goes from the sender's buffer straight to its destination. The sender's ring
// state is read after the copy: a sender that aborted may have released its buffer, so such a
// copy is never delivered; one that had not aborted by then had its buffer intact throughout.
void Channel::copyFromPeer(const FrameHeader& header) {
  delivery_ = mailbox_.beginDelivery(config_.peer, header.tag, header.bytes);
  auto fail = [&](std::exception_ptr error) {
    mailbox_.abandonDelivery(delivery_, error);
    std::rethrow_exception(error);
  };
  size_t done = 0;
  while (done < header.bytes) {
    iovec local{delivery_.dest + done, header.bytes - done};
    iovec remote{reinterpret_cast<void*>(header.address + done), header.bytes - done};
    ssize_t n = ::process_vm_readv(config_.peerPid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      if (in_.state() == kAbort) fail(abortError());
      fail(lostError(
          fmt::format("reading its {}-byte message failed: {}", header.bytes, errnoText(error))));
    }
    done += static_cast<size_t>(n);
  }
  if (in_.state() == kAbort) fail(abortError());
  mailbox_.endDelivery(delivery_);
  delivery_ = {};
  send({.header = {.type = FrameType::kAck, .id = header.id}});
}

std::exception_ptr Channel::abortError() const {
  return std::make_exception_ptr(
      PeerLostError(fmt::format("rank {} failed: {}", config_.peer, in_.reason()),
                    {.rank = config_.rank,
                     .peer = config_.peer,
                     .operation = "shm",
                     .origin = in_.origin() >= 0 ? in_.origin() : config_.peer}));
}

// A sender writes its state after its last frame, so a state seen before an empty ring means
// nothing more will come.
void Channel::checkFarewell() {
  const RingState state = in_.state();
  if (state == kOpen || goodbye_.load() || in_.readable() > 0) return;
  if (state == kAbort) std::rethrow_exception(abortError());
  if (inPayload_ || headerRead_ > 0)
    std::rethrow_exception(lostError("it shut down inside a message"));
  goodbye_.store(true, std::memory_order_release);
  mailbox_.closePeer(config_.peer,
                     std::make_exception_ptr(PeerLostError(
                         fmt::format("rank {} has shut down", config_.peer),
                         {.rank = config_.rank, .peer = config_.peer, .operation = "recv"})));
}

void Channel::peerExited() {
  while (read(size_t{64} << 20)) {
  }
  checkFarewell();
  if (!goodbye_.load())
    std::rethrow_exception(lostError("its process ended without closing its transport"));
}

void Channel::failAll(const std::exception_ptr& error) {
  std::unique_lock<std::mutex> lock(outMutex_);
  if (!failed_) failed_ = error;
  for (OutFrame& frame : queue_) {
    if (frame.work) frame.work->fail(error);
  }
  queue_.clear();
  for (auto& [id, work] : awaitingAck_) work->fail(error);
  awaitingAck_.clear();
  lock.unlock();
  if (inPayload_ || delivery_.work || delivery_.buffered) {
    mailbox_.abandonDelivery(delivery_, error);
  }
  inPayload_ = false;
}

void Channel::close(RingState state, const std::string& reason, int origin) {
  out_.close(state, reason, origin);
  peerBell_.ring();
}

}  // namespace gradsync::shm
