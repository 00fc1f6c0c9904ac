// Open MPI transport: the Transport contract over MPI point-to-point, for jobs started by
// `mpirun`. Rank and size are MPI's (MPI_COMM_WORLD); mpirun does the rendezvous, so no store,
// master address or job token is involved.
//
// Built only with GRADSYNC_WITH_MPI (target gradsync_mpi). Threading: one progress thread per
// transport makes every MPI call after setup, so the application needs no MPI thread support of
// its own; MPI is initialised on first use (at least MPI_THREAD_SERIALIZED) and finalised at
// process exit, unless the application initialised it, in which case it also finalises it.
// docs/cluster.md shows how to launch; docs/architecture.md describes the wire format.
#pragma once

#include <memory>

#include "gradsync/transport.h"

namespace gradsync {

struct MpiTransportOptions {
  // timeout and maxMessageBytes apply; bandwidth and latency emulation are TCP-only and are
  // refused here (shape the real network instead, e.g. with scripts/netem).
  TransportOptions transport;
  // Use only ranks 0..size-1 of MPI_COMM_WORLD (0 = all of them); the other processes get
  // nullptr. Lets one mpirun launch run test suites of several world sizes.
  int size = 0;
};

// Connects this process to the others through a private duplicate of MPI_COMM_WORLD.
// Collective: every process of MPI_COMM_WORLD must call it, in the same order. Throws
// ConfigError (bad options, MPI without thread support) or SystemError (an MPI call failed).
std::unique_ptr<Transport> connectMpiTransport(const MpiTransportOptions& options);

// This process's rank in MPI_COMM_WORLD and its size (initialising MPI).
int mpiWorldRank();
int mpiWorldSize();

}  // namespace gradsync
