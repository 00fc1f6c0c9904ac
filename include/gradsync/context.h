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

#include <chrono>
#include <memory>

#include "gradsync/bootstrap.h"
#include "gradsync/store.h"
#include "gradsync/transport.h"

namespace gradsync {

class ElasticSession;
class HangWatch;

struct InitOptions {
  // Values that override the environment (unset fields are taken from it).
  BootstrapFlags bootstrap;
  // Link emulation and message limits of the TCP transport; the timeout is the bootstrap's.
  TransportOptions link;
};

// What shrink() (below) takes.
struct ShrinkOptions {
  // How long the survivors wait for one another (see shrink()).
  std::chrono::milliseconds window{2'000};
  // The fewest ranks the group goes on with.
  int minSize = 1;
};

// One process's membership in a job. Not copyable; movable. Destroying it closes the
// transport, then the store (and, on rank 0, the store server): rank 0's Context should be
// destroyed last, after a barrier, so that no other rank still needs the store.
// Accessors are thread-safe; the transport is (see transport.h); the store is.
class Context {
 public:
  // `generation`: how many shrink()s made this group (0 for init's).
  Context(BootstrapConfig config, std::unique_ptr<TcpStoreServer> server,
          std::shared_ptr<Store> store, std::unique_ptr<Transport> transport, int generation = 0);
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  ~Context();

  int rank() const { return config_.rank; }
  int size() const { return config_.size; }
  int localRank() const { return config_.localRank; }
  int localSize() const { return config_.localSize; }
  const BootstrapConfig& config() const { return config_; }
  int generation() const { return generation_; }

  // The connected transport and the job's store; owned by the Context.
  Transport& transport() { return *transport_; }
  Store& store() { return *store_; }

 private:
  BootstrapConfig config_;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0 of a job of several only
  std::shared_ptr<Store> store_;
  std::unique_ptr<Transport> transport_;
  // An elastic round's watch of a hung member (ElasticSession): it aborts transport_, so it is
  // declared after it (destroyed first). Null elsewhere.
  std::unique_ptr<HangWatch> watch_;
  int generation_ = 0;

  friend Context shrink(Context context, const ShrinkOptions& options);
  friend class ElasticSession;
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

// ULFM's revoke, agree and shrink in one call, for a program of one's own (elastic.h's rounds
// are the other way to go on without a lost rank). After a collective failed because a rank was
// lost (PeerLostError, TimeoutError), every survivor calls shrink() with its Context: the old
// transport is aborted first (revoke: every rank still waiting in a collective fails at once),
// the survivors agree through the job's store on who is left, and each gets a Context of the
// survivors alone: ranks 0..K-1 in the order of their old ranks, a new transport connected as
// init connects one (shared memory within a host, TCP between), the same store. State the ranks
// held together (a model, an optimizer) is theirs to re-synchronise, e.g. by broadcast from the
// new rank 0.
//
// The group closes once every rank of the old one arrived, or `window` after this rank arrived:
// a survivor that arrives later than that (its failure came more than `window` after the first
// one's) is left out with PeerLostError, and may rejoin only through a new job or an elastic
// session. Blocking: `window` plus the new group's connection, bounded by the bootstrap timeout.
// Throws PeerLostError when the store is gone (rank 0 served it and was lost: a job that must
// survive its rank 0 needs an external store, as `gradsync launch --elastic` serves), and
// ConfigError when fewer than `minSize` ranks are left.
Context shrink(Context context, const ShrinkOptions& options = {});

}  // namespace gradsync
