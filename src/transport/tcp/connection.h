// One authenticated TCP connection to a peer, driven by the transport's loop thread only (no
// locking inside). Outgoing: a FIFO of frames written through the Link (plaintext: one sendmsg
// of header and payload; TLS: records), paced by the rank's egress RateLimiter and each frame's
// emulated-latency release time. Incoming: a header/payload state machine that reads payloads
// straight into the matched receive buffer via the Mailbox.
#pragma once

#include <deque>
#include <memory>
#include <optional>

#include "common/socket.h"
#include "gradsync/clock.h"
#include "transport/mailbox.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/link.h"
#include "transport/tcp/rate_limiter.h"

namespace gradsync::tcp {

struct OutFrame {
  uint8_t header[kFrameHeaderBytes] = {};
  const uint8_t* data = nullptr;  // owned by the caller until `work` completes
  size_t bytes = 0;
  size_t sent = 0;  // bytes of header + payload written so far
  WorkPtr work;     // null for a goodbye frame
  Nanos releaseAt{0};
};

class Connection {
 public:
  Connection(int rank, int peer, std::unique_ptr<Link> link, Mailbox& mailbox,
             uint64_t maxMessageBytes);

  int fd() const { return link_->fd(); }
  int peer() const { return peer_; }
  void enqueue(OutFrame frame) { out_.push_back(std::move(frame)); }
  bool hasOutput() const { return !out_.empty(); }
  bool goodbyeReceived() const { return goodbyeReceived_; }
  bool closed() const { return closed_; }

  struct FlushResult {
    bool socketFull = false;      // wait for EPOLLOUT
    std::optional<Nanos> wakeAt;  // paced: call again at this time
  };
  // Writes queued frames as far as the socket, the limiter and release times allow; completes
  // the Work of each fully written frame. Throws PeerLostError if the connection broke.
  FlushResult flush(Nanos now, RateLimiter& limiter);

  // Reads what is available (bounded per call, for fairness between peers), delivering complete
  // messages. Throws PeerLostError on an unexpected close, ProtocolError on a malformed frame.
  void readAvailable();
  // Whether input already read off the socket (TLS) waits to be delivered: then readAvailable
  // must be called again without waiting for epoll, which cannot see it.
  bool hasBufferedInput() const { return !closed_ && link_->hasBufferedInput(); }

  // After a write to this peer failed: reads what it sent before closing, and returns the
  // failure its abort frame reports if one was there (the peer failed because it lost another
  // rank, which the reason names), else null. Messages read on the way are delivered.
  std::exception_ptr peerAbortReason();
  // Fails every queued send, and the receive of a message half read, with `error`.
  void failQueued(const std::exception_ptr& error);
  // Best effort, never blocks: tells the peer why this rank is failing (an abort frame), unless a
  // frame is half written (the stream cannot be interrupted) or the socket is full. `origin`: the
  // rank where the failure began (error.h's failureOrigin), -1 if unknown.
  void sendAbort(const std::string& reason, int origin);

 private:
  [[noreturn]] void lost(const std::string& why) const;
  // Reads into `data`: bytes read, 0 if none are available now, or -1 at an orderly end of
  // stream. Throws PeerLostError when the link failed.
  ssize_t readSome(void* data, size_t bytes);
  bool readHeader();
  bool readPayload();

  const int rank_;
  const int peer_;
  std::unique_ptr<Link> link_;
  Mailbox& mailbox_;
  const uint64_t maxMessageBytes_;
  std::deque<OutFrame> out_;

  uint8_t header_[kFrameHeaderBytes] = {};
  size_t headerRead_ = 0;
  bool inPayload_ = false;
  Mailbox::Delivery delivery_;
  size_t payloadRead_ = 0;
  uint64_t bytesRead_ = 0;      // all bytes read, for the per-call fairness budget
  bool abortIncoming_ = false;  // the payload being read is an abort reason
  int abortOrigin_ = -1;        // where the peer's failure began, when its abort frame said
  bool goodbyeReceived_ = false;
  bool closed_ = false;
};

}  // namespace gradsync::tcp
