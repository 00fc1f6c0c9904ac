#include "transport/tcp/tls_link.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace gradsync::tcp {
namespace {

// RFC 5705/8446 exporter label of the channel binding (auth::Exchange::channel).
constexpr char kExporterLabel[] = "EXPORTER-gradsync-mesh";
constexpr size_t kExporterBytes = 32;
// Header and payload of small frames go out as one record, not two (TLS's largest record).
constexpr size_t kCoalesceBytes = 16 * 1024;
constexpr size_t kReadAheadBytes = 256 * 1024;

// Drains OpenSSL's error queue (per thread) into one line.
std::string sslErrors() {
  std::string text;
  while (unsigned long code = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(code, line, sizeof line);
    if (!text.empty()) text += "; ";
    text += line;
  }
  return text.empty() ? "unknown TLS error" : text;
}

[[noreturn]] void internal(const char* what) {
  throw InternalError(fmt::format("OpenSSL failed to {}: {}", what, sslErrors()));
}

struct KeyAndCert {
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~KeyAndCert() {
    EVP_PKEY_free(key);
    X509_free(cert);
  }
};

// An ephemeral P-256 key and a self-signed certificate for it, valid for a day: nobody checks
// it (the token does the authenticating), TLS 1.3 only needs the server to present one.
void makeKeyAndCert(KeyAndCert& out) {
  out.key = EVP_EC_gen("P-256");
  if (out.key == nullptr) internal("generate a P-256 key");
  out.cert = X509_new();
  if (out.cert == nullptr) internal("allocate a certificate");
  uint8_t serial[8];
  if (RAND_bytes(serial, sizeof serial) != 1) internal("draw a serial number");
  BIGNUM* number = BN_bin2bn(serial, sizeof serial, nullptr);
  bool ok = number != nullptr && X509_set_version(out.cert, 2) == 1 &&
            BN_to_ASN1_INTEGER(number, X509_get_serialNumber(out.cert)) != nullptr &&
            X509_gmtime_adj(X509_getm_notBefore(out.cert), -60) != nullptr &&
            X509_gmtime_adj(X509_getm_notAfter(out.cert), 24 * 3600) != nullptr &&
            X509_set_pubkey(out.cert, out.key) == 1;
  BN_free(number);
  X509_NAME* name = X509_get_subject_name(out.cert);
  ok = ok &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                  reinterpret_cast<const unsigned char*>("gradsync"), -1, -1,
                                  0) == 1 &&
       X509_set_issuer_name(out.cert, name) == 1 && X509_sign(out.cert, out.key, EVP_sha256()) > 0;
  if (!ok) internal("make a self-signed certificate");
}

void waitFor(int fd, short events, const Deadline& deadline, const ErrorContext& where) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.pollMillis());
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) throw SystemError("poll failed: " + errnoText(errno), where);
    if (rc == 0 && deadline.expired()) {
      throw TimeoutError(fmt::format("timed out during the TLS handshake with {}", peerName(fd)),
                         where);
    }
  }
}

// A plaintext gradsync peer's handshake messages all start with "GS" (frame.h's magics).
bool isPlaintext(const uint8_t* first, size_t count) {
  return count >= 1 && first[0] == 'G' && (count == 1 || first[1] == 'S');
}

bool startsInPlaintext(int fd) {
  uint8_t first[2] = {};
  ssize_t n = ::recv(fd, first, sizeof first, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 && isPlaintext(first, static_cast<size_t>(n));
}

// Records the first bytes OpenSSL reads from the socket during a handshake, so that a failed
// one can tell a plaintext peer from a broken one. (Peeking before each read would race: the
// answer may already be there when OpenSSL reads right after sending its ClientHello.)
class FirstBytesRead {
 public:
  explicit FirstBytesRead(SSL* ssl) : bio_(SSL_get_rbio(ssl)) {
    BIO_set_callback_arg(bio_, reinterpret_cast<char*>(this));
    BIO_set_callback_ex(bio_, &FirstBytesRead::onIo);
  }
  ~FirstBytesRead() { BIO_set_callback_ex(bio_, nullptr); }  // the data path pays nothing
  FirstBytesRead(const FirstBytesRead&) = delete;
  FirstBytesRead& operator=(const FirstBytesRead&) = delete;
  bool plaintext() const { return isPlaintext(bytes_, count_); }

 private:
  static long onIo(BIO* bio, int oper, const char* data, size_t, int, long, int ret,
                   size_t* processed) {
    if (oper == (BIO_CB_READ | BIO_CB_RETURN) && ret > 0 && processed != nullptr) {
      auto* self = reinterpret_cast<FirstBytesRead*>(BIO_get_callback_arg(bio));
      for (size_t i = 0; i < *processed && self->count_ < sizeof self->bytes_; ++i) {
        self->bytes_[self->count_++] = static_cast<uint8_t>(data[i]);
      }
    }
    return ret;
  }

  BIO* bio_;
  uint8_t bytes_[2] = {};
  size_t count_ = 0;
};

// Blocks SIGPIPE in this thread while alive, and swallows one raised meanwhile, so that a TLS
// write in an application thread (the handshake) fails with EPIPE instead of killing us.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    wasPending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlocked() {
    sigset_t pending;
    sigpending(&pending);
    if (!wasPending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      sigtimedwait(&pipe_, nullptr, &zero);
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
  bool wasPending_ = false;
};

class TlsLink final : public Link {
 public:
  TlsLink(Fd fd, SSL* ssl) : Link(std::move(fd)), ssl_(ssl) {}
  ~TlsLink() override { SSL_free(ssl_); }  // before ~Link closes the socket under it

  bool secure() const override { return true; }
  std::string channelBinding() const override;
  void sendAll(const void* data, size_t bytes, const Deadline& deadline) override;
  void recvAll(void* data, size_t bytes, const Deadline& deadline) override;
  IoResult writeSome(const iovec* iov, int count, size_t limit) override;
  IoResult readSome(void* data, size_t bytes) override;
  bool hasBufferedInput() const override { return SSL_has_pending(ssl_) == 1; }
  bool writeInProgress() const override { return pendingWrite_ > 0; }
  void writeLastWords(const void* data, size_t bytes) override;

 private:
  IoResult failure(int rc) const;
  [[noreturn]] void raise(const IoResult& result, const char* what) const;
  IoResult write(const void* data, size_t bytes);

  SSL* ssl_;
  size_t pendingWrite_ = 0;       // length of the write that would have blocked, to retry as is
  std::vector<uint8_t> staging_;  // header and payload of a small frame, as one record
};

std::string TlsLink::channelBinding() const {
  std::string value(kExporterBytes, '\0');
  if (SSL_export_keying_material(ssl_, reinterpret_cast<unsigned char*>(value.data()), value.size(),
                                 kExporterLabel, sizeof kExporterLabel - 1, nullptr, 0, 0) != 1) {
    internal("export keying material");
  }
  return value;
}

// SSL_get_error needs the call's return value and an error queue that held nothing else, hence
// ERR_clear_error before every call.
IoResult TlsLink::failure(int rc) const {
  switch (SSL_get_error(ssl_, rc)) {
    case SSL_ERROR_WANT_READ:
    case SSL_ERROR_WANT_WRITE:
      return {.status = IoResult::Status::kWouldBlock};
    case SSL_ERROR_ZERO_RETURN:  // close_notify, or (SSL_OP_IGNORE_UNEXPECTED_EOF) a plain EOF
      return {.status = IoResult::Status::kClosed};
    case SSL_ERROR_SYSCALL:
      return {.status = IoResult::Status::kFailed,
              .error = errno != 0 ? errnoText(errno) : "connection closed"};
    default:
      return {.status = IoResult::Status::kFailed, .error = "TLS: " + sslErrors()};
  }
}

void TlsLink::raise(const IoResult& result, const char* what) const {
  if (result.status == IoResult::Status::kClosed) {
    throw PeerLostError(fmt::format("connection closed by {} while {}", peerName(fd()), what));
  }
  if (result.error.starts_with("TLS")) throw ProtocolError(result.error + " while " + what);
  throw PeerLostError(fmt::format("{} while {} {}", result.error, what, peerName(fd())));
}

IoResult TlsLink::write(const void* data, size_t bytes) {
  ERR_clear_error();
  errno = 0;
  size_t written = 0;
  int rc = SSL_write_ex(ssl_, data, bytes, &written);
  if (rc == 1) {
    pendingWrite_ = 0;
    return {.bytes = written};
  }
  IoResult result = failure(rc);
  if (result.status == IoResult::Status::kWouldBlock) pendingWrite_ = bytes;
  return result;
}

IoResult TlsLink::writeSome(const iovec* iov, int count, size_t limit) {
  size_t total = 0;
  for (int i = 0; i < count; ++i) total += iov[i].iov_len;
  size_t length = pendingWrite_ > 0 ? pendingWrite_ : std::min(limit, total);
  if (count == 0 || length == 0) return {};
  if (iov[0].iov_len >= length) return write(iov[0].iov_base, length);
  // Spans header and payload: one record for the start of both (SSL_MODE_ACCEPT_MOVING_WRITE_
  // BUFFER lets a retry come from the same bytes at another address).
  if (pendingWrite_ == 0) length = std::min(length, kCoalesceBytes);
  staging_.resize(length);
  size_t copied = 0;
  for (int i = 0; i < count && copied < length; ++i) {
    size_t part = std::min(iov[i].iov_len, length - copied);
    std::memcpy(staging_.data() + copied, iov[i].iov_base, part);
    copied += part;
  }
  return write(staging_.data(), length);
}

IoResult TlsLink::readSome(void* data, size_t bytes) {
  ERR_clear_error();
  errno = 0;
  size_t read = 0;
  int rc = SSL_read_ex(ssl_, data, bytes, &read);
  if (rc == 1) return {.bytes = read};
  return failure(rc);
}

void TlsLink::sendAll(const void* data, size_t bytes, const Deadline& deadline) {
  SigpipeBlocked guard;
  const auto* p = static_cast<const uint8_t*>(data);
  while (bytes > 0) {
    IoResult result = write(p, bytes);
    if (result.status == IoResult::Status::kOk) {
      p += result.bytes;
      bytes -= result.bytes;
    } else if (result.status == IoResult::Status::kWouldBlock) {
      waitFor(fd(), SSL_want_read(ssl_) ? POLLIN : POLLOUT, deadline, {});
    } else {
      raise(result, "writing to");
    }
  }
}

void TlsLink::recvAll(void* data, size_t bytes, const Deadline& deadline) {
  SigpipeBlocked guard;  // a read can write too (an alert)
  auto* p = static_cast<uint8_t*>(data);
  while (bytes > 0) {
    IoResult result = readSome(p, bytes);
    if (result.status == IoResult::Status::kOk) {
      p += result.bytes;
      bytes -= result.bytes;
    } else if (result.status == IoResult::Status::kWouldBlock) {
      waitFor(fd(), SSL_want_write(ssl_) ? POLLOUT : POLLIN, deadline, {});
    } else {
      raise(result, "reading from");
    }
  }
}

void TlsLink::writeLastWords(const void* data, size_t bytes) {
  if (pendingWrite_ == 0 && bytes > 0) (void)write(data, bytes);
  ERR_clear_error();
  SSL_shutdown(ssl_);  // close_notify, best effort on the non-blocking socket
  ::shutdown(fd(), SHUT_WR);
}

std::unique_ptr<Link> handshake(Fd fd, const TlsContext& context, bool connector,
                                const Deadline& deadline, const ErrorContext& where) {
  setNonBlocking(fd.get());
  SSL* ssl = SSL_new(context.get());
  if (ssl == nullptr) internal("create a TLS session");
  if (SSL_set_fd(ssl, fd.get()) != 1) {
    SSL_free(ssl);
    internal("attach a TLS session to its socket");
  }
  connector ? SSL_set_connect_state(ssl) : SSL_set_accept_state(ssl);
  auto link = std::make_unique<TlsLink>(std::move(fd), ssl);  // frees ssl from here on
  FirstBytesRead first(ssl);
  SigpipeBlocked guard;
  for (;;) {
    ERR_clear_error();
    errno = 0;
    int rc = SSL_do_handshake(ssl);
    if (rc == 1) return link;
    int error = SSL_get_error(ssl, rc);
    // A plaintext gradsync rank answers a ClientHello with "GS...".
    if (connector && first.plaintext()) {
      throw ProtocolError(
          fmt::format("rank {} answered without TLS but this rank uses --tls", where.peer), where);
    }
    if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
      std::string why = error == SSL_ERROR_SYSCALL
                            ? (errno != 0 ? errnoText(errno) : "the peer closed the connection")
                            : sslErrors();
      throw ProtocolError(
          fmt::format("TLS handshake with {} failed: {}", peerName(link->fd()), why), where);
    }
    waitFor(link->fd(), error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline, where);
  }
}

}  // namespace

TlsContext::TlsContext() {
  KeyAndCert identity;
  makeKeyAndCert(identity);
  ctx_ = SSL_CTX_new(TLS_method());
  if (ctx_ == nullptr) internal("create a TLS context");
  // TLS 1.3 only: its exporter is bound to the whole handshake, and it has no renegotiation.
  // AES-128-GCM first: the fastest with AES-NI, and strong enough for a training job.
  bool ok = SSL_CTX_set_min_proto_version(ctx_, TLS1_3_VERSION) == 1 &&
            SSL_CTX_set_ciphersuites(ctx_,
                                     "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                                     "TLS_CHACHA20_POLY1305_SHA256") == 1 &&
            SSL_CTX_use_certificate(ctx_, identity.cert) == 1 &&
            SSL_CTX_use_PrivateKey(ctx_, identity.key) == 1 &&
            SSL_CTX_set_num_tickets(ctx_, 0) == 1;  // no resumption: one session per link
  if (!ok) {
    SSL_CTX_free(ctx_);
    internal("configure the TLS context");
  }
  // Not verified against a CA: the token proof bound to the exporter authenticates the peer.
  SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
  SSL_CTX_set_mode(ctx_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Read ahead into a buffer of several records: one recv per batch of records instead of two
  // (record header, then body) per 16 KiB record. What this leaves buffered is what
  // Link::hasBufferedInput reports (SSL_has_pending counts it).
  SSL_CTX_set_read_ahead(ctx_, 1);
  SSL_CTX_set_default_read_buffer_len(ctx_, kReadAheadBytes);
  // An EOF without close_notify reads as an orderly end: a truncation cannot go unnoticed, as
  // the transport accepts an end of stream only after the peer's (encrypted) goodbye frame.
  SSL_CTX_set_options(ctx_, SSL_OP_IGNORE_UNEXPECTED_EOF);
}

TlsContext::~TlsContext() {
  SSL_CTX_free(ctx_);
}

std::unique_ptr<Link> connectTls(Fd fd, const TlsContext& context, const Deadline& deadline,
                                 const ErrorContext& where) {
  return handshake(std::move(fd), context, true, deadline, where);
}

std::unique_ptr<Link> acceptTls(Fd fd, const TlsContext& context, const Deadline& deadline,
                                const ErrorContext& where) {
  return handshake(std::move(fd), context, false, deadline, where);
}

bool peersInPlaintext(int fd, const Deadline& deadline) {
  waitFor(fd, POLLIN, deadline, {});
  return startsInPlaintext(fd);
}

bool looksLikeTls(const uint8_t* data, size_t bytes) {
  return bytes >= 2 && data[0] == 0x16 && data[1] == 0x03;
}

}  // namespace gradsync::tcp
