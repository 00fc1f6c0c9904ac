#include "torch/elastic/round.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <utility>

#include <fmt/format.h>

#include "common/elapsed.h"
#include "common/logging.h"
#include "common/stop_request.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "sync/fragments.h"
#include "sync/strategy.h"
#include "torch/api/sync_setup.h"
#include "torch/elastic/checkpoint.h"
#include "torch/loop/batch_loss.h"
#include "torch/loop/checkpointing.h"
#include "torch/loop/evaluation.h"
#include "torch/loop/progress.h"
#include "torch/loop/training_optimizer.h"
#include "torch/models/gpt_config.h"

namespace gradsync {
namespace {

using WallClock = std::chrono::steady_clock;

// Steps left: for the bar's estimate.
int64_t stepsLeft(const ElasticMember& m) {
  const auto stepSamples = static_cast<double>(m.sampler.globalBatch());
  if (m.options.steps > 0) return std::max<int64_t>(0, m.options.steps - m.progress.step);
  const double samples = static_cast<double>(m.options.epochs - m.progress.data.epoch) *
                             static_cast<double>(m.sampler.datasetSize()) -
                         static_cast<double>(m.progress.data.offset);
  return static_cast<int64_t>(std::ceil(std::max(0.0, samples) / stepSamples));
}

// A round's DistributedOptimizer, and so its compressors, start afresh (docs/cluster.md, "Elastic
// workers", Compression): error feedback's residuals at zero on every member, PowerSGD's
// Q and random-k's draws from a seed of the round's own (the same on every member), the dense
// warm-up counted in the job's steps, not the round's.
SyncOptions roundSyncOptions(const ElasticMember& m, int64_t round) {
  SyncOptions sync = syncOptionsOf(m.options);
  // Update mode's engine counts the job's steps (ElasticRound); the others' count the round's.
  if (!m.updatesInEngine()) {
    sync.compressWarmup = std::max<int64_t>(0, sync.compressWarmup - m.progress.step);
  }
  sync.seed = m.options.seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(round);
  return sync;
}

ElasticIdentity identityOf(const ElasticMember& m) {
  return {m.options.model, m.options.dataset, m.options.batchSize,        m.range.max,
          m.options.seed,  m.options.sync,    compressSetting(m.options), m.sampler.datasetSize()};
}

}  // namespace

ElasticMember::ElasticMember(const TrainOptions& given, ElasticRange range)
    : range(range),
      data(openDataSource(given.dataset, given.dataDir, given.syntheticSamples, given.seed,
                          gptContextOf(given.model))),
      sampler(data->trainSize(), given.batchSize, range.max, given.seed),
      // --compress-warmup auto: a tenth of an epoch of the job's global batch
      options(withResolvedWarmup(
          given, std::max<size_t>(1, sampler.datasetSize() / sampler.globalBatch()))),
      net([&] {
        std::shared_ptr<Model> model = makeModel(options.model);
        initializeParameters(*model, options.seed);
        return model;
      }()),
      optimizer(options.optimizer != "sgd"
                    ? makeTrainingOptimizer(*net, options)
                    : std::make_unique<torch::optim::SGD>(
                          net->parameters(),
                          torch::optim::SGDOptions(options.lr).momentum(options.momentum))),
      checkpoints(options.checkpointDir.empty()
                      ? nullptr
                      : std::make_unique<CheckpointDir>(options.checkpointDir)) {
  const SyncStrategy strategy = SyncStrategy::parse(options.sync);
  if (strategy.kind == SyncStrategy::Kind::kLocalSgd) {
    localPeriod_ = strategy.parameter;
    outer_ = strategy.outer;
  }
  updatesInEngine_ = gradsync::updatesInEngine(syncOptionsOf(options));
  shardsVelocity_ = strategy.kind == SyncStrategy::Kind::kSharded;
}

bool ElasticMember::commitsAfter(int64_t step) const {
  return localPeriod_ > 0 &&
         outerStateSettlesAfter(step, localPeriod_, outer_.fragments, outer_.delay, outer_.eager);
}

int64_t ElasticMember::totalSteps() const {
  if (options.steps > 0) return options.steps;
  const auto perEpoch =
      static_cast<int64_t>(std::max<size_t>(1, sampler.datasetSize() / sampler.globalBatch()));
  return perEpoch * options.epochs;  // the last step of an epoch takes the remainder
}

void ElasticMember::commit(std::vector<uint8_t> state) {
  sync = state;
  last_.state.take(*net, *optimizer);
  last_.sync = std::move(state);
  last_.progress = progress;
  last_.losses = losses.size();
  hasCommit_ = true;
}

int64_t ElasticMember::rollback() {
  if (!hasCommit_) return -1;
  last_.state.restore(*net, *optimizer);
  sync = last_.sync;
  progress = last_.progress;
  losses.resize(last_.losses);
  return progress.step;
}

bool ElasticMember::restoreOwnCommit() {
  if (!hasCommit_ || last_.progress.step != progress.step) return false;
  last_.state.restore(*net, *optimizer);
  return true;
}

void ElasticMember::restoreCommittedOptimizer() {
  if (hasCommit_) last_.state.restoreOptimizer(*optimizer);
}

void ElasticMember::checkpoint(bool last) {
  if (!checkpoints || checkpoints->latest() == progress.step) return;
  try {
    saveElasticCheckpoint(*checkpoints, *net, *optimizer, identityOf(*this), progress, sync);
  } catch (const SystemError& e) {
    if (last) throw;
    GS_LOG(kError, "checkpoint of step {} not written, training goes on: {}", progress.step,
           e.what());
  }
}

bool ElasticMember::resume() {
  if (!checkpoints) return false;
  std::optional<ElasticProgress> saved =
      loadElasticCheckpoint(*checkpoints, *net, *optimizer, identityOf(*this), sync);
  if (!saved) return false;
  // A fixed run's checkpoint may lie between two outer steps, where each worker's model is its
  // own; its rank 0's synchronization state means nothing to a round without a local period.
  if (localPeriod_ > 0 && saved->step > 0 && !commitsAfter(saved->step)) {
    throw ConfigError(
        fmt::format("checkpoint {} is of step {}, between two outer steps of every {} (each "
                    "worker's steps since the last are its own): an elastic run starts from an "
                    "outer step",
                    checkpoints->pathForStep(*checkpoints->latest()), saved->step, localPeriod_),
        {.hint = fmt::format("resume it without --elastic, or from a checkpoint of a step where "
                             "the outer state settles (a multiple of {}; with fragments or a "
                             "delay, a fragment's merge)",
                             localPeriod_)});
  }
  if (localPeriod_ == 0) sync.clear();
  progress = std::move(*saved);
  return true;
}

ElasticRound::ElasticRound(ElasticMember& member, Transport& transport,
                           ElasticRendezvous& rendezvous, int64_t round)
    : member_(member),
      transport_(transport),
      rendezvous_(rendezvous),
      round_(round),
      distributed_(*member.optimizer, member.net, transport, roundSyncOptions(member, round)),
      display_(transport.rank() == 0 && !member.options.quiet,
               member.progress.step + stepsLeft(member),
               member.options.steps > 0 ? 1 : member.options.epochs),
      nextCheck_(member.progress.step + 1) {
  distributed_.setTrace(member.trace.get());
  if (member.updatesInEngine()) {
    // The round's start is a commit, with the optimizer state the round was given (p3: rank 0's
    // velocity or Adam's moments, in the optimizer); the engine takes it from there (sharded:
    // none, its velocity or Adam's moments restart at zero). The engine counts the job's steps,
    // as the compression warm-up does; Adam's bias correction counts the state's own (the
    // optimizer's step: the job's with p3, 0 with sharded, whose Adam restarts as a fresh one).
    member.commit({});
    distributed_.setStep(member.progress.step);
    distributed_.loadOptimizerState();
    return;
  }
  if (member.localPeriod() == 0) return;
  // The outer steps fall on the job's steps; the committed outer state (rank 0's, shareState)
  // continues, and the round's start is a commit. With Streaming DiLoCo every member starts from
  // θ_global (settledSyncState; a fixed run's checkpoint holds rank 0's own parameters instead),
  // and a survivor of the round before then takes back its own fragments as it committed them.
  distributed_.setStep(member.progress.step);
  if (!member.sync.empty()) {
    distributed_.loadSyncState(member.sync);
    if (member.outer().keepsOwnAtMerges()) {
      distributed_.loadSyncState(distributed_.settledSyncState());
      if (member.restoreOwnCommit()) {
        GS_LOG(kInfo, "elastic round {}: rank {} keeps its own {} of step {}", round,
               transport.rank(), member.outer().streams() ? "fragments" : "parameters",
               member.progress.step);
      }
    }
  }
  member.commit(distributed_.settledSyncState());
}

ElasticRound::~ElasticRound() {
  const SyncStats stats = distributed_.stats();
  member_.sums.commMs += stats.commSeconds * 1e3;
  member_.sums.bytesSent += static_cast<double>(stats.bytesSent);
  member_.sums.denseBytes += static_cast<double>(stats.denseBytes);
}

RoundEnd ElasticRound::run() {
  const RoundEnd end = train();
  if (member_.updatesInEngine()) member_.restoreCommittedOptimizer();  // the state at the end
  return end;
}

RoundEnd ElasticRound::train() {
  const ElasticProgress& p = member_.progress;
  const bool commitsEachStep = member_.updatesInEngine();
  for (;;) {
    const bool stepsDone = member_.options.steps > 0 && p.step >= member_.options.steps;
    if (p.data.offset == member_.sampler.datasetSize() || (stepsDone && p.data.offset > 0)) {
      // The run's last outer step comes before its last evaluation.
      if (stepsDone || p.data.epoch + 1 >= member_.options.epochs) finishLocal();
      finishEpoch();  // also a partial last epoch of --steps
      if (commitsEachStep) commitStep(false);
      continue;
    }
    if (trainingOver()) {
      finishLocal();
      return RoundEnd::kFinished;
    }
    const float loss = trainStep();
    const int period = member_.localPeriod();
    const bool outerStep = member_.commitsAfter(p.step);
    if (outerStep) member_.commit(distributed_.settledSyncState());
    // At each multiple of --checkpoint-every; with a local period at the first commit from it on
    // (the commits are H/P steps apart: H without fragments).
    const int64_t every = member_.options.checkpointEvery;
    const int commitSpacing = period > 0 ? period / member_.outer().fragments : 1;
    const bool due = every > 0 && (period > 0 ? outerStep && p.step % every < commitSpacing
                                              : p.step % every == 0);
    if (commitsEachStep) {
      commitStep(transport_.rank() == 0 && due);
    } else if (transport_.rank() == 0 && due) {
      member_.checkpoint(false);
    }
    const bool epochEnds = p.data.offset == member_.sampler.datasetSize() ||
                           (member_.options.steps > 0 && p.step >= member_.options.steps);
    const size_t global = member_.sampler.globalBatch();
    display_.step(p.step, static_cast<int>(p.data.epoch) + 1,
                  static_cast<int64_t>((p.data.offset + global - 1) / global),
                  static_cast<int64_t>(member_.sampler.datasetSize() / global), loss,
                  static_cast<double>(global) / std::max(member_.stepSeconds, 1e-9));
    // An evaluation's training time is the sum of the checks' (below), so a check comes first.
    const int64_t evalEvery = member_.options.evalEvery;
    const bool evaluate = evalEvery > 0 && p.step % evalEvery == 0 && !epochEnds;
    const bool canEnd = period == 0 || outerStep;
    if (std::optional<RoundEnd> end = check(epochEnds || evaluate || outerStep, canEnd)) {
      return *end;
    }
    if (evaluate) {
      evaluateBetweenSteps();
      if (commitsEachStep) commitStep(false);
    }
  }
}

// p3's optimizer state (SGD's velocity, Adam's moments) lives in the engine during a round, on
// every member alike: withOptimizerState copies it into the optimizer for the commit and the
// checkpoint (not collective: no sharded or servers here). sharded's velocity or moments are
// split among the members and restart with every round: the commit has none.
void ElasticRound::commitStep(bool checkpoint) {
  const auto keep = [&] {
    member_.commit({});
    if (checkpoint) member_.checkpoint(false);
  };
  if (member_.shardsVelocity()) return keep();
  distributed_.withOptimizerState(keep);
}

// As the fixed trainer's --eval-every: the first --eval-samples test samples, training time so
// far (evaluations excluded), into the shared progress, so that it outlives rounds and resumes.
void ElasticRound::evaluateBetweenSteps() {
  ElasticProgress& p = member_.progress;
  double seconds = p.epochSeconds;
  for (const EpochRecord& e : p.epochs) seconds += e.seconds;
  distributed_.averageBuffers();
  const size_t samples = member_.options.evalSamples > 0 ? member_.options.evalSamples : SIZE_MAX;
  const Quality quality = evaluateModel(*member_.net, *member_.data, transport_, samples);
  p.evaluations.push_back({p.step, seconds, quality.testAccuracy, quality.heldOutLoss});
  display_.line(member_.data->windowTokens() > 0
                    ? fmt::format("step {}: held-out loss {:.4f} nats/token after {:.1f} s", p.step,
                                  quality.heldOutLoss, seconds)
                    : fmt::format("step {}: test accuracy {:.2f}% after {:.1f} s", p.step,
                                  100 * quality.testAccuracy, seconds));
}

// An outer step of the last, shorter period, unless the last step was an outer step (the last
// commit is of this step: one after an outer step, or a round's start from one). With Streaming
// DiLoCo or mixing a commit is no whole outer step (the fragments not merged then, or the mixed
// parameters, are each rank's own): the run ends with one unless this round took it already.
void ElasticRound::finishLocal() {
  const int64_t step = member_.progress.step;
  if (member_.localPeriod() == 0 || finishedAt_ == step) return;
  if (!member_.outer().keepsOwnAtMerges() && member_.committedStep() == step) return;
  distributed_.synchronizeModel();
  member_.commit(distributed_.settledSyncState());
  finishedAt_ = step;
}

bool ElasticRound::trainingOver() const {
  const ElasticProgress& p = member_.progress;
  if (member_.options.steps > 0) return p.step >= member_.options.steps;
  return p.data.epoch >= member_.options.epochs;
}

float ElasticRound::trainStep() {
  ElasticProgress& p = member_.progress;
  const int rank = transport_.rank();
  const int size = transport_.size();
  const std::vector<size_t> indices = member_.sampler.batch(p.data, rank, size);
  const size_t stepSamples = member_.sampler.stepSamples(p.data);
  if (member_.samples) member_.samples->record(round_, p.step, p.data.epoch, rank, size, indices);
  TraceRecorder* trace = member_.trace.get();
  if (trace) traceStep(*trace);
  const auto start = WallClock::now();
  {
    ScopedEvent event(trace, kMainLane, "data", "load batch");
    inputs_.resize(indices.size() * member_.data->sampleElements());
    labels_.resize(indices.size() * member_.data->labelsPerSample());
    member_.data->batch(true, indices, inputs_, labels_);
  }
  torch::Tensor loss;
  {
    ScopedEvent event(trace, kMainLane, "compute", "forward and backward");
    member_.net->train();
    distributed_.zeroGrad();
    loss = batchLoss(*member_.net, *member_.data, inputs_, labels_,
                     static_cast<int64_t>(indices.size()));
    // An epoch's last step may give the ranks shares one sample apart: weighting each rank's
    // mean by its share makes the average over the ranks the mean over the step's samples.
    const double weight =
        static_cast<double>(indices.size()) * size / static_cast<double>(stepSamples);
    (weight == 1.0 ? loss : loss * weight).backward();
  }
  const auto computed = WallClock::now();
  double waited = 0;  // for the communication (ms)
  // Runs `work`, traced as (category, name); returns its milliseconds.
  const auto timed = [trace](const char* category, const char* name, auto&& work) {
    ScopedEvent event(trace, kMainLane, category, name);
    const auto begin = WallClock::now();
    work();
    return secondsSince(begin) * 1e3;
  };
  double optimizerMs = 0;
  // The schedule's learning rate and clipping: of this member's own gradients with a local
  // period, of the averaged ones otherwise.
  const auto step = [&] {
    prepareOptimizerStep(*member_.optimizer, member_.options, p.step, member_.totalSteps());
    member_.optimizer->step();
  };
  if (member_.localPeriod() > 0) {  // this member's own step, then the outer step if due
    optimizerMs = timed("compute", "optimizer", step);
    waited = timed("communication", "outer step", [&] { distributed_.endLocalStep(); });
  } else if (member_.updatesInEngine()) {  // p3, sharded: the engine updates; the step is whole
    prepareOptimizerStep(*member_.optimizer, member_.options, p.step, member_.totalSteps());
    waited = timed("communication", "wait", [&] {
      distributed_.step();
      distributed_.waitForParameters();
    });
  } else {
    waited = timed("communication", "wait", [&] { distributed_.synchronize(); });
    optimizerMs = timed("compute", "optimizer", step);
  }
  // The step is complete here: from now on nothing throws before the progress says so.
  const double seconds = secondsSince(start);
  p.step += 1;
  p.samples += static_cast<int64_t>(stepSamples);
  p.data = member_.sampler.after(p.data);
  const float value = loss.item<float>();
  lossSinceCheck_ += value;
  stepsSinceCheck_ += 1;
  secondsSinceCheck_ += static_cast<float>(seconds);
  member_.losses.push_back(value);
  member_.stepSeconds = seconds;
  member_.stepsRun += 1;
  StepProfile& sums = member_.sums;
  sums.computeMs += std::chrono::duration<double, std::milli>(computed - start).count();
  sums.exposedCommMs += waited;
  sums.optimizerMs += optimizerMs;
  sums.stepMs += seconds * 1e3;
  return value;
}

// The step's span, and at the round's first step (if the window has it) a mark of the round.
void ElasticRound::traceStep(TraceRecorder& trace) {
  trace.setStep(member_.progress.step);
  if (!std::exchange(firstStep_, false) || !trace.active()) return;
  trace.instant(kMainLane, "elastic",
                fmt::format("round {}: {} workers from step {}", round_, transport_.size(),
                            member_.progress.step));
}

// As the fixed trainer's stop check (trainer.cc), about every kCheckSeconds of training, so that
// it costs well under 0.1% of a step however short the steps; also where rank 0 looks for
// workers waiting to come in (one store request) and gives waiting workers a sign of life.
std::optional<RoundEnd> ElasticRound::check(bool force, bool canEnd) {
  constexpr double kCheckSeconds = 0.5;
  constexpr double kMostStepsBetweenChecks = 64;
  ElasticProgress& p = member_.progress;
  if (!force && p.step < nextCheck_) return std::nullopt;
  const int size = transport_.size();
  const bool lead = transport_.rank() == 0;
  const double proposal =
      std::clamp(kCheckSeconds / std::max(member_.stepSeconds, 1e-6), 1.0, kMostStepsBetweenChecks);
  const bool askedToStop = stopRequested() != 0;  // what this member votes, and acts on
  std::array<float, 6> votes = {askedToStop ? 1.0f : 0.0f,
                                static_cast<float>(proposal),
                                lead ? static_cast<float>(rendezvous_.waiting(round_)) : 0.0f,
                                lossSinceCheck_,
                                stepsSinceCheck_,
                                secondsSinceCheck_};
  allreduce(transport_, votes, ReduceOp::kSum, {.tag = tags::kTrainer});
  // The same sums on every rank (the ring gives every rank the same bits): the same decisions.
  nextCheck_ = p.step + std::max<int64_t>(1, static_cast<int64_t>(votes[1] / size));
  p.epochLossSum += votes[3];
  p.epochLossCount += votes[4];
  p.epochSeconds += votes[5] / static_cast<float>(size);
  lossSinceCheck_ = stepsSinceCheck_ = secondsSinceCheck_ = 0;
  if (lead) rendezvous_.heartbeat();
  if (!canEnd) return std::nullopt;  // the next outer step's check decides (votes are cast again)
  if (const int stopping = static_cast<int>(votes[0]); stopping > 0) {
    // Those asked leave; the others go on without them while enough remain, or stop too.
    if (stopping == size || size - stopping < member_.range.min) return RoundEnd::kStopped;
    return askedToStop ? RoundEnd::kLeft : RoundEnd::kRegroup;
  }
  if (votes[2] > 0 && size < member_.range.max) return RoundEnd::kRegroup;
  return std::nullopt;
}

void ElasticRound::finishEpoch() {
  ElasticProgress& p = member_.progress;
  EpochRecord record;
  record.epoch = static_cast<int>(p.data.epoch) + 1;
  record.trainLoss = p.epochLossCount > 0 ? p.epochLossSum / p.epochLossCount : 0;
  record.seconds = p.epochSeconds;
  record.samplesPerSecond =
      p.epochSeconds > 0 ? static_cast<double>(p.data.offset) / p.epochSeconds : 0;
  distributed_.averageBuffers();
  const Quality quality = evaluateModel(*member_.net, *member_.data, transport_);
  record.testAccuracy = quality.testAccuracy;
  record.heldOutLoss = quality.heldOutLoss;
  p.epochs.push_back(record);
  p.data = {p.data.epoch + 1, 0};
  p.epochLossSum = p.epochLossCount = p.epochSeconds = 0;
  const int epochs = member_.options.steps > 0 ? record.epoch : member_.options.epochs;
  display_.line(fmt::format("{} ({} workers)",
                            describeEpoch(record, epochs, member_.data->windowTokens()),
                            transport_.size()));
}

}  // namespace gradsync
