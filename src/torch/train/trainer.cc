// The training loop: data-parallel training (SGD with momentum, or AdamW for language models)
// through the public API, the same DistributedOptimizer a user's own program builds
// (include/gradsync/torch/).
#include "torch/train/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "common/elapsed.h"
#include "common/logging.h"
#include "common/stop_request.h"
#include "common/tags.h"
#include "data/sampler.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/torch/collectives.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "gradsync/trace.h"
#include "torch/loop/batch_loss.h"
#include "torch/loop/checkpointing.h"
#include "torch/loop/data_source.h"
#include "torch/loop/epoch_loop.h"
#include "torch/loop/evaluation.h"
#include "torch/loop/metrics.h"
#include "torch/loop/progress.h"
#include "torch/loop/run_trace.h"
#include "torch/loop/training_model.h"
#include "torch/loop/training_optimizer.h"
#include "torch/models/gpt_config.h"
#include "torch/models/models.h"
#include "torch/waves/wavelet_trainer.h"
#include "transport/prefix_transport.h"

namespace gradsync {
namespace {

using MonotonicClock = std::chrono::steady_clock;

RunIdentity identityOf(const TrainOptions& o, int workers, int batchWorkers) {
  return {o.model, o.dataset,          workers,   batchWorkers, o.batchSize, o.seed,
          o.sync,  compressSetting(o), o.schedule};
}

// The checkpoint to resume from (--resume), checked against this run: nullopt for none.
std::optional<ResumePoint> resumePointFor(const TrainOptions& o, int workers) {
  if (!o.resume || o.checkpointDir.empty()) return std::nullopt;
  return readResumePoint(CheckpointDir(o.checkpointDir), identityOf(o, workers, workers));
}

// Collectives of the training thread (loss and accuracy sums) use their own tag.

class Trainer {
 public:
  // `transport`: the workers; `all`: with the separate parameter servers, if any.
  Trainer(Transport& transport, Transport& all, const TrainOptions& options)
      : transport_(transport),
        strategy_(SyncStrategy::parse(options.sync)),
        resume_(resumePointFor(options, transport.size())),
        batchWorkers_(resume_ ? resume_->batchWorkers : transport.size()),
        data_(openTrainingData(options)),
        sampler_(data_->makeSampler(transport.rank(), transport.size(), options.batchSize,
                                    options.seed, batchWorkers_)),
        options_(withResolvedWarmup(options, sampler_->stepsPerEpoch())),
        net_(makeTrainingModel(options, transport.rank())),
        optimizer_(makeTrainingOptimizer(*net_, options)),
        distributed_(*optimizer_, net_, all, syncOptionsOf(options_)),
        inputs_(largestShare() * data_->sampleElements()),
        labels_(largestShare() * data_->labelsPerSample()),
        stragglers_(transport, StragglerOptions{}, tags::kTrainer),
        slowdownMs_(injectedSlowdownMs(options.injectSlowRank, transport.rank())) {
    broadcastParameters(*net_, transport_);
    if (!options.checkpointDir.empty()) {
      checkpoints_ = std::make_unique<CheckpointDir>(options.checkpointDir);
    }
    if (!options.tracePath.empty()) {
      StepWindow window = options.traceSteps.empty() ? defaultStepWindow(totalSteps())
                                                     : parseStepWindow(options.traceSteps);
      trace_ = std::make_unique<TraceRecorder>(transport.rank(), window, SteadyClock::instance());
      distributed_.setTrace(trace_.get());
    }
  }

  TrainResult run();

 private:
  // The most samples a rank trains at a step: B, or one more than G/W on another world size.
  size_t largestShare() const {
    const auto world = static_cast<size_t>(transport_.size());
    return (sampler_->globalBatch() + world - 1) / world;
  }
  int64_t totalSteps() const {
    int64_t perEpoch = static_cast<int64_t>(sampler_->stepsPerEpoch());
    return options_.steps > 0 ? options_.steps : perEpoch * options_.epochs;
  }

  // This rank's mean loss of a step, and its share's weight in the step's mean (1 unless the
  // run was resumed on another number of workers: docs/checkpoints.md).
  struct StepLoss {
    float mean = 0;
    double weight = 1;
  };
  StepLoss trainStep(int64_t epoch, size_t step, int64_t globalStep);
  double updateParameters(int64_t globalStep, TraceRecorder* trace, double& optimizerSeconds);
  void settle();
  double takeWaitSeconds();  // the waits for parameters since the last call
  // After step `step` (which took `stepSeconds` here): whether any rank was asked to stop
  // (stopOnSignal), the same answer on every rank.
  bool stopAgreed(int64_t step, double stepSeconds);
  // After step `step`: names a persistently slower rank in the log and the trace (every rank
  // at the same steps; not with the servers' asynchronous and delayed strategies, whose workers
  // do not wait for each other and would, at each exchange).
  void watchStragglers(int64_t step);
  // Accuracy (or a language model's held-out loss) on the first `samples` test samples.
  Quality evaluate(size_t samples);
  RunIdentity identity() const;
  RunPosition startingPosition();
  void maybeCheckpoint(const RunPosition& position, bool last);

  Transport& transport_;
  const SyncStrategy strategy_;
  std::optional<ResumePoint> resume_;  // --resume's checkpoint, until startingPosition()
  const int batchWorkers_;             // the global batch in local batches (ResumePoint's)
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<BatchSampler> sampler_;  // the data source's (each rank's partition, remote)
  const TrainOptions options_;             // --compress-warmup auto resolved for this epoch
  std::shared_ptr<Model> net_;             // the model; distributed_ synchronizes it
  // FusedSGD or AdamW (torch/loop/training_optimizer.h)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  DistributedOptimizer distributed_;
  double waitsSeen_ = 0;       // distributed_.stats().waitSeconds at the last takeWaitSeconds()
  int64_t nextStopCheck_ = 0;  // the step after which the ranks next agree on a stop
  std::vector<float> inputs_;  // the largest share of a step's samples
  std::vector<int64_t> labels_;
  StepProfile sums_;                            // accumulated, divided by the step count at the end
  std::unique_ptr<CheckpointDir> checkpoints_;  // null without --checkpoint-dir
  std::unique_ptr<TraceRecorder> trace_;        // null without --trace
  StragglerWatch stragglers_;
  const double slowdownMs_;   // injected into this rank's compute (--inject-slow-rank)
  double stepComputeMs_ = 0;  // the last step's
  double dataSeconds_ = 0;    // getting the training batches, all steps of this run
};

// After backward: either the engine applies the update as the averages arrive (p3, sharded,
// servers), or this waits for the averages and steps the optimizer. Returns the seconds spent
// waiting.
double Trainer::updateParameters(int64_t globalStep, TraceRecorder* trace,
                                 double& optimizerSeconds) {
  optimizerSeconds = 0;
  if (distributed_.updatesParameters()) {
    distributed_.step();
    return 0;
  }
  if (strategy_.kind == SyncStrategy::Kind::kLocalSgd) {
    if (strategy_.outer.perHost) distributed_.synchronize();  // the host's average gradient
    prepareOptimizerStep(*optimizer_, options_, globalStep, totalSteps());
    net_->optimizerStep(*optimizer_);  // on this worker's gradient (group=host: its host's)
    auto start = MonotonicClock::now();
    ScopedEvent event(trace, kMainLane, "communication", "outer step");
    distributed_.endLocalStep();  // the outer work due (most steps: none)
    return secondsSince(start);
  }
  if (distributed_.exchangesMomenta()) {  // 1-bit Adam past its warm-up: step() updates
    // The schedule's learning rate; its clipping of .grad changes nothing here (the gradients
    // became momenta in the backward hooks).
    prepareOptimizerStep(*optimizer_, options_, globalStep, totalSteps());
    auto start = MonotonicClock::now();
    ScopedEvent event(trace, kMainLane, "communication", "wait");
    distributed_.step();
    return secondsSince(start);
  }
  auto start = MonotonicClock::now();
  {
    ScopedEvent event(trace, kMainLane, "communication", "wait");
    distributed_.synchronize();
  }
  double waited = secondsSince(start);
  auto synchronized = MonotonicClock::now();
  {
    ScopedEvent event(trace, kMainLane, "compute", "optimizer");
    prepareOptimizerStep(*optimizer_, options_, globalStep, totalSteps());
    net_->optimizerStep(*optimizer_);
  }
  optimizerSeconds = secondsSince(synchronized);
  return waited;
}

// Every rank checks after the same steps: one allreduce of two floats agrees whether any rank was
// asked to stop, and when to check next, about every kStopCheckSeconds of training (the ranks'
// mean proposal from their step times). So the check costs well under 0.1% of training however
// short the steps (an allreduce every step cost 0.4 ms of mlp's 9 ms here), and a stop waits
// for about that long at most.
bool Trainer::stopAgreed(int64_t step, double stepSeconds) {
  constexpr double kStopCheckSeconds = 0.5;
  constexpr double kMostStepsBetweenChecks = 64;
  if (!options_.stopOnSignal || step < nextStopCheck_) return false;
  const double steps =
      std::clamp(kStopCheckSeconds / std::max(stepSeconds, 1e-6), 1.0, kMostStepsBetweenChecks);
  std::array<float, 2> votes = {stopRequested() != 0 ? 1.0f : 0.0f, static_cast<float>(steps)};
  allreduce(transport_, votes, ReduceOp::kSum, {.tag = tags::kTrainer});
  // The same sum on every rank (the ring gives every rank the same bits).
  nextStopCheck_ = step + std::max<int64_t>(1, static_cast<int64_t>(votes[1] / transport_.size()));
  return votes[0] > 0;
}

void Trainer::watchStragglers(int64_t step) {
  if (strategy_.needsServers()) return;
  for (const StragglerReport& report : stragglers_.afterStep(step, stepComputeMs_)) {
    if (transport_.rank() == 0) GS_LOG(kWarn, "{}", describe(report));
    if (trace_ && trace_->active()) {
      trace_->instant(kMainLane, "straggler", describe(report),
                      TraceArgs().add("rank", report.rank).add("slower", report.slower));
    }
  }
}

double Trainer::takeWaitSeconds() {
  const double waits = distributed_.stats().waitSeconds;
  const double since = waits - waitsSeen_;
  waitsSeen_ = waits;
  return since;
}

// Waits for the last step's communication (p3, sharded), counted as exposed communication and
// as part of the step: the training time must include it.
void Trainer::settle() {
  distributed_.waitForParameters();
  double waited = takeWaitSeconds() * 1e3;
  sums_.exposedCommMs += waited;
  sums_.stepMs += waited;  // the last step ends only now
}

Trainer::StepLoss Trainer::trainStep(int64_t epoch, size_t step, int64_t globalStep) {
  if (trace_) trace_->setStep(globalStep);
  TraceRecorder* trace = trace_.get();
  auto start = MonotonicClock::now();
  std::vector<size_t> indices = sampler_->batch(epoch, step);
  const std::span<float> inputs(inputs_.data(), indices.size() * data_->sampleElements());
  const std::span<int64_t> labels(labels_.data(), indices.size() * data_->labelsPerSample());
  {
    ScopedEvent event(trace, kMainLane, "data", "load batch");
    data_->batch(true, indices, inputs, labels);
  }
  dataSeconds_ += secondsSince(start);
  enterTrainingMode(*net_, options_.freezeBatchNorm);
  optimizer_->zero_grad();
  torch::Tensor loss;
  {
    // With p3 and sharded, the previous step's communication may still run: each layer's
    // pre-forward hook waits for that layer's parameters only.
    ScopedEvent event(trace, kMainLane, "compute", "forward");
    loss = batchLoss(*net_, *data_, inputs, labels, static_cast<int64_t>(indices.size()));
    distributed_.waitForParameters();
  }
  const float lossValue = loss.item<float>();
  distributed_.reportLoss(lossValue);  // the guard's loss signal
  // On another world size than the global batch's, shares differ by one sample: weighting each
  // rank's mean by its share keeps the average over the ranks the step's mean.
  const double weight = static_cast<double>(indices.size() * transport_.size()) /
                        static_cast<double>(sampler_->globalBatch());
  {
    ScopedEvent event(trace, kMainLane, "compute", "backward");
    (weight == 1.0 ? loss : loss * weight).backward();
    if (slowdownMs_ > 0)
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(slowdownMs_));
  }
  auto computed = MonotonicClock::now();
  const double forwardWait = takeWaitSeconds();  // in the forward (p3, sharded, servers)
  double optimizerSeconds = 0;
  double waited = forwardWait + updateParameters(globalStep, trace, optimizerSeconds);
  stepComputeMs_ =
      std::chrono::duration<double, std::milli>(computed - start).count() - forwardWait * 1e3;
  sums_.computeMs += stepComputeMs_;
  sums_.exposedCommMs += waited * 1e3;
  sums_.optimizerMs += optimizerSeconds * 1e3;
  sums_.stepMs += secondsSince(start) * 1e3;
  return {lossValue, weight};
}

// Each rank evaluates every size()-th test sample; the counts are summed across ranks.
Quality Trainer::evaluate(size_t samples) {
  if (!net_->predicts()) return {std::nan(""), std::nan("")};  // emulated compute: nothing
  distributed_.averageBuffers();
  Quality quality{};
  distributed_.withGlobalModel(
      [&] { quality = evaluateModel(*net_, *data_, transport_, samples); });
  return quality;
}

RunIdentity Trainer::identity() const {
  return identityOf(options_, transport_.size(), batchWorkers_);
}

// Resumes from the newest checkpoint when asked (every rank reads it: the directory must be
// visible to all ranks, as a local disk is on one host or a shared file system is across hosts),
// on any number of workers: another than the checkpoint's keeps its global batch, and each rank
// adopts what maps of a saved rank's synchronization state (docs/checkpoints.md).
RunPosition Trainer::startingPosition() {
  if (!resume_) return {};
  const ResumePoint point = std::move(*resume_);
  resume_.reset();
  const int rank = transport_.rank(), workers = transport_.size();
  const bool sameWorkers = point.workers == workers && !point.fromElastic;
  RunPosition position = loadResumePoint(point, *net_, *optimizer_, rank, workers,
                                         static_cast<int64_t>(sampler_->stepsPerEpoch()));
  distributed_.loadOptimizerState();
  if (sameWorkers) {
    distributed_.loadSyncState(position.syncState);
  } else if (!position.syncState.empty()) {  // an elastic run's in gradient mode has none
    distributed_.adoptSyncState(position.syncState, position.step);
  }
  if (rank == 0 && !options_.quiet) {
    const std::string onto =
        sameWorkers ? ""
                    : fmt::format(" on {} workers instead of {}, the same global batch", workers,
                                  point.workers);
    std::printf("resuming from step %lld (%s)%s\n", static_cast<long long>(position.step),
                point.checkpoint.path.c_str(), onto.c_str());
  }
  return position;
}

// Every rank takes part (its partial epoch loss is gathered exactly, as raw doubles, and its
// synchronization state as bytes); rank 0 writes.
void Trainer::maybeCheckpoint(const RunPosition& position, bool last) {
  if (!checkpoints_) return;
  bool due = options_.checkpointEvery > 0 && position.step % options_.checkpointEvery == 0;
  if (!due && !last) return;
  std::vector<double> sums(transport_.size());
  sums[transport_.rank()] = position.epochLossSum;
  std::vector<size_t> counts(transport_.size(), sizeof(double));
  allgatherv(transport_, {reinterpret_cast<uint8_t*>(sums.data()), sums.size() * sizeof(double)},
             counts, {.tag = tags::kTrainer});
  const std::vector<uint8_t> mine = distributed_.syncState();
  const std::vector<std::vector<uint8_t>> syncStates =
      allgatherBytes(transport_, mine, {.tag = tags::kTrainer});
  // Through servers the saved model is theirs, the global one. A periodic checkpoint that cannot
  // be written (disk full, a directory that became unwritable) costs only itself: the previous
  // one stays, and training goes on; the last one's failure ends the run with the error.
  std::exception_ptr failure;
  distributed_.withOptimizerState([&] {
    if (transport_.rank() != 0) return;
    try {
      saveCheckpoint(*checkpoints_, *net_, *optimizer_, identity(), position, sums, syncStates);
    } catch (const SystemError& e) {
      if (last) failure = std::current_exception();
      if (!last) {
        GS_LOG(kError, "checkpoint of step {} not written, training goes on: {}", position.step,
               e.what());
      }
    }
  });
  if (failure) std::rethrow_exception(failure);
}

TrainResult Trainer::run() {
  RunPosition start = startingPosition();
  distributed_.setStep(start.step);
  const LoopShape shape{.stepsPerEpoch = static_cast<int64_t>(sampler_->stepsPerEpoch()),
                        .totalSteps = totalSteps(),
                        .globalBatch = sampler_->globalBatch(),
                        .evalEvery = options_.evalEvery,
                        .evalSamples = options_.evalSamples > 0 ? options_.evalSamples : SIZE_MAX,
                        .segmentSteps = 1,
                        .show = transport_.rank() == 0 && !options_.quiet};
  double dataBefore = 0;  // dataSeconds_ at the epoch's start
  const LoopHooks hooks{
      .train =
          [&](int64_t step, int64_t, std::vector<float>& losses) {
            const auto perEpoch = static_cast<int64_t>(sampler_->stepsPerEpoch());
            const StepLoss loss =
                trainStep(step / perEpoch, static_cast<size_t>(step % perEpoch), step);
            losses.push_back(loss.mean);
            return loss.mean * loss.weight;  // the epoch's mean is over the samples
          },
      .evaluate = [this](size_t samples) { return evaluate(samples); },
      .globalMean = [this](double sum,
                           double count) { return meanOverRanks(transport_, sum, count); },
      .describe = [this](
                      const EpochRecord& record,
                      int epochs) { return describeEpoch(record, epochs, data_->windowTokens()); },
      .stopAfter =
          [this](int64_t step, double seconds) {
            const bool stop = stopAgreed(step, seconds);
            watchStragglers(step);
            return stop;
          },
      .settle = [this] { settle(); },
      .describeStop =
          [this](int64_t step) {
            return fmt::format("stopped by signal {} after step {}{}", stopRequested(), step,
                               checkpoints_
                                   ? fmt::format("; checkpoint {}", checkpoints_->pathForStep(step))
                                   : "");
          },
      .completeEpoch =
          [&](EpochRecord& record) {
            record.dataSeconds = dataSeconds_ - dataBefore;
            dataBefore = dataSeconds_;
          },
      .checkpoint = [this](const RunPosition& position,
                           bool last) { maybeCheckpoint(position, last); }};
  LoopOutcome outcome = runEpochLoop(shape, std::move(start), hooks);
  TrainResult& result = outcome.result;
  if (trace_) writeRunTrace(*trace_, transport_, options_);
  result.stragglers = stragglers_.reports();
  result.guard = distributed_.guardEvents();
  result.schedule = distributed_.schedule();
  result.scheduleTuning = distributed_.scheduleTuning();
  if (auto* fused = dynamic_cast<FusedSGD*>(optimizer_.get()))
    result.fusedUpdateSteps = fused->fusedSteps();
  result.compressWarmupSteps = options_.compression.warmupSteps;
  result.compressSpec = options_.compression.spec;
  result.dataCache = data_->cacheStats();
  result.tokensPerSecond =
      result.samplesPerSecond * static_cast<double>(gptContextOf(options_.model));
  result.parameters = flatParameters(*net_);
  const SyncStats totals = distributed_.stats();
  const StalenessCounts mine{totals.asyncPushes, totals.stalenessSum, totals.stalenessMax};
  result.staleness = gatherStaleness(transport_, strategy_, mine, tags::kTrainer);
  if (!result.staleness.empty() && transport_.rank() == 0)
    GS_LOG(kInfo, "{}", describe(result.staleness));
  sums_.commMs = totals.commSeconds * 1e3;
  sums_.bytesSent = static_cast<double>(totals.bytesSent);
  sums_.denseBytes = static_cast<double>(totals.denseBytes);
  sums_.encodeMs = totals.encodeSeconds * 1e3;
  sums_.decodeMs = totals.decodeSeconds * 1e3;
  sums_.deviceMs = net_->deviceSeconds() * 1e3;
  result.perStep = perStepOf(sums_, outcome.stepsRun);
  return std::move(result);
}

}  // namespace

TrainResult runTraining(Transport& transport, const TrainOptions& given) {
  validateTrainOptions(given);
  const int workers = transport.size() - given.strategy.servers;
  const TrainOptions options = resolveCompute(given, workers);
  if (workers < 1) {
    throw ConfigError(fmt::format("{} ranks cannot hold {} parameter servers and a worker",
                                  transport.size(), options.strategy.servers));
  }
  if (options.stopOnSignal && options.waves == 1) installStopHandlers();  // waves: not graceful
  if (isServerRank(options, transport.rank(), transport.size())) {
    std::shared_ptr<Model> net = makeTrainingModel(options, transport.rank());  // its shapes
    torch::optim::SGD optimizer(net->parameters(),
                                torch::optim::SGDOptions(options.lr).momentum(options.momentum));
    DistributedOptimizer::serve(optimizer, *net, transport, syncOptionsOf(options));
    return {};
  }
  limitComputeThreads(options.threads);
  PrefixTransport workerRanks(transport, workers);
  TrainResult result;
  try {
    if (options.waves > 1) {
      result = runWaveletTraining(workerRanks, options);  // torch/waves/wavelet_trainer.h
    } else {
      Trainer trainer(workerRanks, transport, options);
      if (!emulatesCompute(options)) yieldToCommunication();  // an emulated device computes none
      result = trainer.run();
    }
  } catch (const PeerLostError& lost) {
    rethrowNamingServer(lost, options, transport.size());
  }
  if (transport.rank() == 0 && !options.metricsPath.empty()) {
    writeMetrics(options.metricsPath, options, workers, result);
  }
  return result;
}

}  // namespace gradsync
