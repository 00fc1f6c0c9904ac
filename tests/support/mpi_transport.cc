#include "support/mpi_transport.h"

#include <memory>

#include "gradsync/mpi.h"

namespace gradsync::testing {

void runWithMpiTransport(int size, const std::function<void(Transport&)>& body,
                         TransportOptions options) {
  std::unique_ptr<Transport> transport = connectMpiTransport({.transport = options, .size = size});
  if (transport) body(*transport);
}

}  // namespace gradsync::testing
