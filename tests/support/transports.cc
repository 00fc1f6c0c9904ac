#include "transports.h"

#include <chrono>
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

double timeTransferToRank1(Transport& transport, const std::vector<uint8_t>& data,
                           std::vector<uint8_t>* received) {
  constexpr uint64_t kGoTag = 1, kDataTag = 2;
  uint8_t go = 1;
  if (transport.rank() == 0) {
    transport.recv(1, kGoTag, &go, 1)->wait();
    transport.send(1, kDataTag, data.data(), data.size())->wait();
    return 0;
  }
  received->assign(data.size(), 0);
  auto start = std::chrono::steady_clock::now();
  transport.send(0, kGoTag, &go, 1)->wait();
  transport.recv(0, kDataTag, received->data(), received->size())->wait();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace gradsync::testing
