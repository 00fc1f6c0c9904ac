// `gradsync train --model dlrm`: the recommendation trainer's flags and ranks (docs/cli.md,
// docs/recommendation.md). Workers are ranks [0, W) with a ring of their own; embedding servers
// are ranks [W, W + K), each with a star transport to the workers (ps/embedding_links.h), so a
// server's death breaks nothing else and its replacement rejoins. The local launch (no
// launcher) respawns a killed server; `gradsync launch --respawn W-(W+K-1)` does the same.
#include "train_recommendation.h"

#include <csignal>
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.h"
#include "common/subprocess.h"
#include "common/units.h"
#include "gradsync/context.h"
#include "gradsync/tcp.h"
#include "launcher.h"
#include "rendezvous/tcp_store.h"

namespace gradsync {
namespace {

constexpr const char* kSettingsKey = "rec/settings";

std::vector<int64_t> parseWidths(const std::string& text, const char* flag) {
  std::vector<int64_t> widths;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    widths.push_back(parseInteger(text.substr(start, comma - start), flag));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return widths;
}

Settings recommendationSettings(const RecommendationOptions& o, const std::string& transport) {
  const TrainOptions& t = o.train;
  auto text = [](auto value) { return fmt::format("{}", value); };
  return {{"--transport", transport},
          {"--model", "dlrm"},
          {"--dataset", t.dataset},
          {"--epochs", text(t.epochs)},
          {"--steps", text(t.steps)},
          {"--batch-size", text(t.batchSize)},
          {"--lr", text(t.lr)},
          {"--momentum", text(t.momentum)},
          {"--seed", text(t.seed)},
          {"--schedule", t.schedule},
          {"--servers", text(t.strategy.servers)},
          {"--tables", text(o.tables)},
          {"--embedding-rows", text(o.embeddingRows)},
          {"--embedding-dim", text(o.embeddingDim)},
          {"--bottom-mlp", fmt::format("{}", fmt::join(o.bottomMlp, ","))},
          {"--top-mlp", fmt::format("{}", fmt::join(o.topMlp, ","))},
          {"--embedding-optimizer", o.embeddingOptimizer},
          {"--embedding-lr", text(o.embeddingLr)},
          {"--zipf", text(o.zipf)},
          {"--train-samples", text(o.trainSamples)},
          {"--test-samples", text(o.testSamples)},
          {"--recovery", o.recovery},
          {"--cpr", o.cpr},
          {"--inject-failures", o.injectFailures},
          {"--sim-clock", o.simClock},
          {"--checkpoint-every", text(t.checkpointEvery)},
          {"--resume", text(t.resume)}};
}

void printSummary(const RecommendationOptions& options, int workers,
                  const RecommendationResult& r) {
  const RecoveryLedger& l = r.ledger;
  std::printf(
      "gradsync train: dlrm on %s, %d workers, %d embedding servers, %lld steps in %.1f s: test "
      "AUC %.4f, log-loss %.4f, %.0f samples/s",
      options.train.dataset.c_str(), workers, options.train.strategy.servers,
      static_cast<long long>(r.steps), r.seconds, r.testAuc, r.testLogLoss, r.samplesPerSecond);
  if (l.failures > 0 || !options.injectFailures.empty()) {
    std::printf("; recovery %s: %d failure(s), PLS %.4f, checkpoint overhead %.2f%% (%s clock)",
                options.recovery.c_str(), l.failures, l.pls(), 100 * l.overheadFraction(),
                r.simulatedClock ? "simulated" : "real");
  }
  if (r.stopped) std::printf("; stopped early by a signal (exit %d)", kStoppedExitCode);
  std::printf("\n");
  std::fflush(stdout);
}

int workerLife(const RecommendationOptions& options, int workers, Store& store,
               const BootstrapConfig& config, const TransportOptions& link,
               const Settings& settings) {
  TcpTransportOptions tcp = tcpOptionsFor(config, link);
  if (config.rank == 0) store.setString(kSettingsKey, encodeSettings(settings));
  std::unique_ptr<Transport> ring = connectTcpTransport(store, config.rank, workers, tcp);
  checkSameSettings(*ring, settings);
  std::unique_ptr<EmbeddingConnector> links =
      connectEmbeddingServers(store, tcp, workers, config.rank);
  const bool servers = options.train.strategy.servers > 0;
  RecommendationResult result =
      trainRecommendation(*ring, servers ? links.get() : nullptr, options);
  if (config.rank == 0) printSummary(options, workers, result);
  barrier(*ring);  // rank 0 serves the store: it leaves last
  return result.stopped ? kStoppedExitCode : 0;
}

// A server checks its settings against worker 0's (published in the store) before serving; a
// difference is told to the workers through the store, so both sides fail naming it.
int serverLife(const RecommendationOptions& options, int workers, Store& store,
               const BootstrapConfig& config, const TransportOptions& link,
               const Settings& settings) {
  // A stop (SIGTERM, SIGINT, which launchers send every process) is the workers' to agree on:
  // they checkpoint, with this server's save, and tell it to stop. Dying here would only make
  // the launcher respawn it in the middle of their stop.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  const Settings rank0 = decodeSettings(store.getString(kSettingsKey, config.timeout));
  serveEmbeddingShard(store, tcpOptionsFor(config, link), options, workers, config.rank,
                      describeDifference(rank0, settings, config.rank));
  return 0;
}

// One process of a launched job (ours, torchrun-style, Slurm).
int launchedRank(const RankFlags& flags, const Env& env, const TransportOptions& link,
                 const RecommendationOptions& options, const Settings& settings) {
  const BootstrapConfig config = resolveBootstrap(flags.bootstrap, env);
  const int workers = config.size - options.train.strategy.servers;
  if (workers < 1) {
    throw ConfigError(fmt::format("{} ranks cannot hold {} embedding servers and a worker",
                                  config.size, options.train.strategy.servers));
  }
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store = connectStore(config, &server);
  if (config.size > 1) checkSameWorldSize(*store, config);
  if (config.rank < workers) return workerLife(options, workers, *store, config, link, settings);
  return serverLife(options, workers, *store, config, link, settings);
}

// --transport loopback: workers and servers as threads of this process; a server's injected
// failure crashes its incarnation (its links break as a killed process's would) and the next
// one starts on the same thread.
int threadsLife(const RankFlags& flags, const RecommendationOptions& options,
                TransportOptions link) {
  BootstrapFlags bootstrap = flags.bootstrap;
  bootstrap.insecureNoToken = true;
  link.timeout = resolveBootstrap(bootstrap, Env{}).timeout;
  std::vector<RecommendationResult> results =
      trainRecommendationThreads(flags.workers, options, link);
  printSummary(options, flags.workers, results[0]);
  return results[0].stopped ? kStoppedExitCode : 0;
}

}  // namespace

void addRecommendationFlags(CLI::App* train, RecommendationOptions& o,
                            std::shared_ptr<std::string> bottom, std::shared_ptr<std::string> top) {
  CLI::App* group = train;
  group->add_option("--tables", o.tables, "dlrm: categorical features (Criteo's first N)")
      ->capture_default_str();
  group
      ->add_option("--embedding-rows", o.embeddingRows,
                   "dlrm: rows per table (Criteo Kaggle's cardinalities, capped)")
      ->capture_default_str();
  group->add_option("--embedding-dim", o.embeddingDim, "dlrm: embedding width")
      ->capture_default_str();
  group->add_option("--bottom-mlp", *bottom, "dlrm: bottom MLP widths, e.g. 64,16")
      ->capture_default_str();
  group->add_option("--top-mlp", *top, "dlrm: top MLP hidden widths, e.g. 64")
      ->capture_default_str();
  group->add_option("--embedding-optimizer", o.embeddingOptimizer, "dlrm: adagrad | sgd")
      ->capture_default_str();
  group->add_option("--embedding-lr", o.embeddingLr, "dlrm: the embeddings' learning rate")
      ->capture_default_str();
  group->add_option("--zipf", o.zipf, "dlrm, synthetic logs: access skew (0: uniform)")
      ->capture_default_str();
  group->add_option("--train-samples", o.trainSamples, "dlrm, synthetic logs: training samples")
      ->capture_default_str();
  group->add_option("--test-samples", o.testSamples, "dlrm, synthetic logs: test samples")
      ->capture_default_str();
  group->add_option("--recovery", o.recovery, "dlrm: full | partial | cpr-mfu | cpr-ssu")
      ->capture_default_str();
  group->add_option("--cpr", o.cpr, "dlrm: pls=P,mfu=R,ssu=P,k=K,restart=D");
  group->add_option("--inject-failures", o.injectFailures,
                    "dlrm: kill embedding servers, mtbf=STEPS|DURATION,seed=S[,max=K]");
  group->add_option("--sim-clock", o.simClock,
                    "dlrm: replay on a simulated clock, step=D,save=D,load=D,restart=D");
}

int runRecommendation(const RankFlags& flags, const CommandContext& context,
                      RecommendationOptions options, const std::string& bottom,
                      const std::string& top) {
  options.bottomMlp = parseWidths(bottom, "--bottom-mlp");
  options.topMlp = parseWidths(top, "--top-mlp");
  validateRecommendationOptions(options);
  options.train.stopOnSignal = true;
  const TransportOptions link = parseLink(flags);
  if (flags.transport == "loopback") return threadsLife(flags, options, link);
  if (flags.transport == "mpi") {
    throw ConfigError("--model dlrm runs over TCP (its servers may be replaced mid-run)",
                      {.hint = "use --transport tcp or loopback"});
  }
  const Settings settings = recommendationSettings(options, flags.transport);
  if (flags.bootstrap.rank || !context.env.launcher.empty()) {
    return launchedRank(flags, context.env, link, options, settings);
  }
  const BootstrapConfig config = resolveBootstrap(
      BootstrapFlags{.timeout = flags.bootstrap.timeout, .insecureNoToken = true}, Env{});
  LaunchOptions launch{flags.workers + options.train.strategy.servers, context.argv,
                       config.timeout + std::chrono::seconds(5)};
  launch.command[0] = selfExecutable();
  for (int s = 0; s < options.train.strategy.servers; ++s)
    launch.respawn.push_back(flags.workers + s);
  launch.maxRespawns = 100;
  return launchLocal(launch);
}

}  // namespace gradsync
