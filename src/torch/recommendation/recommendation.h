// Training a recommendation model (`gradsync train --model dlrm`, docs/recommendation.md):
// DLRM on click logs, its embedding tables on parameter servers (or replicated on the workers:
// the dense-gradient path), failures of servers recovered fully or partially (CPR).
// Torch-free header: the CLI includes it without torch headers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/cpr_failures.h"
#include "ckpt/cpr_planner.h"
#include "data/click_log.h"
#include "gradsync/store.h"
#include "gradsync/tcp.h"
#include "gradsync/transport.h"
#include "ps/embedding_client.h"
#include "ps/embedding_host.h"
#include "torch/loop/options.h"

namespace gradsync {

// The run's clock for checkpoint costs and failures: real (measured seconds; failures by step)
// or simulated (`--sim-clock`: every step, save, load and restart advances it by a set amount,
// so a run with production-like ratios, minutes to save and hours between failures, is replayed
// in seconds while the model trains for real).
struct SimulatedClock {
  bool enabled = false;
  double step = 1;     // seconds per training step
  double save = 0;     // saving every shard (a partial save: its share of the rows)
  double load = 0;     // loading every shard (a partial recovery loads one)
  double restart = 0;  // replacing a failed server
};
// "step=60s,save=5min,load=5min,restart=2min"; ConfigError naming --sim-clock otherwise.
SimulatedClock parseSimulatedClock(const std::string& text);
// "pls=0.02,mfu=0.125,ssu=0.01,k=8" into `knobs` (unnamed ones keep their values);
// "restart=2s" sets the restart cost real runs plan with. ConfigError naming --cpr otherwise.
void parseCprKnobs(const std::string& text, CprKnobs& knobs, double& restartSeconds);

struct RecommendationOptions {
  TrainOptions train;  // the shared options: data, steps, batch, lr, momentum, seed, servers,
                       // checkpoints, metrics, evaluation, threads, schedule, quiet, stop
  uint64_t embeddingRows = 100'000;  // per table: Criteo Kaggle's cardinality, capped at this
  int tables = kCriteoTables;        // the first N of Criteo's 26 categorical features
  int embeddingDim = 16;
  std::vector<int64_t> bottomMlp = {64, 16};  // the last width is the embedding dim
  std::vector<int64_t> topMlp = {64};
  std::string embeddingOptimizer = "adagrad";  // adagrad | sgd (on the servers, or local tables)
  double embeddingLr = 0.05;
  double zipf = 1.1;  // synthetic logs: access skew (0: uniform)
  size_t trainSamples = size_t{1} << 22;
  size_t testSamples = size_t{1} << 14;
  std::string recovery = "full";  // full | partial | cpr-mfu | cpr-ssu
  std::string cpr;                // CprKnobs (parseCprKnobs)
  std::string injectFailures;     // FailureSpec ("" = none)
  std::string simClock;           // SimulatedClock ("" = the real clock)
};

struct RecommendationEvaluation {
  int64_t step = 0;
  double auc = 0;
  double logLoss = 0;
};

struct RecommendationResult {
  int64_t steps = 0;
  double seconds = 0;  // wall time of training (evaluation excluded)
  double samplesPerSecond = 0;
  double testAuc = 0;
  double testLogLoss = 0;
  std::vector<RecommendationEvaluation> evaluations;
  std::vector<float> losses;      // this worker's loss at each step run (redone steps too)
  std::vector<float> parameters;  // the MLPs' final parameters, flattened
  std::vector<float> testLogits;  // this worker's share of the last evaluation
  RecoveryLedger ledger;          // the same on every worker
  CprPlan plan;
  bool simulatedClock = false;
  // Per step on this worker: bytes pushed (keys, accesses and gradients of the distinct rows),
  // bytes of pull requests, the distinct rows' size (dim floats each), and what the ring sent.
  double pushBytesPerStep = 0;
  double pullRequestBytesPerStep = 0;
  double touchedRowBytesPerStep = 0;
  double ringBytesPerStep = 0;
  bool stopped = false;
};

// Throws ConfigError for options that cannot run, before any work.
void validateRecommendationOptions(const RecommendationOptions& options);
// The click logs of the run: synthetic (Criteo-like) or criteo (DIR/train.txt, DIR/test.txt).
std::unique_ptr<ClickData> openClickLog(const RecommendationOptions& options, bool test);
// The embedding tables of the run.
EmbeddingSpec embeddingSpecOf(const RecommendationOptions& options);
// What server `shard` of a job with `workers` workers runs.
EmbeddingHostOptions embeddingHostOptions(const RecommendationOptions& options, int shard,
                                          int workers);

// One worker's training; every worker of `ring` calls it alike. `servers`: how to reach the
// embedding servers (null: no servers, the tables are replicated and synchronized densely).
// Rank 0 shows progress and writes the metrics file. Throws on any failure.
RecommendationResult trainRecommendation(Transport& ring, EmbeddingConnector* servers,
                                         const RecommendationOptions& options);

// A job of processes (`gradsync train --model dlrm` launched): how worker `rank` of `workers`
// reaches the embedding servers through `store` (what trainRecommendation takes as `servers`).
// `tcp`: job id, token, TLS, the address to advertise and the timeout.
std::unique_ptr<EmbeddingConnector> connectEmbeddingServers(Store& store, TcpTransportOptions tcp,
                                                            int workers, int rank);
// The life of the embedding server of rank `rank` (shard rank - workers) as a process of its
// own: serves until every worker stopped; at an injected failure it kills itself (the launcher
// respawns it). A non-empty `refusal` (the server's settings differ from the workers') is told
// to the workers through the store, so that they fail naming it, and thrown as ConfigError.
// Blocking.
void serveEmbeddingShard(Store& store, TcpTransportOptions tcp,
                         const RecommendationOptions& options, int workers, int rank,
                         const std::string& refusal);

// The whole job on threads of this process: `workers` workers over loopback and
// options.train.strategy.servers embedding servers, each replaced on the same thread after an
// injected failure (its star transports are TCP on 127.0.0.1, through an in-memory store).
// Returns every worker's result; rethrows the first failure.
std::vector<RecommendationResult> trainRecommendationThreads(int workers,
                                                             const RecommendationOptions& options,
                                                             const TransportOptions& link = {});

// The metrics file (docs/metrics.md, "Recommendation runs"); atomic write.
void writeRecommendationMetrics(const std::string& path, const RecommendationOptions& options,
                                int workers, const RecommendationResult& result);

}  // namespace gradsync
