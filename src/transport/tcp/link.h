// One mesh connection's byte stream, whatever carries it: the TCP socket itself (PlainLink) or
// TLS over it (tls_link.h). The mesh's handshake uses the blocking calls; the transport's loop
// thread the non-blocking ones, so neither duplicates its logic per kind of link.
//
// Ownership: a Link owns its socket and closes it on destruction. Thread-safety: none; one
// thread at a time (the mesh's, then the loop thread's).
//
// Signals: OpenSSL writes to its socket without MSG_NOSIGNAL, so a TLS write to a peer that is
// gone raises SIGPIPE, which kills the process by default. The blocking calls guard themselves;
// the non-blocking ones (writeSome, writeLastWords) need a thread that called blockSigpipe().
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <string>

#include "common/socket.h"

namespace gradsync::tcp {

// The outcome of one non-blocking call. Failures are returned, not thrown, so that the caller
// names the peer rank in the error it raises.
struct IoResult {
  enum class Status { kOk, kWouldBlock, kClosed, kFailed };
  Status status = Status::kOk;
  size_t bytes = 0;   // transferred, when kOk (then > 0)
  std::string error;  // why, when kFailed
};

class Link {
 public:
  explicit Link(Fd fd) : fd_(std::move(fd)) {}
  virtual ~Link() = default;
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  // The socket, for poll/epoll. The Link keeps owning it.
  int fd() const { return fd_.get(); }
  virtual bool secure() const = 0;
  // What identifies this channel for auth::Exchange::channel: the TLS exporter value, or "".
  virtual std::string channelBinding() const = 0;

  // Blocking (polls the socket), bounded by `deadline`: TimeoutError past it, PeerLostError when
  // the peer closes, ProtocolError on a broken TLS record. For the handshake.
  virtual void sendAll(const void* data, size_t bytes, const Deadline& deadline) = 0;
  virtual void recvAll(void* data, size_t bytes, const Deadline& deadline) = 0;

  // Non-blocking. Writes some of the `count` buffers, in order, and at most `limit` bytes, except
  // that a TLS write that would have blocked is retried with its first length (OpenSSL's rule),
  // even above a smaller `limit`: the caller must offer the same unsent bytes again.
  virtual IoResult writeSome(const iovec* iov, int count, size_t limit) = 0;
  // Non-blocking. kClosed: the peer ended the stream in order.
  virtual IoResult readSome(void* data, size_t bytes) = 0;
  // Whether bytes were already taken off the socket and wait inside the Link: epoll will not
  // report them, so the loop must read again without waiting.
  virtual bool hasBufferedInput() const = 0;
  // Whether a blocked write must be retried before anything else may be written.
  virtual bool writeInProgress() const = 0;
  // Best effort, never blocks: writes `bytes` if the socket takes them now, then ends the
  // outgoing stream so the peer reads them before the end. For abort frames.
  virtual void writeLastWords(const void* data, size_t bytes) = 0;

 protected:
  Fd fd_;
};

// Blocks SIGPIPE in the calling thread for good (the transport's loop thread): a write to a
// closed connection then fails with EPIPE, as the plaintext path's MSG_NOSIGNAL makes it.
void blockSigpipe();

// The socket as it is; writeSome is one sendmsg with the iovecs (the fast path of old).
class PlainLink final : public Link {
 public:
  explicit PlainLink(Fd fd) : Link(std::move(fd)) {}
  bool secure() const override { return false; }
  std::string channelBinding() const override { return ""; }
  void sendAll(const void* data, size_t bytes, const Deadline& deadline) override;
  void recvAll(void* data, size_t bytes, const Deadline& deadline) override;
  IoResult writeSome(const iovec* iov, int count, size_t limit) override;
  IoResult readSome(void* data, size_t bytes) override;
  bool hasBufferedInput() const override { return false; }
  bool writeInProgress() const override { return false; }
  void writeLastWords(const void* data, size_t bytes) override;
};

}  // namespace gradsync::tcp
