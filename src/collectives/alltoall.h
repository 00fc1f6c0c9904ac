// The all-to-all behind alltoallv (gradsync/collectives.h) in two halves, so that a caller can
// start it, compute, and finish it later (the FC exchange starts its activations' all-to-all in
// forward and needs it in backward: sync/fc_exchange.h).
#pragma once

#include <span>
#include <vector>

#include "gradsync/collectives.h"

namespace gradsync::detail {

// Posts every receive into `recv`, then every send, and copies the own block; returns the
// pending operations. `send` and `recv` must stay valid until finishAlltoall returns. Throws
// ConfigError for counts that do not fit the buffers.
std::vector<WorkPtr> startAlltoallv(Transport& transport, std::span<const float> send,
                                    std::span<const size_t> sendCounts, std::span<float> recv,
                                    std::span<const size_t> recvCounts,
                                    const CollectiveOptions& options);
// Waits for what startAlltoallv posted (each bounded by the transport's timeout).
void finishAlltoall(Transport& transport, const std::vector<WorkPtr>& works);

}  // namespace gradsync::detail
