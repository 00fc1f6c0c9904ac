// The TCP rendezvous store: rank 0 runs a TcpStoreServer, every rank (rank 0 included) talks to
// it through a client Store. Wire format and handshake: rendezvous/tcp_store_wire.h and
// docs/rendezvous.md.
//
// Every connection starts with a handshake carrying the job id and the job token; the server
// refuses (logs, answers with the reason, closes) connections of another job, with a wrong token,
// or that send garbage, truncated or oversized frames, and keeps serving everyone else.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "common/socket.h"
#include "gradsync/store.h"

namespace gradsync {

struct TcpStoreOptions {
  // Both must equal the server's for a connection to be accepted (≤ 256 bytes each).
  std::string jobId = "gradsync";
  std::string jobToken;
  // Client: how long to retry connecting (the server may start later than the client).
  std::chrono::milliseconds connectTimeout{60'000};
  // Client: bound on set() and add(), which take no timeout of their own.
  std::chrono::milliseconds requestTimeout{60'000};
  // Server: a connection that has not completed its handshake by then is closed.
  std::chrono::milliseconds handshakeTimeout{10'000};
};

// Serves one store on host:port from one background thread that owns every socket and all the
// state (a poll(2) loop): gets and waits on missing keys are parked per key and answered when a
// set arrives, so no client can block the loop.
// The constructor binds and listens (throws SystemError if it cannot) and starts the thread; the
// destructor stops it and closes every connection (clients blocked on it get PeerLostError).
// Not copyable or movable; port() and address() are thread-safe.
class TcpStoreServer {
 public:
  // Port 0 picks a free port; port() tells which.
  TcpStoreServer(const SocketAddress& address, const TcpStoreOptions& options);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const;
  // The bound address (the given host, the actual port): what clients connect to.
  SocketAddress address() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Connects to the server at `server`, retrying until options.connectTimeout, and completes the
// handshake before returning (throws TimeoutError if no server answers, ProtocolError if it
// refuses, e.g. "store refused the handshake: wrong job token").
// The returned Store is thread-safe: each call is a blocking request/response on a connection
// taken from a small pool (one per concurrently calling thread, reused afterwards), so a get()
// blocked in one thread never delays a set() from another. get() and wait() are bounded by their
// timeout; on expiry the connection is dropped (a late reply cannot confuse the next request) and
// TimeoutError names the missing keys and the server address.
std::shared_ptr<Store> makeTcpStoreClient(const SocketAddress& server,
                                          const TcpStoreOptions& options);

}  // namespace gradsync
