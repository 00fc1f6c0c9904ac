// How a server (parameter_server.cc, embedding_server.cc) waits for a worker's next request: the
// worker may be busy elsewhere for a while (evaluating, saving its part of a checkpoint), so one
// transport timeout is not a lost worker; kIdleTimeouts in a row are.
#pragma once

#include "gradsync/error.h"
#include "gradsync/transport.h"

namespace gradsync {

inline constexpr int kIdleTimeouts = 10;

// Blocks until `work` completes; rethrows its failure, or the TimeoutError of the last of
// kIdleTimeouts transport timeouts.
inline void waitPatiently(Work& work) {
  for (int i = 1;; ++i) {
    try {
      work.wait();
      return;
    } catch (const TimeoutError&) {
      if (i == kIdleTimeouts) throw;
    }
  }
}

}  // namespace gradsync
