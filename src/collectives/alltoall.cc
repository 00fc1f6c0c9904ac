// All-to-all: no ring here, every pair exchanges its block directly. Receives are posted before
// any send, so every payload lands in its place in `recv` (no copy on TCP); sends go out in the
// order r+1, r+2, ... so that at each moment the ranks mostly send to different peers.
#include "collectives/alltoall.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "collectives/guard.h"
#include "gradsync/error.h"

namespace gradsync::detail {
namespace {

// Where each block starts, in elements, and checks that the blocks fit `available`.
std::vector<size_t> offsetsOf(std::span<const size_t> counts, int size, size_t available,
                              const char* which) {
  if (counts.size() != static_cast<size_t>(size)) {
    throw ConfigError(fmt::format("alltoallv needs one {} count per rank: got {} for {} ranks",
                                  which, counts.size(), size));
  }
  std::vector<size_t> offsets(counts.size());
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), size_t{0});
  const size_t total = offsets.back() + counts.back();
  if (total > available) {
    throw ConfigError(
        fmt::format("alltoallv: {} counts add up to {} elements but the buffer "
                    "holds {}",
                    which, total, available));
  }
  return offsets;
}

}  // namespace

std::vector<WorkPtr> startAlltoallv(Transport& transport, std::span<const float> send,
                                    std::span<const size_t> sendCounts, std::span<float> recv,
                                    std::span<const size_t> recvCounts,
                                    const CollectiveOptions& options) {
  const int size = transport.size();
  const int rank = transport.rank();
  const std::vector<size_t> sendAt = offsetsOf(sendCounts, size, send.size(), "send");
  const std::vector<size_t> recvAt = offsetsOf(recvCounts, size, recv.size(), "receive");
  if (sendCounts[rank] != recvCounts[rank]) {
    throw ConfigError(fmt::format("alltoallv: rank {} sends itself {} elements but expects {}",
                                  rank, sendCounts[rank], recvCounts[rank]));
  }
  // One message per pair and direction, so a block whose size the two ranks disagree on always
  // fails the receive (ProtocolError) instead of leaving a stray message on the stream.
  std::vector<WorkPtr> works;
  for (int step = 1; step < size; ++step) {
    const int from = (rank - step + size) % size;
    works.push_back(transport.recv(from, options.tag, recv.data() + recvAt[from],
                                   recvCounts[from] * sizeof(float)));
  }
  for (int step = 1; step < size; ++step) {
    const int to = (rank + step) % size;
    works.push_back(
        transport.send(to, options.tag, send.data() + sendAt[to], sendCounts[to] * sizeof(float)));
  }
  std::copy_n(send.data() + sendAt[rank], sendCounts[rank], recv.data() + recvAt[rank]);
  return works;
}

void finishAlltoall(Transport& transport, const std::vector<WorkPtr>& works) {
  runCollective("alltoall", transport, [&] {
    for (const WorkPtr& work : works) work->wait();
  });
}

}  // namespace gradsync::detail

namespace gradsync {

void alltoallv(Transport& transport, std::span<const float> send,
               std::span<const size_t> sendCounts, std::span<float> recv,
               std::span<const size_t> recvCounts, const CollectiveOptions& options) {
  std::vector<WorkPtr> works;
  detail::runCollective("alltoall", transport, [&] {
    works = detail::startAlltoallv(transport, send, sendCounts, recv, recvCounts, options);
  });
  detail::finishAlltoall(transport, works);
}

void alltoall(Transport& transport, std::span<const float> send, std::span<float> recv,
              const CollectiveOptions& options) {
  const auto size = static_cast<size_t>(transport.size());
  if (send.size() != recv.size() || send.size() % size != 0) {
    throw ConfigError(fmt::format("alltoall: send ({}) and receive ({}) must hold {} equal blocks",
                                  send.size(), recv.size(), size));
  }
  const std::vector<size_t> counts(size, send.size() / size);
  alltoallv(transport, send, counts, recv, counts, options);
}

}  // namespace gradsync
