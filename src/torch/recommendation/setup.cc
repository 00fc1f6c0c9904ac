// The options of a recommendation run (torch/recommendation/recommendation.h): parsing, checks, and
// what they amount to for the data, the embedding tables and the servers. Torch-free.
#include <fmt/format.h>

#include <functional>
#include <string_view>

#include "common/units.h"
#include "data/criteo_synthetic.h"
#include "data/criteo_tsv.h"
#include "gradsync/error.h"
#include "ps/embedding_links.h"
#include "torch/recommendation/recommendation.h"

namespace gradsync {
namespace {

// Calls fn(key, value) for each comma-separated key=value of `text`.
void forEachSetting(std::string_view text, std::string_view what, std::string_view form,
                    const std::function<void(std::string_view, std::string_view)>& fn) {
  for (const OptionItem& item : splitOptions(text)) {
    if (!item.hasValue) {
      throw ConfigError(fmt::format("{}: '{}' is not key=value", what, item.text),
                        {.hint = std::string(form)});
    }
    fn(item.key, item.value);
  }
}

}  // namespace

SimulatedClock parseSimulatedClock(const std::string& text) {
  constexpr std::string_view kForm = "step=60s,save=5min,load=5min,restart=2min";
  SimulatedClock clock;
  clock.enabled = true;
  forEachSetting(text, "--sim-clock", kForm, [&](std::string_view key, std::string_view value) {
    const double seconds = parseDurationSeconds(value, fmt::format("--sim-clock {}", key));
    if (key == "step") {
      clock.step = seconds;
    } else if (key == "save") {
      clock.save = seconds;
    } else if (key == "load") {
      clock.load = seconds;
    } else if (key == "restart") {
      clock.restart = seconds;
    } else {
      throw ConfigError(fmt::format("--sim-clock: unknown key '{}'", key),
                        {.hint = std::string(kForm)});
    }
  });
  if (!(clock.step > 0) || !(clock.save > 0) || clock.load < 0 || clock.restart < 0) {
    throw ConfigError("--sim-clock needs a positive step and save time, and no negative cost",
                      {.hint = std::string(kForm)});
  }
  return clock;
}

void parseCprKnobs(const std::string& text, CprKnobs& knobs, double& restartSeconds) {
  constexpr std::string_view kForm = "pls=0.02,mfu=0.125,ssu=0.01,k=8,restart=2s";
  forEachSetting(text, "--cpr", kForm, [&](std::string_view key, std::string_view value) {
    const std::string what = fmt::format("--cpr {}", key);
    if (key == "pls") {
      knobs.plsTarget = parseNumber(value, what);
    } else if (key == "mfu") {
      knobs.mfuFraction = parseNumber(value, what);
    } else if (key == "ssu") {
      knobs.ssuRate = parseNumber(value, what);
    } else if (key == "k") {
      knobs.partialPerFull = static_cast<int>(parseInteger(value, what));
    } else if (key == "restart") {
      restartSeconds = parseDurationSeconds(value, what);
    } else {
      throw ConfigError(fmt::format("--cpr: unknown key '{}'", key), {.hint = std::string(kForm)});
    }
  });
  // The planner checks the ranges; check them here too, so a bad value fails at startup.
  planRecovery(RecoveryMode::kCprMfu, {.mtbf = 1, .saveFull = 1, .shards = 1}, knobs);
}

EmbeddingSpec embeddingSpecOf(const RecommendationOptions& options) {
  EmbeddingSpec spec;
  spec.tableRows = criteoTableRows(options.embeddingRows);
  spec.tableRows.resize(static_cast<size_t>(options.tables));
  spec.dim = options.embeddingDim;
  spec.shards = std::max(1, options.train.strategy.servers);
  spec.seed = options.train.seed;
  return spec;
}

std::unique_ptr<ClickData> openClickLog(const RecommendationOptions& options, bool test) {
  const EmbeddingSpec spec = embeddingSpecOf(options);
  if (options.train.dataset == "criteo") {
    if (options.tables != kCriteoTables) {
      throw ConfigError("--dataset criteo has 26 categorical features: --tables must be 26");
    }
    return std::make_unique<CriteoTsvLog>(
        options.train.dataDir + (test ? "/test.txt" : "/train.txt"), spec.tableRows);
  }
  CriteoLikeOptions synthetic;
  synthetic.tableRows = spec.tableRows;
  synthetic.zipf = options.zipf;
  synthetic.trainSamples = options.trainSamples;
  synthetic.testSamples = options.testSamples;
  synthetic.seed = options.train.seed;
  return std::make_unique<CriteoLikeLog>(
      synthetic, test ? CriteoLikeLog::Split::kTest : CriteoLikeLog::Split::kTrain);
}

EmbeddingHostOptions embeddingHostOptions(const RecommendationOptions& options, int shard,
                                          int workers) {
  CprKnobs knobs;
  double restart = 2;
  parseCprKnobs(options.cpr, knobs, restart);
  EmbeddingHostOptions host;
  EmbeddingServerOptions& server = host.server;
  server.spec = embeddingSpecOf(options);
  server.shard = shard;
  server.workers = workers;
  server.rule = options.embeddingOptimizer == "sgd" ? UpdateRule::sgd(options.embeddingLr)
                                                    : UpdateRule::adagrad(options.embeddingLr);
  server.mode = parseRecoveryMode(options.recovery);
  server.mfuFraction = knobs.mfuFraction;
  server.ssuRate = knobs.ssuRate;
  server.checkpointRoot = options.train.checkpointDir;
  host.shards = server.spec.shards;
  if (!options.injectFailures.empty()) host.failures = parseFailureSpec(options.injectFailures);
  return host;
}

std::unique_ptr<EmbeddingConnector> connectEmbeddingServers(Store& store, TcpTransportOptions tcp,
                                                            int workers, int rank) {
  return std::make_unique<EmbeddingLinks>(store, std::move(tcp), workers, rank);
}

void serveEmbeddingShard(Store& store, TcpTransportOptions tcp,
                         const RecommendationOptions& options, int workers, int rank,
                         const std::string& refusal) {
  const int shard = rank - workers;
  EmbeddingLinks links(store, std::move(tcp), workers, rank);
  if (!refusal.empty()) {
    links.refuse(shard, refusal);
    throw ConfigError(fmt::format("startup check: {}", refusal), {.rank = rank});
  }
  serveEmbeddingProcess(links, embeddingHostOptions(options, shard, workers));
}

void validateRecommendationOptions(const RecommendationOptions& options) {
  const TrainOptions& t = options.train;
  if (t.dataset != "synthetic" && t.dataset != "criteo") {
    throw ConfigError(fmt::format("--model dlrm trains on click logs, not '{}'", t.dataset),
                      {.hint = "choose --dataset synthetic (Criteo-like) or criteo (--data-dir "
                               "with train.txt and test.txt)"});
  }
  if (t.batchSize == 0) throw ConfigError("--batch-size must be at least 1");
  if (t.epochs < 1 && t.steps <= 0) throw ConfigError("--epochs must be at least 1");
  if (!(t.lr > 0) || !(options.embeddingLr > 0)) {
    throw ConfigError("--lr and --embedding-lr must be positive");
  }
  if (t.momentum < 0 || t.momentum >= 1) throw ConfigError("--momentum must be in [0, 1)");
  if (options.embeddingOptimizer != "adagrad" && options.embeddingOptimizer != "sgd") {
    throw ConfigError(fmt::format("unknown --embedding-optimizer '{}'", options.embeddingOptimizer),
                      {.hint = "choose adagrad or sgd"});
  }
  if (options.tables < 1 || options.tables > kCriteoTables || options.embeddingRows < 1) {
    throw ConfigError("--tables must be 1..26 and --embedding-rows at least 1");
  }
  if (t.strategy.ps || t.sync != "ssgd") {
    throw ConfigError("--model dlrm keeps its embeddings on --servers K and its MLPs on the ring",
                      {.hint = "drop --ps and --sync"});
  }
  const RecoveryMode mode = parseRecoveryMode(options.recovery);
  embeddingHostOptions(options, 0, 1);  // parses --cpr and --inject-failures
  const bool servers = t.strategy.servers > 0;
  if (!options.injectFailures.empty()) {
    const FailureSpec failures = parseFailureSpec(options.injectFailures);
    if (!servers) throw ConfigError("--inject-failures fails embedding servers: add --servers K");
    if (t.checkpointDir.empty()) throw ConfigError("--inject-failures needs --checkpoint-dir");
    if (failures.duration != !options.simClock.empty()) {
      throw ConfigError(
          "--inject-failures: a real run fails servers by step (mtbf=STEPS); a duration "
          "(mtbf=8h) needs the simulated clock (--sim-clock)");
    }
  }
  if (!options.simClock.empty()) parseSimulatedClock(options.simClock);
  if (servers && isPartial(mode) && t.checkpointDir.empty()) {
    throw ConfigError(
        fmt::format("--recovery {} restores shards from --checkpoint-dir", options.recovery));
  }
  if (options.bottomMlp.empty() || options.bottomMlp.back() != options.embeddingDim) {
    throw ConfigError("the bottom MLP's last width must be the --embedding-dim");
  }
}

}  // namespace gradsync
