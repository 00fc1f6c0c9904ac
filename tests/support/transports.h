// Runs a test body on `size` rank threads, each with a connected transport of one kind; the
// conformance and collective suites are parameterised over the kinds.
#pragma once

#include <functional>
#include <string>

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

}  // namespace gradsync::testing
