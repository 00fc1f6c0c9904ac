// The bootstrap flags of rank `rank` of a job of `size` whose store rank 0 serves on
// 127.0.0.1:`port`: what tests that run each rank as a thread with a Context of its own give
// gradsync::init or an ElasticSession (10 s timeout).
#pragma once

#include <string>

#include "gradsync/bootstrap.h"

namespace gradsync::testing {

inline BootstrapFlags localJobFlags(int rank, int size, int port, const std::string& token) {
  BootstrapFlags flags;
  flags.rank = rank;
  flags.worldSize = size;
  flags.masterAddr = "127.0.0.1";
  flags.masterPort = port;
  flags.jobToken = token;
  flags.timeout = "10s";
  return flags;
}

}  // namespace gradsync::testing
