#include "transport/tcp/link.h"

#include <pthread.h>
#include <sys/socket.h>

#include <csignal>

#include <algorithm>
#include <cerrno>

namespace gradsync::tcp {
namespace {

bool wouldBlock(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR;
}

}  // namespace

void blockSigpipe() {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
}

void PlainLink::sendAll(const void* data, size_t bytes, const Deadline& deadline) {
  writeFully(fd_.get(), data, bytes, deadline);
}

void PlainLink::recvAll(void* data, size_t bytes, const Deadline& deadline) {
  readFully(fd_.get(), data, bytes, deadline);
}

IoResult PlainLink::writeSome(const iovec* iov, int count, size_t limit) {
  iovec trimmed[2];
  int used = 0;
  for (int i = 0; i < count && used < 2 && limit > 0; ++i) {
    trimmed[used] = iov[i];
    trimmed[used].iov_len = std::min(trimmed[used].iov_len, limit);
    limit -= trimmed[used].iov_len;
    ++used;
  }
  msghdr message{};
  message.msg_iov = trimmed;
  message.msg_iovlen = used;
  ssize_t n = ::sendmsg(fd_.get(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return {.bytes = static_cast<size_t>(n)};
  if (wouldBlock(errno)) return {.status = IoResult::Status::kWouldBlock};
  return {.status = IoResult::Status::kFailed, .error = errnoText(errno)};
}

IoResult PlainLink::readSome(void* data, size_t bytes) {
  ssize_t n = ::recv(fd_.get(), data, bytes, MSG_DONTWAIT);
  if (n > 0) return {.bytes = static_cast<size_t>(n)};
  if (n == 0) return {.status = IoResult::Status::kClosed};
  if (wouldBlock(errno)) return {.status = IoResult::Status::kWouldBlock};
  return {.status = IoResult::Status::kFailed, .error = errnoText(errno)};
}

void PlainLink::writeLastWords(const void* data, size_t bytes) {
  if (bytes > 0) {
    ssize_t ignored = ::send(fd_.get(), data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
  ::shutdown(fd_.get(), SHUT_WR);
}

}  // namespace gradsync::tcp
