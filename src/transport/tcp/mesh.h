// Connects every pair of ranks with one authenticated TCP connection (a full mesh).
//
// Each rank listens on an ephemeral port and publishes "host:port" in the Store. Rank r then
// connects to every lower rank and accepts a connection from every higher rank. The handshake
// (frame.h) authenticates both sides on the job token without sending it: a Hello (rank, size,
// job id, a nonce), the acceptor's Challenge (its nonce and its HMAC proof), the connector's
// Proof, and an Ack (common/auth.h). A connection with a wrong job, token, rank, or garbage
// bytes is logged and closed, never trusted; the accepting rank keeps waiting for the real peer.
//
// With `tls`, each connection runs a TLS 1.3 handshake right after the TCP connect, and the
// authentication above runs inside it, bound to the TLS session (tls_link.h). A rank with TLS
// and one without refuse each other: the connecting side fails at once, saying TLS is on one
// side only; the accepting side logs it and names it in its timeout error if the real peer never
// comes (an unauthenticated first byte must not be able to end a job).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/socket.h"
#include "gradsync/store.h"
#include "transport/tcp/link.h"

namespace gradsync::tcp {

struct MeshConfig {
  int rank = 0;
  int size = 1;
  std::string jobId;
  std::string jobToken;
  // Address to listen on and to advertise to peers (this host's address toward the others).
  std::string host = "127.0.0.1";
  // Store key prefix, so several meshes can share one store.
  std::string keyPrefix = "tcp";
  std::chrono::milliseconds timeout{60'000};
  // How long an accepted connection may take to send its Hello before it is dropped.
  std::chrono::milliseconds helloTimeout{5'000};
  // Every connection over TLS (TcpTransportOptions::tls).
  bool tls = false;
  // By rank: the peers to connect (TcpTransportOptions::peers); empty = every rank. Both ends
  // of a pair must agree.
  std::vector<bool> peers;

  bool wants(int peer) const { return peers.empty() || peers[peer]; }
};

// Blocks until the mesh is complete. Returns one authenticated Link per peer, indexed by rank
// (the own slot and those of peers left out are null); their sockets may be blocking or not. Throws
// TimeoutError naming the ranks that never connected, or ProtocolError when a peer refused this
// rank's handshake.
std::vector<std::unique_ptr<Link>> connectMesh(Store& store, const MeshConfig& config);

}  // namespace gradsync::tcp
