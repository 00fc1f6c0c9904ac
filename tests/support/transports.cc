#include "transports.h"

#include <memory>
#include <numeric>

#include "common/check.h"
#include "gradsync/loopback.h"
#include "gradsync/store.h"
#include "gradsync/tcp.h"
#include "job/host_transport.h"
#include "rank_threads.h"
#include "transport/routed_transport.h"
#include "transport/shm/shm_transport.h"

namespace gradsync::testing {

std::string kindName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kLoopback:
      return "loopback";
    case TransportKind::kTcp:
      return "tcp";
    case TransportKind::kTcpTls:
      return "tls";
    case TransportKind::kShm:
      return "shm";
    case TransportKind::kShmCopy:
      return "shmcopy";
    case TransportKind::kRouted:
      return "routed";
    case TransportKind::kLoopbackHosts:
      return "loopbackhosts";
    case TransportKind::kMpi:
      return "mpi";
  }
  return "?";
}

void runWithTransports(TransportKind kind, int size, const std::function<void(Transport&)>& body,
                       TransportOptions options) {
  if (kind == TransportKind::kLoopback || kind == TransportKind::kLoopbackHosts) {
    LoopbackFabric fabric(size, options);
    runRankThreads(size, [&](int rank) {
      std::unique_ptr<Transport> transport = fabric.connect(rank);
      if (kind == TransportKind::kLoopbackHosts) {
        transport = withTopology(std::move(transport), Topology::uniform(size, 2));
      }
      body(*transport);
    });
    return;
  }
  std::shared_ptr<Store> store = makeInMemoryStore();
  if (kind == TransportKind::kShm || kind == TransportKind::kShmCopy) {
    ShmTransportOptions shm;
    shm.transport = options;
    if (kind == TransportKind::kShmCopy) shm.singleCopyMinBytes = 0;
    std::vector<int> everyone(size);
    std::iota(everyone.begin(), everyone.end(), 0);
    runRankThreads(size, [&](int rank) {
      std::unique_ptr<Transport> transport = connectShmTransport(*store, rank, size, everyone, shm);
      body(*transport);
    });
    return;
  }
  TcpTransportOptions tcp;
  tcp.transport = options;
  tcp.jobToken = "test-token";
  tcp.tls = kind == TransportKind::kTcpTls;
  if (kind == TransportKind::kRouted) {
    HostTransportOptions host{.tcp = tcp, .ranksPerHost = 2};
    runRankThreads(size, [&](int rank) {
      std::unique_ptr<Transport> transport = connectHostTransport(*store, rank, size, host);
      body(*transport);
    });
    return;
  }
  GS_CHECK(kind == TransportKind::kTcp || kind == TransportKind::kTcpTls);  // kMpi: elsewhere
  runRankThreads(size, [&](int rank) {
    std::unique_ptr<Transport> transport = connectTcpTransport(*store, rank, size, tcp);
    body(*transport);
  });
}

}  // namespace gradsync::testing
