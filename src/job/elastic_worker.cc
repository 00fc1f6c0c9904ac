#include "job/elastic_worker.h"

#include <unistd.h>

#include <fmt/format.h>

#include "gradsync/error.h"
#include "gradsync/tcp.h"
#include "job/host_transport.h"

namespace gradsync {
namespace {

std::string hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

}  // namespace

ElasticWorker thisWorker(int slot, int restartCount, std::string settings) {
  ElasticWorker me;
  me.slot = slot;
  me.name = fmt::format("worker {}", slot);
  if (restartCount > 0) me.name += fmt::format(" (restart {})", restartCount);
  me.where = fmt::format("pid {} on {}", ::getpid(), hostName());
  me.settings = std::move(settings);
  return me;
}

std::unique_ptr<Transport> connectRoundMesh(Store& store, const ElasticMembership& m,
                                            const BootstrapConfig& config,
                                            const TransportOptions& link) {
  BootstrapConfig member = config;
  member.rank = m.rank;
  member.size = m.size();
  HostTransportOptions options{.sharedMemory = config.sharedMemory,
                               .ranksPerHost = config.ranksPerHost};
  options.tcp = tcpOptionsFor(member, link);
  options.tcp.keyPrefix = fmt::format("elastic/{}/mesh", m.round);  // each round's mesh apart
  return connectHostTransport(store, m.rank, m.size(), options);
}

namespace {

// A worker that trained in a round and can no longer reach the store to re-form is cut off from
// the job: the workers that reach it go on (docs/cluster.md, "Network partitions").
[[noreturn]] void throwCutOff(const Error& e, const ElasticWorker& me) {
  ErrorContext context = e.context();
  context.hint =
      "a network partition, or the store's host is down: the job goes on with the workers that "
      "reach the store; restart this one when the network is back (it comes in as a new member)";
  throw PeerLostError(fmt::format("{} cannot reach the job's store to re-form after round {}: it "
                                  "is cut off from the job and stops rather than train apart "
                                  "from it ({})",
                                  me.name, me.lastRound, e.detail()),
                      context);
}

bool fromStore(const Error& e) {
  return e.context().operation.starts_with("store");
}

}  // namespace

ElasticMembership joinRound(ElasticRendezvous& rendezvous, int64_t round, const ElasticWorker& me,
                            const BootstrapConfig& config, bool servesStore) {
  const bool wasMember = me.lastRound >= 0 && !servesStore;
  try {
    return rendezvous.join(round, me);
  } catch (const PeerLostError& e) {
    if (!fromStore(e) || servesStore) throw;
    if (wasMember) throwCutOff(e, me);
    ErrorContext context = e.context();
    context.hint = config.externalStore
                       ? "the launcher serving it (gradsync launch --elastic) is gone"
                       : "worker 0 served it (no gradsync launch --elastic): an elastic job "
                         "outlives any worker only with a store that outlives them";
    throw PeerLostError(e.detail(), context);
  } catch (const TimeoutError& e) {
    if (wasMember && fromStore(e)) throwCutOff(e, me);
    throw;
  } catch (const SystemError& e) {  // connecting to the store
    if (wasMember) throwCutOff(e, me);
    throw;
  }
}

}  // namespace gradsync
