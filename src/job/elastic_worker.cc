#include "job/elastic_worker.h"

#include <unistd.h>

#include <fmt/format.h>

#include "gradsync/error.h"

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

TcpTransportOptions roundMeshOptions(const BootstrapConfig& config, const TransportOptions& link,
                                     int64_t round) {
  TcpTransportOptions tcp = tcpOptionsFor(config, link);
  tcp.keyPrefix = fmt::format("elastic/{}/tcp", round);  // each round's mesh apart
  return tcp;
}

ElasticMembership joinRound(ElasticRendezvous& rendezvous, int64_t round, const ElasticWorker& me,
                            const BootstrapConfig& config, bool servesStore) {
  try {
    return rendezvous.join(round, me);
  } catch (const PeerLostError& e) {
    if (!e.context().operation.starts_with("store") || servesStore) throw;
    ErrorContext context = e.context();
    context.hint = config.externalStore
                       ? "the launcher serving it (gradsync launch --elastic) is gone"
                       : "worker 0 served it (no gradsync launch --elastic): an elastic job "
                         "outlives any worker only with a store that outlives them";
    throw PeerLostError(e.detail(), context);
  }
}

}  // namespace gradsync
