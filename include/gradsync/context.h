// gradsync::init: joins this process to its job and returns its Context (rank, size, local
// rank and size, the rendezvous store and a connected transport). The entry point of a program
// written against gradsync; examples/01_allreduce shows it in twenty lines.
//
// Where the job comes from, in this order: InitOptions::bootstrap (the program's own flags),
// the launcher's environment (`gradsync launch`, torchrun: RANK/WORLD_SIZE/LOCAL_RANK/
// LOCAL_WORLD_SIZE/MASTER_ADDR/MASTER_PORT; mpirun: OMPI_COMM_WORLD_*), else one process alone.
// GRADSYNC_JOB_TOKEN must be the same secret in every process of a job of several
// (docs/rendezvous.md lists every variable).
#pragma once

#include <memory>

#include "gradsync/bootstrap.h"
#include "gradsync/store.h"
#include "gradsync/transport.h"

namespace gradsync {

struct InitOptions {
  // Values that override the environment (unset fields are taken from it).
  BootstrapFlags bootstrap;
  // Link emulation and message limits of the TCP transport; the timeout is the bootstrap's.
  TransportOptions link;
};

// One process's membership in a job. Not copyable; movable. Destroying it closes the
// transport, then the store (and, on rank 0, the store server): rank 0's Context should be
// destroyed last, after a barrier, so that no other rank still needs the store.
// Accessors are thread-safe; the transport is (see transport.h); the store is.
class Context {
 public:
  Context(BootstrapConfig config, std::unique_ptr<TcpStoreServer> server,
          std::shared_ptr<Store> store, std::unique_ptr<Transport> transport);
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  ~Context();

  int rank() const { return config_.rank; }
  int size() const { return config_.size; }
  int localRank() const { return config_.localRank; }
  int localSize() const { return config_.localSize; }
  const BootstrapConfig& config() const { return config_; }

  // The connected transport and the job's store; owned by the Context.
  Transport& transport() { return *transport_; }
  Store& store() { return *store_; }

 private:
  BootstrapConfig config_;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 of a job of several only
  std::shared_ptr<Store> store_;
  std::unique_ptr<Transport> transport_;
};

// Resolves the job from options and the process environment (GRADSYNC_LOG_LEVEL included),
// connects to the rendezvous store and then to every other rank over TCP. Blocking: returns once
// every rank of the job has called init, or throws after the bootstrap timeout (TimeoutError),
// on bad configuration (ConfigError naming the flag or variable) or on another job's token
// (ProtocolError). Every rank must call it once. Jobs started by mpirun can also use the MPI
// transport directly (gradsync/mpi.h).
Context init(const InitOptions& options = {});

// As init, from an already resolved configuration (no environment is read).
Context join(const BootstrapConfig& config, const TransportOptions& link = {});

}  // namespace gradsync
