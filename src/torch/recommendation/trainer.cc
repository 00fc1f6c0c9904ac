#include "torch/recommendation/trainer.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "ckpt/shard_checkpoints.h"
#include "common/elapsed.h"
#include "common/stop_request.h"
#include "gradsync/error.h"
#include "torch/recommendation/checkpoint.h"

namespace gradsync {

namespace {

using SteadyTime = std::chrono::steady_clock;

DlrmConfig dlrmConfig(const RecommendationOptions& options, const EmbeddingSpec& spec,
                      bool localTables) {
  return {kCriteoDenseFeatures, options.bottomMlp, options.topMlp, spec, localTables};
}

std::unique_ptr<torch::optim::Optimizer> tableOptimizer(const RecommendationOptions& options,
                                                        const std::vector<torch::Tensor>& tables) {
  if (tables.empty()) return nullptr;
  if (options.embeddingOptimizer == "sgd") {
    return std::make_unique<torch::optim::SGD>(tables,
                                               torch::optim::SGDOptions(options.embeddingLr));
  }
  return std::make_unique<torch::optim::Adagrad>(
      tables, torch::optim::AdagradOptions(options.embeddingLr).eps(1e-10));
}

SyncOptions ringOptions(const TrainOptions& train) {
  TrainOptions ring = train;
  ring.strategy = StrategyKnobs{};  // the embedding servers are not the engine's servers
  return syncOptionsOf(ring);
}

}  // namespace

RecommendationTrainer::RecommendationTrainer(Transport& ring, EmbeddingConnector* servers,
                                             const RecommendationOptions& options)
    : ring_(ring),
      options_(options),
      train_(options_.train),
      trainLog_(openClickLog(options_, false)),
      testLog_(openClickLog(options_, true)),
      spec_(embeddingSpecOf(options_)),
      model_(std::make_shared<DlrmModel>(dlrmConfig(options_, spec_, servers == nullptr),
                                         train_.seed)),
      mlpOptimizer_(model_->mlpParameters(),
                    torch::optim::SGDOptions(train_.lr).momentum(train_.momentum)),
      tableOptimizer_(tableOptimizer(options_, model_->tables())),
      ledger_(spec_.shards),
      identity_(recommendationIdentity(options_, ring.size())),
      mode_(parseRecoveryMode(options_.recovery)),
      timing_(std::make_unique<Timing>()) {
  distributed_ =
      std::make_unique<DistributedOptimizer>(mlpOptimizer_, model_, ring_, ringOptions(train_));
  parseCprKnobs(options_.cpr, knobs_, restartSeconds_);
  if (!options_.simClock.empty()) sim_ = parseSimulatedClock(options_.simClock);
  if (!options_.injectFailures.empty()) failures_ = parseFailureSpec(options_.injectFailures);
  if (trainLog_->size() < train_.batchSize * static_cast<size_t>(ring_.size())) {
    throw ConfigError(fmt::format("the training log has {} samples, fewer than one global batch",
                                  trainLog_->size()));
  }
  if (!train_.checkpointDir.empty()) {
    dense_ = std::make_unique<CheckpointDir>(train_.checkpointDir + "/dense");
  }
  if (servers) {
    client_ = std::make_unique<EmbeddingClient>(spec_, ring_.size(), ring_.rank(), *servers);
    session_ = std::make_unique<EmbeddingSession>(
        ring_, *client_,
        EmbeddingSessionOptions{mode_, train_.checkpointDir, train_.checkpointDir + "/dense",
                                train_.batchSize * static_cast<uint64_t>(ring_.size())},
        ledger_);
  }
  plan_.mode = mode_;
  if (train_.checkpointEvery > 0) {
    interval_ = train_.checkpointEvery;
    if (mode_ == RecoveryMode::kCprMfu || mode_ == RecoveryMode::kCprSsu) {
      plan_.partialPerFull = knobs_.partialPerFull;
      plan_.saveFraction = knobs_.mfuFraction;
    }
    plan_.interval = static_cast<double>(interval_);
    plan_.reason = "--checkpoint-every";
  } else if (failures_ && sim_.enabled) {
    plan(0);
  } else if (failures_) {
    planStep_ = std::clamp<int64_t>(totalSteps() / 10, 2, 10);  // measure a few steps first
  }
}

int64_t RecommendationTrainer::totalSteps() const {
  const auto perEpoch = static_cast<int64_t>(
      trainLog_->size() / (train_.batchSize * static_cast<size_t>(ring_.size())));
  return train_.steps > 0 ? train_.steps : perEpoch * train_.epochs;
}

// Samples are read in the log's order (time order for Criteo): global batch t is the samples
// [t·W·B, (t+1)·W·B) of the epoch, and worker r takes its r-th block of B.
void RecommendationTrainer::readBatch(int64_t step) {
  const size_t global = train_.batchSize * static_cast<size_t>(ring_.size());
  const size_t perEpoch = trainLog_->size() / global;
  const size_t first = (static_cast<size_t>(step) % perEpoch) * global +
                       static_cast<size_t>(ring_.rank()) * train_.batchSize;
  trainLog_->read(first, train_.batchSize, batch_);
}

bool RecommendationTrainer::gatherRows(int64_t step, std::vector<torch::Tensor>& weights,
                                       int64_t* next) {
  if (!session_) {
    if (agreeToStop()) {
      stopped_ = true;
      saveDense(step);
      *next = step;
      return false;
    }
    weights = model_->tables();
    return true;
  }
  rows_ = EmbeddingBatch::of(spec_, batch_.rows, batch_.size);
  const bool first = step == 0 && dense_ && !resumed_;
  const bool stop = train_.stopOnSignal && stopRequested() != 0;
  EmbeddingSession::Agreement agreement = session_->pull(
      static_cast<uint64_t>(step), first ? uint32_t{kSaveFull} : 0u, rows_, values_, stop);
  chargeSaves(session_->client().saveReport());
  if (!agreement.failed.empty()) {
    *next = recover(agreement.failed, step);
    return false;
  }
  if (agreement.stop) {  // the servers save this step before answering, then the workers
    stopped_ = true;
    session_->pull(static_cast<uint64_t>(step), kSaveFull, EmbeddingBatch::of(spec_, {}, 0),
                   values_, false);
    saveDense(step);
    *next = step;
    return false;
  }
  for (int t = 0; t < spec_.tables(); ++t) {
    const auto rows = static_cast<int64_t>(rows_.rows[t].size());
    weights.push_back(torch::from_blob(values_[t].data(), {rows, spec_.dim}).requires_grad_(true));
  }
  touchedRows_ += rows_.distinctRows();
  return true;
}

// After the last step: one more agreement with the servers, which answers once the last round
// (and its checkpoint) is applied, reports that checkpoint, and finds a server that failed in
// the last round, so that the run ends with every server's rows in place.
int64_t RecommendationTrainer::finalRound(int64_t step) {
  if (!session_) return step + 1;
  const EmbeddingBatch none = EmbeddingBatch::of(spec_, {}, 0);
  EmbeddingSession::Agreement agreement =
      session_->pull(static_cast<uint64_t>(step), 0, none, values_, false);
  chargeSaves(session_->client().saveReport());
  if (!agreement.failed.empty()) return recover(agreement.failed, step);
  return step + 1;
}

int64_t RecommendationTrainer::trainStep(int64_t step, RecommendationResult& result) {
  if (step == totalSteps()) return finalRound(step);
  const auto start = SteadyTime::now();
  stepSaveSeconds_ = 0;
  readBatch(step);
  std::vector<torch::Tensor> weights;
  int64_t next = step;
  if (!gatherRows(step, weights, &next)) return next;
  const auto batch = static_cast<int64_t>(batch_.size);
  std::vector<torch::Tensor> positions;
  for (int t = 0; t < spec_.tables(); ++t) {
    if (session_) {
      positions.push_back(torch::from_blob(rows_.positions[t].data(), {batch}, torch::kLong));
    } else {  // the local tables: each sample's global row of table t
      positions.push_back(
          torch::from_blob(batch_.rows.data() + t, {batch}, {spec_.tables()}, torch::kLong)
              .contiguous());
    }
  }
  const torch::Tensor dense = torch::from_blob(batch_.dense.data(), {batch, kCriteoDenseFeatures});
  const torch::Tensor labels = torch::from_blob(batch_.labels.data(), {batch});
  model_->train();
  distributed_->zeroGrad();
  if (tableOptimizer_) tableOptimizer_->zero_grad();
  torch::Tensor loss =
      torch::binary_cross_entropy_with_logits(model_->forward(dense, weights, positions), labels);
  loss.backward();
  distributed_->synchronize();
  mlpOptimizer_.step();
  if (tableOptimizer_) tableOptimizer_->step();
  const int64_t done = step + 1;
  const uint32_t flags = saveFlags(done);
  if (flags & kSaveFull) saveDense(done);
  const double clock = sim_.enabled ? simTime_ + sim_.step : static_cast<double>(tick_ + 1);
  if (session_) {
    gradients_.resize(weights.size());
    for (size_t t = 0; t < weights.size(); ++t) {
      const torch::Tensor g = weights[t].grad().contiguous();
      gradients_[t].assign(g.data_ptr<float>(), g.data_ptr<float>() + g.numel());
    }
    session_->push(static_cast<uint64_t>(step), flags, clock, rows_, gradients_);
  }
  ++tick_;
  const bool redone = done <= highest_;
  const double seconds = sim_.enabled ? sim_.step : secondsSince(start) - stepSaveSeconds_;
  (redone ? ledger_.redoneTime : ledger_.trainingTime) += seconds;
  if (sim_.enabled) simTime_ += sim_.step;
  if (!sim_.enabled && step >= 1 && planStep_ > 0 && done <= planStep_) {
    timing_->stepSeconds += seconds;
    ++timing_->steps;
  }
  highest_ = std::max(highest_, done);
  if (done == planStep_) plan(done);
  result.losses.push_back(loss.item<float>());
  return done;
}

RecommendationResult RecommendationTrainer::run() {
  RecommendationResult result;
  result.simulatedClock = sim_.enabled;
  int64_t position = 0;
  if (train_.resume && dense_) {
    std::optional<int64_t> c =
        newestCompleteStep(train_.checkpointDir, session_ ? spec_.shards : 0, *dense_);
    if (!c) throw DataError(fmt::format("no complete checkpoint in '{}'", train_.checkpointDir));
    if (!loadDense(*c)) throw DataError(fmt::format("the checkpoint of step {} is corrupt", *c));
    if (session_) session_->restoreAt(*c);
    position = highest_ = *c;
    resumed_ = true;
  } else if (dense_) {
    saveDense(0);
  }
  const int64_t total = totalSteps();
  Progress progress(ring_.rank() == 0 && !train_.quiet, total, 1);
  const auto start = SteadyTime::now();
  double evaluationSeconds = 0;
  int64_t ran = 0;
  while (position <= total && !stopped_) {
    const int64_t next = trainStep(position, result);
    if (next == position + 1 && position < total) {
      ++ran;
      const double rate = static_cast<double>(train_.batchSize * ring_.size() * ran) /
                          std::max(1e-9, secondsSince(start) - evaluationSeconds);
      progress.step(next, 1, next, total, result.losses.back(), rate);
      if (train_.evalEvery > 0 && next % train_.evalEvery == 0 && next < total) {
        evaluationSeconds += evaluate(next, result);
      }
    }
    position = next;
  }
  result.seconds = secondsSince(start) - evaluationSeconds;
  position = std::min(position, total);
  result.steps = position;
  result.stopped = stopped_;
  result.samplesPerSecond =
      static_cast<double>(train_.batchSize * ring_.size() * ran) / std::max(1e-9, result.seconds);
  evaluate(position, result);
  progress.line(fmt::format("step {}: test AUC {:.4f}, log-loss {:.4f}", position, result.testAuc,
                            result.testLogLoss));
  ledger_.totalAccesses = totalAccesses();
  finish(result);
  return result;
}

}  // namespace gradsync
