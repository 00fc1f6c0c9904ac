// Argument checks every transport makes alike, so that a bad call fails with the same
// ConfigError whichever transport runs it.
#pragma once

#include <cstddef>

namespace gradsync {

// Throws ConfigError unless 0 <= peer < size (rank: the caller's, for the message).
void checkPeerRank(int rank, int size, int peer);

// Throws ConfigError if a message of `bytes` exceeds the transport's `limit`.
void checkMessageSize(int rank, int peer, size_t bytes, size_t limit);

}  // namespace gradsync
