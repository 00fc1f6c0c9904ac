#include "transport/checks.h"

#include <fmt/format.h>

#include "gradsync/error.h"

namespace gradsync {

void checkPeerRank(int rank, int size, int peer) {
  if (peer < 0 || peer >= size) {
    throw ConfigError(fmt::format("invalid peer rank {} (world size {})", peer, size),
                      {.rank = rank});
  }
}

void checkMessageSize(int rank, int peer, size_t bytes, size_t limit) {
  if (bytes > limit) {
    throw ConfigError(
        fmt::format("message of {} bytes exceeds the transport limit of {}", bytes, limit),
        {.rank = rank, .peer = peer, .operation = "send"});
  }
}

}  // namespace gradsync
