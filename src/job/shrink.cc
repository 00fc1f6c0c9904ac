// gradsync::shrink (include/gradsync/context.h): the survivors of a failed group agree through
// the job's store on who is left, and connect a group of their own.
//
// Keys under "shrink/G/", G being the generation the new group will have:
//   arrivals     a counter: each survivor's add() gives it its arrival slot, 1, 2, ...
//   arrival/S    the old rank of the survivor that took slot S
//   closed       a counter: the survivor whose add() returns 1 closes the group
//   members      K, written by the closer: the survivors of slots 1..K are the new group
//   mesh/...     the new group's rendezvous (host identities, shared memory, TCP)
// The store orders the adds, so every survivor reads the same K and the same slots, and one that
// took a slot above K knows it arrived after the group closed.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/context.h"
#include "gradsync/error.h"
#include "gradsync/tcp.h"
#include "job/host_transport.h"
#include "rendezvous/tcp_store.h"

namespace gradsync {
namespace {

using namespace std::chrono_literals;

std::string keyOf(int generation, const std::string& what) {
  return fmt::format("shrink/{}/{}", generation, what);
}

// Waits until every rank of the old group arrived, another survivor closed the group, or the
// window ended; then closes it unless another survivor did first. Returns K.
int64_t closeGroup(Store& store, int generation, int oldSize,
                   std::chrono::steady_clock::time_point windowEnd,
                   std::chrono::milliseconds timeout) {
  const std::string arrivals = keyOf(generation, "arrivals");
  const std::string closed = keyOf(generation, "closed");
  const std::string members = keyOf(generation, "members");
  while (std::chrono::steady_clock::now() < windowEnd && store.add(arrivals, 0) < oldSize &&
         store.add(closed, 0) == 0) {
    std::this_thread::sleep_for(10ms);
  }
  if (store.add(closed, 1) == 1) store.setString(members, std::to_string(store.add(arrivals, 0)));
  return std::stoll(store.getString(members, timeout));
}

// The survivors' old ranks, ascending: their new ranks are the indices.
std::vector<int> survivorsOf(Store& store, int generation, int64_t members,
                             std::chrono::milliseconds timeout) {
  std::vector<int> oldRanks;
  for (int64_t slot = 1; slot <= members; ++slot) {
    oldRanks.push_back(
        std::stoi(store.getString(keyOf(generation, fmt::format("arrival/{}", slot)), timeout)));
  }
  std::sort(oldRanks.begin(), oldRanks.end());
  return oldRanks;
}

// A store call failed: the process serving the store is gone (or unreachable).
[[noreturn]] void storeLost(const Error& e, const BootstrapConfig& old) {
  throw PeerLostError(
      fmt::format("rank {} cannot shrink its group: {}", old.rank, e.detail()),
      {.rank = old.rank,
       .operation = "shrink",
       .hint = old.externalStore ? "the launcher serving the store is gone"
                                 : "rank 0 served the store: a job that must survive its rank 0 "
                                   "needs an external store (gradsync launch --elastic)"});
}

}  // namespace

Context shrink(Context context, const ShrinkOptions& options) {
  const BootstrapConfig old = context.config();
  if (options.minSize < 1 || options.window.count() < 0) {
    throw ConfigError(fmt::format("shrink: minSize {} and window {} ms (need >= 1 and >= 0)",
                                  options.minSize, options.window.count()),
                      {.rank = old.rank, .operation = "shrink"});
  }
  const TransportOptions link = context.transport().options();
  // Revoke: any rank still inside a collective of the old group fails at once.
  context.transport().abort(std::make_exception_ptr(
      PeerLostError(fmt::format("rank {} revoked the group to shrink it", old.rank),
                    {.rank = old.rank, .operation = "shrink"})));
  context.transport_.reset();
  const int generation = context.generation() + 1;
  Store& store = *context.store_;
  const auto windowEnd = std::chrono::steady_clock::now() + options.window;
  std::vector<int> survivors;
  int64_t slot = 0;
  try {
    slot = store.add(keyOf(generation, "arrivals"), 1);
    store.setString(keyOf(generation, fmt::format("arrival/{}", slot)), std::to_string(old.rank));
    const int64_t members = closeGroup(store, generation, old.size, windowEnd, old.timeout);
    if (slot > members) {
      throw PeerLostError(
          fmt::format("rank {} reached shrink after the {} survivors had closed their group",
                      old.rank, members),
          {.rank = old.rank,
           .operation = "shrink",
           .hint = "its failure came more than the window after theirs; raise "
                   "ShrinkOptions::window, or rejoin through an elastic session"});
    }
    survivors = survivorsOf(store, generation, members, old.timeout);
  } catch (const Error& e) {
    if (e.context().operation == "shrink") throw;
    storeLost(e, old);
  }
  if (static_cast<int>(survivors.size()) < options.minSize) {
    throw ConfigError(fmt::format("{} rank(s) survived, fewer than the minimum of {}",
                                  survivors.size(), options.minSize),
                      {.rank = old.rank, .operation = "shrink"});
  }
  BootstrapConfig config = old;
  config.rank =
      static_cast<int>(std::find(survivors.begin(), survivors.end(), old.rank) - survivors.begin());
  config.size = static_cast<int>(survivors.size());
  HostTransportOptions hostOptions{.sharedMemory = old.sharedMemory,
                                   .ranksPerHost = old.ranksPerHost};
  hostOptions.tcp = tcpOptionsFor(config, link);
  hostOptions.tcp.keyPrefix = keyOf(generation, "mesh");
  std::unique_ptr<Transport> transport =
      connectHostTransport(store, config.rank, config.size, hostOptions);
  if (const Topology* topology = transport->topology()) {
    config.localRank = topology->localRank(config.rank);
    config.localSize = topology->localSize(config.rank);
  }
  GS_LOG(kInfo, "rank {} of {} is rank {} of the {} survivors (generation {})", old.rank, old.size,
         config.rank, config.size, generation);
  return Context(config, std::move(context.server_), std::move(context.store_),
                 std::move(transport), generation);
}

}  // namespace gradsync
