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

// Where each block starts, in bytes, and checks that the blocks fit `available` bytes.
// `unit` is the element size the counts are in (for the messages).
std::vector<size_t> offsetsOf(std::span<const size_t> bytes, int size, size_t available,
                              const char* which, size_t unit) {
  if (bytes.size() != static_cast<size_t>(size)) {
    throw ConfigError(fmt::format("alltoallv needs one {} count per rank: got {} for {} ranks",
                                  which, bytes.size(), size));
  }
  std::vector<size_t> offsets(bytes.size());
  std::exclusive_scan(bytes.begin(), bytes.end(), offsets.begin(), size_t{0});
  const size_t total = offsets.back() + bytes.back();
  if (total > available) {
    throw ConfigError(
        fmt::format("alltoallv: {} counts add up to {} elements but the buffer "
                    "holds {}",
                    which, total / unit, available / unit));
  }
  return offsets;
}

std::vector<size_t> countsInBytes(std::span<const size_t> counts, size_t unit) {
  std::vector<size_t> bytes(counts.begin(), counts.end());
  for (size_t& b : bytes) b *= unit;
  return bytes;
}

std::vector<WorkPtr> startBlocks(Transport& transport, std::span<const uint8_t> send,
                                 std::span<const size_t> sendBytes, std::span<uint8_t> recv,
                                 std::span<const size_t> recvBytes,
                                 const CollectiveOptions& options, size_t unit) {
  const int size = transport.size();
  const int rank = transport.rank();
  const std::vector<size_t> sendAt = offsetsOf(sendBytes, size, send.size(), "send", unit);
  const std::vector<size_t> recvAt = offsetsOf(recvBytes, size, recv.size(), "receive", unit);
  if (sendBytes[rank] != recvBytes[rank]) {
    throw ConfigError(fmt::format("alltoallv: rank {} sends itself {} elements but expects {}",
                                  rank, sendBytes[rank] / unit, recvBytes[rank] / unit));
  }
  // One message per pair and direction, so a block whose size the two ranks disagree on always
  // fails the receive (ProtocolError) instead of leaving a stray message on the stream.
  std::vector<WorkPtr> works;
  for (int step = 1; step < size; ++step) {
    const int from = (rank - step + size) % size;
    works.push_back(transport.recv(from, options.tag, recv.data() + recvAt[from], recvBytes[from]));
  }
  for (int step = 1; step < size; ++step) {
    const int to = (rank + step) % size;
    works.push_back(transport.send(to, options.tag, send.data() + sendAt[to], sendBytes[to]));
  }
  std::copy_n(send.data() + sendAt[rank], sendBytes[rank], recv.data() + recvAt[rank]);
  return works;
}

std::span<const uint8_t> spanBytes(std::span<const float> s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size_bytes()};
}

std::span<uint8_t> spanBytes(std::span<float> s) {
  return {reinterpret_cast<uint8_t*>(s.data()), s.size_bytes()};
}

}  // namespace

std::vector<WorkPtr> startAlltoallv(Transport& transport, std::span<const float> send,
                                    std::span<const size_t> sendCounts, std::span<float> recv,
                                    std::span<const size_t> recvCounts,
                                    const CollectiveOptions& options) {
  return startBlocks(transport, spanBytes(send), countsInBytes(sendCounts, sizeof(float)),
                     spanBytes(recv), countsInBytes(recvCounts, sizeof(float)), options,
                     sizeof(float));
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

void alltoallvBytes(Transport& transport, std::span<const uint8_t> send,
                    std::span<const size_t> sendBytes, std::span<uint8_t> recv,
                    std::span<const size_t> recvBytes, const CollectiveOptions& options) {
  std::vector<WorkPtr> works;
  detail::runCollective("alltoall", transport, [&] {
    works = detail::startBlocks(transport, send, sendBytes, recv, recvBytes, options, 1);
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
