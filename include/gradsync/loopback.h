// In-process transport: ranks are threads of one process (tests, the simulator, quick runs).
#pragma once

#include <memory>

#include "gradsync/transport.h"

namespace gradsync {

class LoopbackFabric {
 public:
  explicit LoopbackFabric(int size, TransportOptions options = {});
  ~LoopbackFabric();

  // The transport of `rank`; call once per rank. The fabric must outlive every transport.
  // Destroying a transport tells the other ranks that it is gone: their receives from it fail
  // with PeerLostError.
  std::unique_ptr<Transport> connect(int rank);

  struct State;  // shared with the transports; defined in loopback_transport.cc

 private:
  std::shared_ptr<State> state_;
};

}  // namespace gradsync
