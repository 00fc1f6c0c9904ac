// The job module: the Context of one process (DESIGN: "a Context is created and passed").
// What one rank of a job holds: its bootstrap configuration, the rendezvous store (and, on rank
// 0, the store server), and a connected transport.
#pragma once

#include <memory>

#include "gradsync/bootstrap.h"
#include "gradsync/tcp.h"
#include "gradsync/transport.h"
#include "rendezvous/tcp_store.h"

namespace gradsync {

struct RankContext {
  BootstrapConfig config;
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only
  std::shared_ptr<Store> store;
  std::unique_ptr<Transport> transport;
};

// Joins the job described by `config` over TCP with the given link emulation.
RankContext joinJob(const BootstrapConfig& config, const TransportOptions& link);

}  // namespace gradsync
