// Bootstrap: who am I (rank), how many are we (size), and where is the rendezvous store.
//
// Values come from command-line flags, else from the launcher's environment (torchrun style
// RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, or Open MPI's OMPI_COMM_WORLD_*), else from defaults.
// docs/rendezvous.md lists every flag and variable.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "gradsync/address.h"
#include "gradsync/store.h"

namespace gradsync {

struct Env;
class TcpStoreServer;

// Command-line values; unset ones fall back to the environment, then to defaults.
struct BootstrapFlags {
  std::optional<int> rank;                // --rank
  std::optional<int> worldSize;           // --world-size
  std::optional<std::string> masterAddr;  // --master-addr (host name or IP of rank 0)
  std::optional<int> masterPort;          // --master-port
  std::optional<std::string> jobId;       // --job-id
  std::optional<std::string> jobToken;    // --job-token
  std::optional<std::string> timeout;     // --timeout: "30s", "500ms", "2.5" (seconds)
  // --insecure-no-token: allow size > 1 without a job token (trusted, isolated networks only).
  bool insecureNoToken = false;
  // --tls: TLS on every link between ranks (TcpTransportOptions::tls); on with GRADSYNC_TLS=1 too.
  bool tls = false;
};

inline constexpr int kDefaultMasterPort = 29500;

struct BootstrapConfig {
  int rank = 0;
  int size = 1;
  // This process's index among the job's processes on its host, and their number: from the
  // launcher (LOCAL_RANK/LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_*), else 0 and 1.
  int localRank = 0;
  int localSize = 1;
  SocketAddress master{"127.0.0.1", kDefaultMasterPort};
  std::string jobId = "gradsync";
  std::string jobToken;
  std::chrono::milliseconds timeout{60'000};
  // Encrypt the links between ranks (--tls or GRADSYNC_TLS): every rank of a job must agree.
  bool tls = false;
  // The store is served outside the job (GRADSYNC_EXTERNAL_STORE=1, set by `gradsync launch
  // --elastic`): rank 0 connects to it as the others do, and the store outlives any rank.
  bool externalStore = false;
  // Where rank and size came from: "flags", "env" (torchrun style), "mpirun" or "defaults".
  std::string source = "defaults";
};

// Resolves the configuration with precedence flags > env > defaults and validates it. Throws
// ConfigError with a one-line message naming the offending flag or variable and a hint.
// Pure: reads nothing but its arguments.
BootstrapConfig resolveBootstrap(const BootstrapFlags& flags, const Env& env);

// Connects this process to the job's rendezvous store. With size 1 there is nobody to meet:
// returns an in-memory store and starts no server. Otherwise rank 0 starts a TcpStoreServer on
// config.master and stores it in *serverOut (the caller keeps it alive as long as any rank may
// use the store; serverOut must not be null on rank 0), and every rank, rank 0 included, returns a
// client connected to it. With config.externalStore every rank, whatever the size, connects to
// the store served there and none serves it. Blocks up to config.timeout for the server to be
// reachable; throws TimeoutError, ProtocolError (refused handshake) or SystemError (port already in
// use).
std::shared_ptr<Store> connectStore(const BootstrapConfig& config,
                                    std::unique_ptr<TcpStoreServer>* serverOut);

}  // namespace gradsync
