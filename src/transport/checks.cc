#include "transport/checks.h"

#include <fmt/format.h>

#include "common/logging.h"
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

AbortNotice abortNoticeOf(const std::exception_ptr& error, int self) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    GS_LOG(kError, "{}", e.what());
    const int origin = failureOrigin(e);
    return {.reason = e.detail(), .origin = origin >= 0 ? origin : self};
  } catch (const std::exception& e) {
    GS_LOG(kError, "{}", e.what());
    return {.reason = e.what(), .origin = self};
  } catch (...) {
    return {.reason = "an unknown exception", .origin = self};
  }
}

}  // namespace gradsync
