// TCP transport: one authenticated connection per pair of ranks; one event-loop thread per
// transport owns every socket (application threads only enqueue work and wait). See
// docs/threading.md for the model and docs/architecture.md for the wire format.
#pragma once

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gradsync/store.h"
#include "gradsync/transport.h"

namespace gradsync {

struct TcpTransportOptions {
  TransportOptions transport;
  // Every process of a job must present the same id and token, or its connections are refused.
  std::string jobId = "gradsync";
  std::string jobToken;
  // Address to listen on and to advertise to peers ("" = 127.0.0.1).
  std::string host;
  // Store key prefix, so several transports can rendezvous through one store.
  std::string keyPrefix = "tcp";
  // SO_SNDBUF/SO_RCVBUF per connection.
  int socketBufferBytes = 4 << 20;
  // TLS 1.3 on every connection (`--tls`): encrypts and authenticates all traffic between
  // ranks, for clusters on untrusted networks. A rank with TLS and one without refuse each
  // other. No certificates to provide: the job token authenticates each TLS session
  // (docs/rendezvous.md, "Threat model"). The rendezvous store's traffic stays plaintext.
  bool tls = false;
  // By rank: which peers to connect (empty: every rank). The routed transport leaves out the
  // ranks it reaches through shared memory; every rank must leave out the same pairs, and
  // sending to a rank left out is a ConfigError.
  std::vector<bool> peers;
  // Called once, on the loop thread and without its locks, when the transport breaks (a lost
  // peer, a bad frame, abort()): the routed transport aborts its other transports then.
  std::function<void(std::exception_ptr)> onBroken;
};

// Connects `rank` of `size` to all others through `store`. Blocks until the mesh is complete
// (bounded by options.transport.timeout). Every rank of the job must call it.
std::unique_ptr<Transport> connectTcpTransport(Store& store, int rank, int size,
                                               const TcpTransportOptions& options);

struct BootstrapConfig;  // gradsync/bootstrap.h

// The options of a resolved job's TCP transport: its id, token, TLS and timeout, `link`'s
// emulation and limits, and this host's address toward the store's (127.0.0.1 for a job of one).
TcpTransportOptions tcpOptionsFor(const BootstrapConfig& config, const TransportOptions& link);

}  // namespace gradsync
