#include "torch/elastic/trainer.h"

#include <cstdio>
#include <exception>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "common/logging.h"
#include "common/stop_request.h"
#include "common/units.h"
#include "gradsync/error.h"
#include "job/elastic_worker.h"
#include "job/hang_watch.h"
#include "rendezvous/tcp_store.h"
#include "sync/strategy.h"
#include "torch/api/sync_setup.h"
#include "torch/elastic/plain_state.h"
#include "torch/elastic/round.h"
#include "torch/loop/metrics.h"
#include "torch/loop/run_trace.h"
#include "torch/loop/training_model.h"
#include "torch/models/gpt_config.h"

namespace gradsync {
namespace {

[[noreturn]] void refuseElastic(const std::string& what, const std::string& why) {
  throw ConfigError(fmt::format("--elastic does not support {}: {}", what, why),
                    {.operation = "elastic training"});
}

ElasticWorker workerOf(const ElasticJob& job) {
  return thisWorker(job.bootstrap.rank, job.restartCount, encodeSettings(job.settings));
}

// Runs the round's training on a thread of its own that lowers its priority as train's training
// thread does (yieldToCommunication, trainer.cc says why). This thread keeps the default one, so
// the threads a round creates here, its transport's event loop and its engine's communication
// thread, do too: a thread inherits the priority of the thread that creates it.
RoundEnd trainOnComputeThread(ElasticRound& round) {
  RoundEnd end{};
  std::exception_ptr error;
  std::thread compute([&] {
    yieldToCommunication();
    try {
      end = round.run();
    } catch (...) {
      error = std::current_exception();
    }
  });
  compute.join();
  if (error) std::rethrow_exception(error);
  return end;
}

class ElasticTrainer {
 public:
  ElasticTrainer(const ElasticJob& job, const TrainOptions& options)
      : job_(job),
        store_(connectStore(job.bootstrap, &server_)),
        rendezvous_(*store_, {.range = parseElasticRange(options.elastic),
                              .initialWorkers = job.bootstrap.size,
                              .timeout = job.bootstrap.timeout}),
        member_(options, parseElasticRange(options.elastic)),
        me_(workerOf(job)),
        hangBound_(std::chrono::milliseconds(static_cast<int64_t>(
            1000 * parseDurationSeconds(options.hangTimeout, "--hang-timeout")))) {
    if (!options.recordSamples.empty()) {
      member_.samples = std::make_unique<SampleLog>(options.recordSamples, me_.slot,
                                                    job.restartCount, me_.name + ", " + me_.where);
    }
    if (!options.tracePath.empty()) {
      const StepWindow window = options.traceSteps.empty() ? defaultStepWindow(member_.totalSteps())
                                                           : parseStepWindow(options.traceSteps);
      member_.trace = std::make_unique<TraceRecorder>(me_.slot, window, SteadyClock::instance());
    }
    // Every worker reads the checkpoint (a directory all of them see, as without --elastic); the
    // rendezvous then ranks them by their steps, so the most advanced state leads the round.
    if (options.resume && member_.resume()) {
      hasState_ = true;
      if (!options.quiet) {
        std::printf("gradsync train: %s resumes from step %lld (%s)\n", me_.name.c_str(),
                    static_cast<long long>(member_.progress.step),
                    member_.checkpoints->pathForStep(member_.progress.step).c_str());
      }
    }
  }

  ElasticOutcome run();

 private:
  RoundEnd trainRound(const ElasticMembership& m);
  // After a failed round: back to the member's last commit (localsgd, diloco, p3, sharded); says
  // so for the log line ("" if there is nothing to roll back).
  std::string rollBack();
  void announce(const ElasticMembership& m) const;
  TrainResult result(bool stopped) const;

  const ElasticJob job_;
  std::unique_ptr<TcpStoreServer> server_;  // worker 0's, when no launcher serves the store
  std::shared_ptr<Store> store_;
  ElasticRendezvous rendezvous_;
  ElasticMember member_;
  ElasticWorker me_;
  const std::chrono::milliseconds hangBound_;  // --hang-timeout; 0: no watch
  bool hasState_ = false;  // holds the job's state (received in a round): its progress counts
};

ElasticOutcome ElasticTrainer::run() {
  int64_t next = rendezvous_.nextRound();
  // A worker that joins a running job without its state (restarted, or added) will receive it in
  // place: its optimizer's state made now, while it waits, takes the bytes into warm pages.
  if (next > 0 && !hasState_) prepareOptimizerState(*member_.optimizer);
  for (;;) {
    me_.progress = hasState_ ? member_.progress.step : -1;
    me_.stepSeconds = member_.stepSeconds;
    const ElasticMembership m =
        joinRound(rendezvous_, next, me_, job_.bootstrap, server_ != nullptr);
    if (m.jobFinished) {
      std::printf("gradsync train: %s: the job finished before this worker could join\n",
                  me_.name.c_str());
      return {};
    }
    me_.lastRound = m.round;
    me_.lastRank = m.rank;
    next = m.round + 1;
    RoundEnd end{};
    try {
      end = trainRound(m);
    } catch (const PeerLostError& e) {
      const std::string back = rollBack();  // not inside GS_LOG: it may skip its arguments
      GS_LOG(kWarn, "{}: elastic round {} lost a worker ({}); the job re-forms{}", me_.name,
             m.round, e.what(), back);
      continue;
    } catch (const TimeoutError& e) {
      const std::string back = rollBack();
      GS_LOG(kWarn, "{}: elastic round {} timed out ({}); the job re-forms{}", me_.name, m.round,
             e.what(), back);
      continue;
    }
    if (end == RoundEnd::kRegroup) continue;
    if (end == RoundEnd::kLeft) {  // the job goes on: its last rank 0 reports
      std::printf("gradsync train: %s left the job after step %lld (asked to stop)\n",
                  me_.name.c_str(), static_cast<long long>(member_.progress.step));
      return {.result = result(true)};
    }
    // Finished first: a worker restarted meanwhile must not wait for a round that never forms,
    // whether or not the last checkpoint can be written.
    if (end == RoundEnd::kFinished && m.rank == 0) rendezvous_.finish();
    if (m.rank == 0) member_.checkpoint(true);  // the last state: finished, or to resume
    ElasticOutcome outcome{result(end == RoundEnd::kStopped), m.rank, m.size()};
    if (m.rank == 0 && !member_.options.metricsPath.empty()) {
      writeMetrics(member_.options.metricsPath, member_.options, m.size(), outcome.result);
    }
    return outcome;
  }
}

// The round's transport outlives the round's optimizer, and a failure aborts it before the
// optimizer goes: its engine's waits then end at once, and every other member's transport hears
// of the abort and fails too, so the whole round notices within the step. The hang watch (of the
// next rank's heartbeats) aborts it the same way when that member stands still; it goes first.
RoundEnd ElasticTrainer::trainRound(const ElasticMembership& m) {
  std::unique_ptr<Transport> transport = connectRoundMesh(*store_, m, job_.bootstrap, job_.link);
  std::unique_ptr<ElasticRound> round;
  std::unique_ptr<HangWatch> watch;
  try {
    watch = watchRound(*store_, m, hangBound_, *transport);
    checkSameSettings(*transport, job_.settings);
    // A worker that holds none of the job's state yet (a joiner) takes it in place: should the
    // round fail midway, its tensors, part rank 0's, still do not count (hasState_).
    shareState(*transport, *member_.net, *member_.optimizer, member_.progress,
               member_.localPeriod() > 0 ? &member_.sync : nullptr, hasState_);
    hasState_ = true;
    ElasticProgress& p = member_.progress;
    p.rounds.push_back({m.round, m.size(), p.step, p.data.epoch, p.data.offset});
    if (m.rank == 0) announce(m);
    round = std::make_unique<ElasticRound>(member_, *transport, rendezvous_, m.round);
    const RoundEnd end = trainOnComputeThread(*round);
    // --trace: the last round's members write theirs (a worker lost or gone before has no say).
    if (member_.trace && (end == RoundEnd::kFinished || end == RoundEnd::kStopped)) {
      writeRunTrace(*member_.trace, *transport, member_.options,
                    fmt::format(R"(,"elastic":"{}","rounds":{})", member_.options.elastic,
                                member_.progress.rounds.size()));
    }
    return end;
  } catch (...) {
    transport->abort(std::current_exception());
    throw;
  }
}

std::string ElasticTrainer::rollBack() {
  const int64_t before = member_.progress.step;
  const int64_t step = member_.rollback();
  if (step < 0) return "";
  const char* commit = member_.localPeriod() == 0  ? "complete step"
                       : member_.outer().streams() ? "fragment's merge"
                                                   : "outer step";
  if (step == before) return fmt::format(" from the last {}, step {}", commit, step);
  return fmt::format(" from the last {}, step {}: steps {}-{} are trained again", commit, step,
                     step + 1, before);
}

void ElasticTrainer::announce(const ElasticMembership& m) const {
  const ElasticProgress& p = member_.progress;
  GS_LOG(kInfo, "elastic round {}: {} workers", m.round, m.size());
  if (m.round == 0 || member_.options.quiet) return;
  std::printf("elastic round %lld: %d workers from step %lld (epoch %lld, %zu of %zu samples)\n",
              static_cast<long long>(m.round), m.size(), static_cast<long long>(p.step),
              static_cast<long long>(p.data.epoch + 1), p.data.offset,
              member_.sampler.datasetSize());
  std::fflush(stdout);
}

TrainResult ElasticTrainer::result(bool stopped) const {
  const ElasticProgress& p = member_.progress;
  TrainResult r;
  r.epochs = p.epochs;
  r.rounds = p.rounds;
  r.steps = p.step;
  r.stopped = stopped;
  r.losses = member_.losses;
  r.seconds = p.epochSeconds;
  for (const EpochRecord& e : p.epochs) r.seconds += e.seconds;
  r.samplesPerSecond = r.seconds > 0 ? static_cast<double>(p.samples) / r.seconds : 0;
  r.finalTestAccuracy = p.epochs.empty() ? 0 : p.epochs.back().testAccuracy;
  r.finalHeldOutLoss = p.epochs.empty() ? 0 : p.epochs.back().heldOutLoss;
  r.tokensPerSecond = r.samplesPerSecond * static_cast<double>(gptContextOf(member_.options.model));
  r.compressWarmupSteps = member_.options.compression.warmupSteps;
  r.evaluations = p.evaluations;
  r.parameters = flatParameters(*member_.net);
  r.perStep = perStepOf(member_.sums, member_.stepsRun);
  return r;
}

}  // namespace

void validateElasticOptions(const TrainOptions& options) {
  const ElasticRange range = parseElasticRange(options.elastic);
  if (!range.enabled()) throw ConfigError("--elastic is not set");
  const StrategyKnobs& k = options.strategy;
  const SyncStrategy strategy = SyncStrategy::parse(options.sync);
  const bool local = strategy.kind == SyncStrategy::Kind::kLocalSgd;
  const bool ring = strategy.kind == SyncStrategy::Kind::kSsgd ||
                    strategy.kind == SyncStrategy::Kind::kSharded || local;
  if (!ring || k.ps || k.servers > 0) {
    refuseElastic(
        fmt::format("--sync {}{}", options.sync, k.ps || k.servers > 0 ? " through servers" : ""),
        "parameter servers hold the model apart from the workers, and asgd, ssp and the delayed "
        "strategies let each worker train its own copy, updated by pushes a lost worker may leave "
        "half applied. Use ssgd, sharded, localsgd or diloco");
  }
  if (local && strategy.outer.eager) {
    refuseElastic("diloco's eager=on",
                  "after its first launch a fragment's all-reduce is always in flight, so the "
                  "outer state never settles for a commit without waiting for one (which would "
                  "undo the overlap). Use fragments and delay (delay < H/P) without eager");
  }
  if (local && strategy.outer.perHost) {
    refuseElastic("diloco's group=host",
                  "an elastic job's members join and leave one process at a time, so its rounds "
                  "have no hosts of a fixed size. Use diloco:H with one worker per rank");
  }
  if (!options.traceSteps.empty()) parseStepWindow(options.traceSteps);  // ConfigError if bad
  if (options.freezeBatchNorm)
    refuseElastic("frozen BatchNorm", "only the equivalence tests use it");
  parseDurationSeconds(options.hangTimeout, "--hang-timeout");  // ConfigError if it is none
}

ElasticOutcome runElasticTraining(const ElasticJob& job, const TrainOptions& options) {
  validateTrainOptions(options);
  validateElasticOptions(options);
  if (options.stopOnSignal) installStopHandlers();
  limitComputeThreads(options.threads);
  ElasticTrainer trainer(job, options);
  return trainer.run();
}

}  // namespace gradsync
