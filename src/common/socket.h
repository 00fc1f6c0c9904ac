// Small POSIX socket helpers shared by the TCP store and the TCP transport. Blocking helpers
// take a Deadline and throw TimeoutError past it; system failures throw SystemError with the
// errno text; a peer closing the connection throws PeerLostError.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>

#include "gradsync/address.h"

namespace gradsync {

// Owns a file descriptor; closes it on destruction. Movable, not copyable.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// A point in steady time after which blocking calls give up.
class Deadline {
 public:
  explicit Deadline(std::chrono::nanoseconds timeout)
      : at_(std::chrono::steady_clock::now() + timeout) {}
  bool expired() const { return std::chrono::steady_clock::now() >= at_; }
  // Milliseconds left, for poll(2); at least 0, rounded up so we never spin.
  int pollMillis() const;
  std::chrono::nanoseconds remaining() const;

 private:
  std::chrono::steady_clock::time_point at_;
};

std::string errnoText(int err);

// Listens on host:port (port 0 picks a free one) with SO_REUSEADDR.
Fd listenTcp(const std::string& host, int port, int backlog = 128);
int boundPort(int fd);
// Connects to `address`, retrying refused connections until `deadline` (the server may not be
// up yet). The returned socket is blocking, with TCP_NODELAY set.
Fd connectTcp(const SocketAddress& address, const Deadline& deadline);
// Accepts one connection, or returns nullopt when `deadline` passes first.
std::optional<Fd> acceptBefore(int listenFd, const Deadline& deadline);
// The peer's "ip:port", for logs.
std::string peerName(int fd);
// The local IP address this host uses to reach `remoteHost`: the address to advertise to peers.
std::string localAddressToward(const std::string& remoteHost);

void setNonBlocking(int fd);
void setNoDelay(int fd);
void setBufferSizes(int fd, int bytes);

// Blocking full writes and reads on a blocking or non-blocking socket, bounded by `deadline`.
void writeFully(int fd, const void* data, size_t bytes, const Deadline& deadline);
void readFully(int fd, void* data, size_t bytes, const Deadline& deadline);

}  // namespace gradsync
