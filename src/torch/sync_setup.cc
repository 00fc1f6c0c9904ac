#include "torch/sync_setup.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"
#include "ps/parameter_server.h"
#include "ps/served_units.h"
#include "sync/strategy.h"

namespace gradsync {
namespace {

// `workers`: the training ranks (what the parameter-server placement counts).
EngineOptions engineOptions(const TrainOptions& options, int workers) {
  const SyncStrategy strategy = SyncStrategy::parse(options.sync);
  return {
      .schedule = ScheduleSpec::parse(options.schedule),
      .compression = options.compression,
      .update = UpdateRule::sgd(options.lr, options.momentum),
      .seed = options.seed,
      .sharded = strategy.kind == SyncStrategy::Kind::kSharded,
      .servers = psOptionsFor(strategy, options.strategy, workers, options.lr, options.momentum)};
}

}  // namespace

SyncSetup syncSetup(const TrainOptions& options, Transport& workers, Transport& all) {
  return {.engine = engineOptions(options, workers.size()),
          .psTransport = &all,
          .local = SyncStrategy::parse(options.sync).kind == SyncStrategy::Kind::kLocalSgd};
}

void validateSyncOptions(const TrainOptions& options) {
  SyncStrategy strategy = SyncStrategy::parse(options.sync);
  checkCompressionApplies(strategy, options.compression, options.sync);
  Engine::validate(engineOptions(options, 1), describeModel(options.model));
}

void serveParameters(Transport& transport, const TrainOptions& options) {
  const int servers = options.strategy.servers;
  const int workers = transport.size() - servers;
  std::optional<PsOptions> ps = psOptionsFor(SyncStrategy::parse(options.sync), options.strategy,
                                             workers, options.lr, options.momentum);
  std::vector<ServedUnit> units = servedUnits(
      describeModel(options.model), ScheduleSpec::parse(options.schedule), options.compression);
  const int index = transport.rank() - workers;
  GS_LOG(kInfo, "parameter server {} (rank {}) serves {} of {} units for {} workers", index,
         transport.rank(), (units.size() + servers - 1 - index) / servers, units.size(), workers);
  ParameterServer server(transport, ps->placement, index, std::move(units), ps->server);
  server.wait();
}

}  // namespace gradsync
