#include "transport/shm/shm_layout.h"

#include <sys/uio.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/auth.h"
#include "common/check.h"
#include "common/logging.h"
#include "gradsync/error.h"

namespace gradsync::shm {
namespace {

std::string key(const ShmTransportOptions& options, const char* what, int rank) {
  return fmt::format("{}/{}/{}", options.keyPrefix, what, rank);
}

// FNV-1a: enough to tell one job's segments from another's (the store is already the job's).
uint64_t hashOf(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t randomWord() {
  auth::Nonce nonce = auth::freshNonce();
  uint64_t word = 0;
  std::memcpy(&word, nonce.data(), sizeof word);
  return word | 1;  // never 0, which an unreadable word would also read as
}

// Whether this process may read the owner's memory directly: reads the owner's probe word.
bool canReadDirectly(SegmentHeader& theirs) {
  uint64_t value = 0;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(theirs.probeAddress), sizeof value};
  return ::process_vm_readv(theirs.pid, &local, 1, &remote, 1, 0) ==
             static_cast<ssize_t>(sizeof value) &&
         value == theirs.probeValue;
}

void checkLocals(int rank, int size, const std::vector<int>& locals) {
  const bool sorted = std::is_sorted(locals.begin(), locals.end()) &&
                      std::adjacent_find(locals.begin(), locals.end()) == locals.end();
  const bool inRange =
      !locals.empty() && locals.front() >= 0 && locals.back() < size && locals.size() <= kMaxSlots;
  if (!sorted || !inRange || !std::binary_search(locals.begin(), locals.end(), rank)) {
    throw ConfigError(
        fmt::format("rank {}'s host ranks [{}] are not distinct ranks of {} in "
                    "ascending order including it (at most {})",
                    rank, fmt::join(locals, ", "), size, kMaxSlots));
  }
}

// Waits for `what` from every other local rank, naming those that never came.
void waitForPeers(Store& store, const ShmTransportOptions& options, int rank,
                  const std::vector<int>& locals, const char* what) {
  std::vector<std::string> keys;
  for (int peer : locals) {
    if (peer != rank) keys.push_back(key(options, what, peer));
  }
  try {
    store.wait(keys, options.transport.timeout);
  } catch (const TimeoutError& e) {
    throw TimeoutError(
        fmt::format("ranks of this host did not set up shared memory within {} ms: {}",
                    options.transport.timeout.count(), e.detail()),
        {.rank = rank, .operation = "shm connect", .hint = "did every rank of the host start?"});
  }
}

}  // namespace

uint32_t HostSegments::slotOf(int rank) const {
  auto it = std::lower_bound(locals.begin(), locals.end(), rank);
  GS_CHECK(it != locals.end() && *it == rank);
  return static_cast<uint32_t>(it - locals.begin());
}

bool HostSegments::peerCanRead(int peer) {
  return peers[slotOf(peer)].header().canRead[slotOf(own.header().rank)] != 0;
}

uint64_t defaultRingBytes(size_t ranks) {
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  if (ranks <= 8) return 4 * kMiB;
  const uint64_t share = 32 * kMiB / (ranks - 1);
  return std::max<uint64_t>(share / 4096 * 4096, kMiB / 4);
}

HostSegments connectSegments(Store& store, int rank, int size, const std::vector<int>& locals,
                             const ShmTransportOptions& options) {
  checkLocals(rank, size, locals);
  HostSegments segments;
  segments.locals = locals;
  const auto slots = static_cast<uint32_t>(locals.size());
  const uint64_t ringBytes = options.ringBytes > 0 ? options.ringBytes : defaultRingBytes(slots);
  const uint64_t jobHash = hashOf(options.jobId + "/" + options.keyPrefix);
  segments.own = Segment::create(rank, slots, ringBytes, jobHash);
  SegmentHeader& mine = segments.own.header();
  mine.probeValue = randomWord();
  mine.probeAddress = reinterpret_cast<uintptr_t>(&mine.probeValue);
  store.setString(key(options, "seg", rank), segments.own.name());

  waitForPeers(store, options, rank, locals, "seg");
  segments.peers.resize(slots);
  for (uint32_t slot = 0; slot < slots; ++slot) {
    const int peer = locals[slot];
    if (peer == rank) continue;
    const std::string name = store.getString(key(options, "seg", peer), options.transport.timeout);
    segments.peers[slot] = Segment::open(name, peer, slots, jobHash);
    mine.canRead[slot] = canReadDirectly(segments.peers[slot].header()) ? 1 : 0;
    if (mine.canRead[slot] == 0) {
      GS_LOG(kInfo,
             "rank {} cannot read rank {}'s memory directly: its large messages take two "
             "copies",
             rank, peer);
    }
  }
  store.setString(key(options, "mapped", rank), "1");
  waitForPeers(store, options, rank, locals, "mapped");
  segments.own.unlink();
  return segments;
}

}  // namespace gradsync::shm
