#include "transports.h"

#include <memory>

#include "common/check.h"
#include "gradsync/loopback.h"
#include "gradsync/store.h"
#include "gradsync/tcp.h"
#include "rank_threads.h"

namespace gradsync::testing {

std::string kindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kLoopback:
      return "loopback";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kTcpTls:
      return "tls";
    case TransportKind::kMpi:
      return "mpi";
  }
  return "?";
}

void runWithTransports(TransportKind kind, int size, const std::function<void(Transport&)>& body,
                       TransportOptions options) {
  if (kind == TransportKind::kLoopback) {
    LoopbackFabric fabric(size, options);
    runRankThreads(size, [&](int rank) {
      std::unique_ptr<Transport> transport = fabric.connect(rank);
      body(*transport);
    });
    return;
  }
  GS_CHECK(kind == TransportKind::kTcp || kind == TransportKind::kTcpTls);  // kMpi: elsewhere
  std::shared_ptr<Store> store = makeInMemoryStore();
  TcpTransportOptions tcp;
  tcp.transport = options;
  tcp.jobToken = "test-token";
  tcp.tls = kind == TransportKind::kTcpTls;
  runRankThreads(size, [&](int rank) {
    std::unique_ptr<Transport> transport = connectTcpTransport(*store, rank, size, tcp);
    body(*transport);
  });
}

}  // namespace gradsync::testing
