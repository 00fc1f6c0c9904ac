#include "torch/sync_setup.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "gradsync/error.h"
#include "ps/parameter_server.h"
#include "sync/strategy.h"

namespace gradsync {

EngineOptions engineOptions(const TrainOptions& options) {
  return {.schedule = ScheduleSpec::parse(options.schedule),
          .compression = options.compression,
          .update = UpdateRule::sgd(options.lr, options.momentum),
          .seed = options.seed,
          .sharded = SyncStrategy::parse(options.sync).kind == SyncStrategy::Kind::kSharded};
}

SyncSetup syncSetup(const TrainOptions& options, Transport& workers, Transport& all) {
  SyncStrategy strategy = SyncStrategy::parse(options.sync);
  std::optional<PsOptions> ps =
      psOptionsFor(strategy, options.strategy, workers.size(), options.lr, options.momentum);
  if (ps) {
    ps->compression = options.compression;
    ps->seed = options.seed;
  }
  return {.engine = engineOptions(options),
          .ps = ps,
          .psTransport = &all,
          .local = strategy.kind == SyncStrategy::Kind::kLocalSgd};
}

void validateSyncOptions(const TrainOptions& options) {
  SyncStrategy strategy = SyncStrategy::parse(options.sync);
  checkCompressionApplies(strategy, options.compression, options.sync);
  if (psOptionsFor(strategy, options.strategy, 1, options.lr, 0)) {
    servedUnits(describeModel(options.model), ScheduleSpec::parse(options.schedule),
                options.compression);
  } else {
    GradientEngine::validate(engineOptions(options), describeModel(options.model));
  }
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
