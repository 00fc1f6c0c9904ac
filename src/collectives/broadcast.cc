// Broadcast (pipelined chain) and barrier (dissemination).
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "collectives/guard.h"
#include "common/allocator.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

// Ranks form a chain starting at the root; each forwards every segment as soon as it arrives,
// so a large broadcast takes about one transfer time plus (n-2) segment times.
void chain(Transport& transport, std::span<float> data, int root,
           const CollectiveOptions& options) {
  int n = transport.size();
  int position = (transport.rank() - root + n) % n;
  int next = position + 1 < n ? (transport.rank() + 1) % n : -1;
  int previous = (transport.rank() + n - 1) % n;
  auto* bytes = reinterpret_cast<uint8_t*>(data.data());
  size_t total = data.size_bytes();
  size_t segment = std::max<size_t>(sizeof(float), options.segmentBytes);
  std::vector<WorkPtr> recvs;
  std::vector<WorkPtr> sends;
  for (size_t offset = 0; position > 0 && offset < total; offset += segment) {
    recvs.push_back(
        transport.recv(previous, options.tag, bytes + offset, std::min(segment, total - offset)));
  }
  size_t k = 0;
  for (size_t offset = 0; offset < total; offset += segment, ++k) {
    if (position > 0) recvs[k]->wait();
    if (next >= 0) {
      sends.push_back(
          transport.send(next, options.tag, bytes + offset, std::min(segment, total - offset)));
    }
  }
  for (auto& work : sends) work->wait();
}

// Round k: send to rank + 2^k, receive from rank - 2^k. After ceil(log2 n) rounds every rank
// has (transitively) heard from every other one.
void dissemination(Transport& transport, const CollectiveOptions& options) {
  int n = transport.size();
  int rank = transport.rank();
  for (int distance = 1; distance < n; distance *= 2) {
    WorkPtr send = transport.send((rank + distance) % n, options.tag, nullptr, 0);
    WorkPtr recv = transport.recv((rank - distance + n) % n, options.tag, nullptr, 0);
    recv->wait();
    send->wait();
  }
}

}  // namespace

void broadcast(Transport& transport, std::span<float> data, int root,
               const CollectiveOptions& options) {
  int n = transport.size();
  if (root < 0 || root >= n) {
    throw ConfigError(fmt::format("broadcast root {} is not a rank (world size {})", root, n),
                      {.rank = transport.rank(), .operation = "broadcast"});
  }
  if (n == 1 || data.empty()) return;
  detail::runCollective("broadcast", transport, [&] { chain(transport, data, root, options); });
}

// Broadcast only copies, so packing bytes into floats is exact.
std::vector<uint8_t> broadcastBytes(Transport& transport, std::span<const uint8_t> bytes, int root,
                                    const CollectiveOptions& options) {
  const bool mine = transport.rank() == root;
  uint64_t length = mine ? bytes.size() : 0;
  float lengthWords[2];
  std::memcpy(lengthWords, &length, sizeof length);
  broadcast(transport, lengthWords, root, options);
  std::memcpy(&length, lengthWords, sizeof length);
  // Received in place, as whole floats (new's storage is aligned for them), into storage
  // advised to huge pages: a model's state is tens of MB, which 4 KiB page faults slow to a
  // third of a GB/s on first touch here (common/allocator.h).
  const size_t padded = (length + sizeof(float) - 1) / sizeof(float) * sizeof(float);
  std::vector<uint8_t> out;
  out.reserve(padded);
  adviseHugePages(out.data(), padded);
  out.resize(padded);
  if (mine && length > 0) std::memcpy(out.data(), bytes.data(), length);
  broadcast(transport,
            std::span<float>(reinterpret_cast<float*>(out.data()), padded / sizeof(float)), root,
            options);
  out.resize(length);
  return out;
}

void barrier(Transport& transport, const CollectiveOptions& options) {
  detail::runCollective("barrier", transport, [&] { dissemination(transport, options); });
}

}  // namespace gradsync
