// Runs a test body on the MPI transport: one rank per process of an `mpirun` launch.
#pragma once

#include <functional>

#include "gradsync/transport.h"

namespace gradsync::testing {

// Connects ranks 0..size-1 of MPI_COMM_WORLD and runs body(transport) on each; the other
// processes only take part in the (collective) connect. Every process of the launch must call
// it with the same size, in the same order. The launch needs at least `size` processes.
void runWithMpiTransport(int size, const std::function<void(Transport&)>& body,
                         TransportOptions options = {});

}  // namespace gradsync::testing
