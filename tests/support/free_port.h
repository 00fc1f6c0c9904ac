// A TCP port on 127.0.0.1 that the kernel just handed out (and that is free again once this
// returns), so that tests running in parallel do not collide on a fixed port.
#pragma once

#include "common/socket.h"

namespace gradsync::testing {

inline int freePort() {
  Fd fd = listenTcp("127.0.0.1", 0);
  return boundPort(fd.get());
}

}  // namespace gradsync::testing
