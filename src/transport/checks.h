// What every transport does alike: argument checks, so that a bad call fails with the same
// ConfigError whichever transport runs it, and the notice a breaking transport leaves its peers.
#pragma once

#include <cstddef>
#include <exception>
#include <string>

namespace gradsync {

// Throws ConfigError unless 0 <= peer < size (rank: the caller's, for the message).
void checkPeerRank(int rank, int size, int peer);

// Throws ConfigError if a message of `bytes` exceeds the transport's `limit`.
void checkMessageSize(int rank, int peer, size_t bytes, size_t limit);

// What a transport breaking with `error` tells its peers (and logs): why, without the rank
// decoration their own error adds, and the rank where the failure began (failureOrigin, else
// `self`), so that a peer of a peer still names the rank that was lost.
struct AbortNotice {
  std::string reason;
  int origin = -1;
};
AbortNotice abortNoticeOf(const std::exception_ptr& error, int self);

}  // namespace gradsync
