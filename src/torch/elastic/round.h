// One round of an elastic run (torch/elastic/trainer.h): its members train data-parallel through
// a DistributedOptimizer over the round's own transport, from the state they share
// (torch/elastic/state.h), until the training is over, a worker waits to come in, or a stop is
// asked for. A lost member makes run() throw what the transport throws (PeerLostError,
// TimeoutError); the caller aborts the transport, rolls the member back to its last commit
// (ElasticMember::rollback) and re-forms the job from there.
//
// What a commit is (docs/cluster.md, "Elastic workers"): with ssgd every step (gradient mode: a
// step's update is applied whole, after every average arrived, or not at all, so the state after
// the last complete step is always committed); with p3 and sharded, whose engine applies a step's
// update piece by piece as the averages arrive, a copy of the state after each complete step (and
// at a round's start), which a step cut by a failure goes back to; with localsgd and diloco, whose
// members train alone between outer steps, the state after each outer step (Streaming DiLoCo:
// after each fragment's merge, θ_global shared and each member's own fragments beside it) and at
// a round's start: the steps since are trained again by the next round, which starts there. Such
// a round regroups and stops only at commits, and ends with an outer step.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "ckpt/checkpoint_dir.h"
#include "data/elastic_sampler.h"
#include "data/sample_log.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "gradsync/trace.h"
#include "job/elastic_rendezvous.h"
#include "sync/strategy.h"
#include "torch/elastic/snapshot.h"
#include "torch/elastic/state.h"
#include "torch/loop/data_source.h"
#include "torch/loop/progress.h"

namespace gradsync {

// How a round ended for this member.
enum class RoundEnd {
  kFinished,  // the training is over
  kRegroup,   // the members go on in the next round (a worker waits to come in, or one leaves)
  kLeft,      // this member was asked to stop (SIGTERM, SIGINT) and leaves; the others go on
  kStopped,   // every member stops (all were asked, or too few would be left)
};

// What a worker keeps from round to round: the shared state (model, optimizer, progress), the
// data, and its own measures.
struct ElasticMember {
  ElasticMember(const TrainOptions& given, ElasticRange range);

  const ElasticRange range;
  std::unique_ptr<DataSource> data;
  ElasticSampler sampler;
  const TrainOptions options;  // as given, with --compress-warmup auto resolved
  std::shared_ptr<Model> net;
  // --optimizer's: SGD with momentum, or AdamW (a language model's); stepped after
  // prepareOptimizerStep (the learning-rate schedule, clipping) as the data-parallel trainer does.
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  ElasticProgress progress;
  std::unique_ptr<SampleLog> samples;          // null without --record-samples
  std::unique_ptr<CheckpointDir> checkpoints;  // null without --checkpoint-dir
  // --trace: this process's events over its rounds, as process `slot` (its worker's), written
  // by the last round (ElasticTrainer); null without --trace.
  std::unique_ptr<TraceRecorder> trace;

  // Writes the shared state as the checkpoint of progress.step (torch/elastic/checkpoint.h),
  // unless that step's is written already. Rank 0's alone (one writer per directory). A
  // periodic one that cannot be written (SystemError: disk full...) is logged and training goes
  // on; the `last` one (the run finished or stops) throws.
  void checkpoint(bool last);
  // Takes the newest checkpoint's state (--resume); false if there is none.
  bool resume();

  // The steps of the whole run (--steps, or the epochs' at the global batch): the schedule's.
  int64_t totalSteps() const;

  // localsgd and diloco: H, the local steps between outer steps; 0 otherwise.
  int localPeriod() const { return localPeriod_; }
  // Local period: whether the job's state is committed after step `step`: where the outer state
  // settles (outerStateSettlesAfter: after each outer step; with Streaming DiLoCo's fragments or
  // delay after each fragment's merge, every H/P steps), the round's commit being its settled
  // state (DistributedOptimizer::settledSyncState).
  bool commitsAfter(int64_t step) const;
  const OuterOptions& outer() const { return outer_; }  // local period: the outer step's
  // p3 and sharded: the engine applies the update (update mode), and every step is committed.
  bool updatesInEngine() const { return updatesInEngine_; }
  // sharded: each member keeps the optimizer state (SGD's velocity, Adam's moments) of its own
  // shard only, so no member can commit or give all of it; it restarts at zero with every round,
  // Adam's as a fresh Adam (its own count of steps, docs/cluster.md).
  bool shardsVelocity() const { return shardsVelocity_; }
  // Local period or update mode: keeps the state as it is now (the model, the optimizer, the
  // progress, the losses' count) and `sync`, the round's DistributedOptimizer::syncState() (the
  // outer optimizer's state; empty in update mode), as the last commit. After each outer step
  // (each step, in update mode) and at a round's start.
  void commit(std::vector<uint8_t> sync);
  // Goes back to the last commit (after a failed round), `sync` included; returns its step, or -1
  // if there is none (no commit yet, or ssgd: every complete step is committed).
  int64_t rollback();
  // Streaming DiLoCo, at a round's start from the step of this member's last commit (a survivor
  // of the round before): its own parameters and inner optimizer as it committed them, i.e. its
  // local progress on the fragments not merged then, over the θ_global every member was given.
  // False, changing nothing, if its last commit is of another step (a joiner; a member behind).
  bool restoreOwnCommit();
  // Update mode, at a round's end: the last commit's optimizer state (p3: SGD's velocity, which
  // the engine kept during the round) back into the optimizer, to be shared, saved and handed to
  // the next round's engine.
  void restoreCommittedOptimizer();
  // The step of the last commit; -1 if none.
  int64_t committedStep() const { return hasCommit_ ? last_.progress.step : -1; }
  // The committed synchronization state (local period; empty before the first round): rank 0 of a
  // round gives its own to the others (shareState), and the round loads it.
  std::vector<uint8_t> sync;

  // This process's own: its losses, and its step profile's sums over the steps it ran.
  std::vector<float> losses;
  StepProfile sums;
  int64_t stepsRun = 0;
  double stepSeconds = 0;  // the latest step's duration

 private:
  struct Commit {
    StateSnapshot state;        // the model and the optimizer
    std::vector<uint8_t> sync;  // `sync` then: a round's shareState may replace it before failing
    ElasticProgress progress;
    size_t losses = 0;
  };
  int localPeriod_ = 0;
  OuterOptions outer_;  // local period: when it settles
  bool updatesInEngine_ = false;
  bool shardsVelocity_ = false;
  bool hasCommit_ = false;
  Commit last_;
};

class ElasticRound {
 public:
  // Builds the round's DistributedOptimizer (collective: every member constructs it).
  ElasticRound(ElasticMember& member, Transport& transport, ElasticRendezvous& rendezvous,
               int64_t round);
  // Adds the round's communication figures to the member's sums.
  ~ElasticRound();
  ElasticRound(const ElasticRound&) = delete;
  ElasticRound& operator=(const ElasticRound&) = delete;
  RoundEnd run();

 private:
  RoundEnd train();
  // Update mode: the state after the step (or the evaluation) as the member's commit, and the
  // checkpoint if `checkpoint` (rank 0), each with p3's velocity, which the engine keeps.
  void commitStep(bool checkpoint);
  bool trainingOver() const;
  float trainStep();
  void traceStep(TraceRecorder& trace);
  // At a step boundary (every ~0.5 s of training, and at an epoch's end when `force`), one
  // allreduce agrees on stops, on a worker waiting to come in, and on the losses and time since
  // the last check; returns how the round ends, if it does.
  // Local period: the round may end only at an outer step (`canEnd`); elsewhere a check agrees
  // and records, and its decisions wait for the next outer step.
  std::optional<RoundEnd> check(bool force, bool canEnd = true);
  // Local period, at the run's end: an outer step now, if the last step was not one, then a
  // commit.
  void finishLocal();
  void finishEpoch();
  void evaluateBetweenSteps();

  ElasticMember& member_;
  Transport& transport_;
  ElasticRendezvous& rendezvous_;
  const int64_t round_;
  DistributedOptimizer distributed_;
  Progress display_;
  int64_t nextCheck_;
  float lossSinceCheck_ = 0;
  float stepsSinceCheck_ = 0;
  float secondsSinceCheck_ = 0;
  bool firstStep_ = true;    // the round's first step marks the round in the trace
  int64_t finishedAt_ = -1;  // the step finishLocal took the run's last outer step at
  std::vector<float> inputs_;
  std::vector<int64_t> labels_;
};

}  // namespace gradsync
