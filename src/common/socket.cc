#include "common/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {
namespace {

[[noreturn]] void throwErrno(const std::string& what) {
  int err = errno;
  throw SystemError(fmt::format("{} failed: {}", what, errnoText(err)));
}

// Resolves host:port to the first IPv4/IPv6 address.
sockaddr_storage resolve(const std::string& host, int port, socklen_t* length) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    throw ConfigError(fmt::format("cannot resolve host '{}': {}", host, gai_strerror(rc)),
                      {.hint = "check MASTER_ADDR / --master-addr"});
  }
  sockaddr_storage storage{};
  std::memcpy(&storage, result->ai_addr, result->ai_addrlen);
  *length = result->ai_addrlen;
  ::freeaddrinfo(result);
  return storage;
}

// Waits until `fd` is ready for `events`; throws TimeoutError past the deadline.
void waitReady(int fd, short events, const Deadline& deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.pollMillis());
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throwErrno("poll");
    if (rc == 0 && deadline.expired()) {
      throw TimeoutError(fmt::format("timed out during {} with {}", what, peerName(fd)));
    }
  }
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int Fd::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int Deadline::pollMillis() const {
  auto left = remaining();
  if (left <= std::chrono::nanoseconds::zero()) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(left).count() + 1;
  return ms > 60'000 ? 60'000 : static_cast<int>(ms);
}

std::chrono::nanoseconds Deadline::remaining() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(at_ -
                                                              std::chrono::steady_clock::now());
}

std::string SocketAddress::toString() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

SocketAddress SocketAddress::parse(const std::string& text, const std::string& what) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) {
    throw ConfigError(fmt::format("invalid address '{}' for {}", text, what),
                      {.hint = "expected host:port"});
  }
  SocketAddress address;
  address.host = text.substr(0, colon);
  if (address.host.front() == '[' && address.host.back() == ']') {
    address.host = address.host.substr(1, address.host.size() - 2);
  }
  char* end = nullptr;
  long port = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) {
    throw ConfigError(fmt::format("invalid port in '{}' for {}", text, what),
                      {.hint = "ports are 1..65535"});
  }
  address.port = static_cast<int>(port);
  return address;
}

std::string errnoText(int err) {
  char buffer[256];
  return fmt::format("{} (errno {})", strerror_r(err, buffer, sizeof buffer), err);
}

Fd listenTcp(const std::string& host, int port, int backlog) {
  socklen_t length = 0;
  sockaddr_storage address = resolve(host, port, &length);
  Fd fd(::socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throwErrno("socket");
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
    throwErrno(fmt::format("bind to {}:{}", host, port));
  }
  if (::listen(fd.get(), backlog) != 0) throwErrno("listen");
  return fd;
}

int boundPort(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throwErrno("getsockname");
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
  }
  return ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
}

Fd connectTcp(const SocketAddress& address, const Deadline& deadline) {
  socklen_t length = 0;
  sockaddr_storage target = resolve(address.host, address.port, &length);
  auto backoff = std::chrono::milliseconds(10);
  for (;;) {
    Fd fd(::socket(target.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) throwErrno("socket");
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&target), length) == 0) {
      setNoDelay(fd.get());
      return fd;
    }
    int err = errno;
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH && err != ENETUNREACH) {
      throw SystemError(
          fmt::format("connect to {} failed: {}", address.toString(), errnoText(err)));
    }
    if (deadline.expired()) {
      throw TimeoutError(
          fmt::format("could not connect to {}: {}", address.toString(), errnoText(err)),
          {.hint = "is the process that should listen there running, and is the address right?"});
    }
    std::this_thread::sleep_for(std::min(
        backoff, std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

std::optional<Fd> acceptBefore(int listenFd, const Deadline& deadline) {
  for (;;) {
    pollfd p{listenFd, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.pollMillis());
    if (rc < 0 && errno != EINTR) throwErrno("poll");
    if (rc > 0) {
      Fd fd(::accept4(listenFd, nullptr, nullptr, SOCK_CLOEXEC));
      if (fd.valid()) {
        setNoDelay(fd.get());
        return fd;
      }
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) throwErrno("accept");
    }
    if (deadline.expired()) return std::nullopt;
  }
}

std::string peerName(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return "unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (address.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&address);
    ::inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&address);
    ::inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  }
  return SocketAddress{host, port}.toString();
}

std::string localAddressToward(const std::string& remoteHost) {
  socklen_t length = 0;
  sockaddr_storage target = resolve(remoteHost, 9, &length);
  // Connecting a UDP socket sends nothing; it only makes the kernel choose the route.
  Fd fd(::socket(target.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid() || ::connect(fd.get(), reinterpret_cast<sockaddr*>(&target), length) != 0) {
    return "127.0.0.1";
  }
  sockaddr_storage local{};
  socklen_t localLength = sizeof local;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &localLength);
  char host[INET6_ADDRSTRLEN] = {};
  if (local.ss_family == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr, host, sizeof host);
  } else {
    ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&local)->sin_addr, host, sizeof host);
  }
  return host;
}

void setNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) throwErrno("fcntl(O_NONBLOCK)");
}

void setNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void setBufferSizes(int fd, int bytes) {
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

void writeFully(int fd, const void* data, size_t bytes, const Deadline& deadline) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      waitReady(fd, POLLOUT, deadline, "write");
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (errno == EPIPE || errno == ECONNRESET) {
      throw PeerLostError(fmt::format("connection to {} closed while writing", peerName(fd)));
    } else {
      throwErrno("send");
    }
  }
}

void readFully(int fd, void* data, size_t bytes, const Deadline& deadline) {
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    ssize_t n = ::recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n == 0) {
      throw PeerLostError(fmt::format("connection closed by {}", peerName(fd)));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      waitReady(fd, POLLIN, deadline, "read");
    } else if (errno == EINTR) {
      continue;
    } else if (errno == ECONNRESET) {
      throw PeerLostError(fmt::format("connection reset by {}", peerName(fd)));
    } else {
      throwErrno("recv");
    }
  }
}

}  // namespace gradsync
