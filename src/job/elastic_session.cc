// ElasticSession (include/gradsync/elastic.h): the job's store, the rounds of
// job/elastic_rendezvous.h, and a TCP mesh per round.
#include "gradsync/elastic.h"

#include <fmt/format.h>

#include "common/env.h"
#include "common/logging.h"
#include "gradsync/error.h"
#include "gradsync/topology.h"
#include "job/agreement.h"
#include "job/elastic_worker.h"
#include "job/hang_watch.h"
#include "rendezvous/tcp_store.h"

namespace gradsync {
namespace {

ElasticRange rangeOf(const std::string& text, const BootstrapConfig& config) {
  if (!text.empty()) return parseElasticRange(text);
  return {.min = 1, .max = config.size};
}

}  // namespace

struct ElasticSession::State {
  State(const BootstrapConfig& config, const TransportOptions& link, ElasticRange range,
        int restartCount, std::chrono::milliseconds hangTimeout)
      : config(config),
        link(link),
        hangTimeout(hangTimeout),
        store(connectStore(config, &server)),
        rendezvous(*store,
                   {.range = range, .initialWorkers = config.size, .timeout = config.timeout}),
        me(thisWorker(config.rank, restartCount,
                      encodeSettings({{"elastic range", range.describe()}}))) {
    next = rendezvous.nextRound();
  }

  const BootstrapConfig config;
  const TransportOptions link;
  const std::chrono::milliseconds hangTimeout;
  std::unique_ptr<TcpStoreServer> server;  // worker 0's, when no launcher serves the store
  std::shared_ptr<Store> store;
  ElasticRendezvous rendezvous;
  ElasticWorker me;
  int64_t next = 0;  // the round to join next
  int64_t current = -1;
};

ElasticSession::ElasticSession(const ElasticSessionOptions& options) {
  Env env = Env::fromProcess();
  setLogLevel(env.logLevel);
  BootstrapConfig config = resolveBootstrap(options.init.bootstrap, env);
  state_ = std::make_unique<State>(config, options.init.link, rangeOf(options.range, config),
                                   env.restartCount, options.hangTimeout);
}

ElasticSession::~ElasticSession() = default;

std::optional<Context> ElasticSession::joinNextRound(int64_t progress) {
  State& s = *state_;
  s.me.progress = progress;
  const ElasticMembership m = joinRound(s.rendezvous, s.next, s.me, s.config, s.server != nullptr);
  if (m.jobFinished) return std::nullopt;
  s.me.lastRound = m.round;
  s.me.lastRank = m.rank;
  s.current = m.round;
  s.next = m.round + 1;
  std::unique_ptr<Transport> transport = connectRoundMesh(*s.store, m, s.config, s.link);
  BootstrapConfig config = s.config;
  config.rank = m.rank;
  config.size = m.size();
  if (const Topology* topology = transport->topology()) {
    config.localRank = topology->localRank(m.rank);
    config.localSize = topology->localSize(m.rank);
  }
  config.source = fmt::format("elastic round {}", m.round);
  GS_LOG(kInfo, "{}: rank {} of {} in elastic round {}", s.me.name, m.rank, m.size(), m.round);
  Context context(config, nullptr, s.store, std::move(transport));
  // Moving the Context keeps the Transport where it is, so the watch's reference stays good.
  context.watch_ = watchRound(*s.store, m, s.hangTimeout, context.transport());
  return context;
}

int64_t ElasticSession::round() const {
  return state_->current;
}

int64_t ElasticSession::waiting() {
  return state_->rendezvous.waiting(state_->current);
}

void ElasticSession::heartbeat() {
  state_->rendezvous.heartbeat();
}

void ElasticSession::finish() {
  state_->rendezvous.finish();
}

const std::string& ElasticSession::name() const {
  return state_->me.name;
}

}  // namespace gradsync
