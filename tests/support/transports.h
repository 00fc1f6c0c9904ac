// Runs a test body on `size` rank threads, each with a connected transport of one kind; the
// conformance and collective suites are parameterised over the kinds.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gradsync/transport.h"

namespace gradsync::testing {

// kTcpTls: TCP with TcpTransportOptions::tls. kShm: shared memory, every rank on one host
// (kShmCopy: without single-copy sends, every message through the rings). kRouted: what
// gradsync::init connects, with two ranks per host (shared memory inside a host, TCP between
// hosts). kLoopbackHosts: loopback threads with a topology of two ranks per host (hierarchical
// algorithms, without sockets). kMpi runs through support/mpi_transport.h (only in binaries
// launched by mpirun).
enum class TransportKind {
  kLoopback,
  kTcp,
  kTcpTls,
  kShm,
  kShmCopy,
  kRouted,
  kLoopbackHosts,
  kMpi
};
std::string kindName(TransportKind kind);

// Connects one transport per rank thread (TCP over an in-memory store on 127.0.0.1), runs
// body(transport) on each, destroys the transports, and rethrows the first failure.
void runWithTransports(TransportKind kind, int size, const std::function<void(Transport&)>& body,
                       TransportOptions options = {});

// Sends `data` from rank 0 to rank 1 of `transport` and returns, on rank 1, the seconds from a
// point before rank 0 may start (rank 1 starts its clock, then tells rank 0 to go) to the last
// byte's arrival, so the interval covers the whole transfer however late rank 1's thread starts;
// `received` gets what arrived. Returns 0 on rank 0. Blocking.
double timeTransferToRank1(Transport& transport, const std::vector<uint8_t>& data,
                           std::vector<uint8_t>* received);

}  // namespace gradsync::testing
