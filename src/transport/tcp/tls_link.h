// TLS 1.3 (OpenSSL 3) for the mesh's connections (TcpTransportOptions::tls, `--tls`).
//
// No CA and no files: each transport makes an ephemeral P-256 key and a self-signed certificate
// in memory, and peers do not check certificates. Who is at the other end is proven instead by
// the job token's challenge-response (common/auth.h), run inside the TLS session and bound to it
// through the session's keying-material exporter (Link::channelBinding): a relay that terminates
// TLS with each side separately sees two sessions, two exporter values, and proofs that fail.
// What TLS adds is confidentiality and integrity of everything after the TCP connect.
//
// The connecting rank is the TLS client, the accepting rank the server. A rank with TLS and one
// without recognise each other by their first bytes (a TLS record starts with 0x16, a gradsync
// handshake message with "GS") and refuse with an error that says so.
#pragma once

#include <memory>

#include "gradsync/error.h"
#include "transport/tcp/link.h"

struct ssl_ctx_st;

namespace gradsync::tcp {

// The SSL_CTX with this process's key and certificate. Immutable after construction, so shared
// by every connection of one transport; OpenSSL makes its use from several threads safe.
class TlsContext {
 public:
  // Generates the key and certificate (a millisecond or so). Throws InternalError if OpenSSL
  // cannot.
  TlsContext();
  ~TlsContext();
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;
  ssl_ctx_st* get() const { return ctx_; }

 private:
  ssl_ctx_st* ctx_ = nullptr;
};

// Runs the TLS handshake over a freshly connected (connector) or accepted (acceptor) socket,
// blocking up to `deadline`, and returns the Link that then carries the stream. Throws
// TimeoutError for a silent peer, PeerLostError when it hangs up, and ProtocolError when the
// handshake fails, or (connector) when the peer answers in plaintext: it does not use TLS.
// Errors carry `where` (this rank, the peer's when known).
std::unique_ptr<Link> connectTls(Fd fd, const TlsContext& context, const Deadline& deadline,
                                 const ErrorContext& where);
std::unique_ptr<Link> acceptTls(Fd fd, const TlsContext& context, const Deadline& deadline,
                                const ErrorContext& where);

// Waits (up to `deadline`) for the first bytes of an accepted connection and, without consuming
// them, tells whether they are a plaintext gradsync handshake ("GS..."), not a TLS ClientHello.
bool peersInPlaintext(int fd, const Deadline& deadline);
// Whether the first bytes of a connection are a TLS handshake record (0x16 0x03).
bool looksLikeTls(const uint8_t* data, size_t bytes);

}  // namespace gradsync::tcp
