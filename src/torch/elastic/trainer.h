// `gradsync train --elastic MIN:MAX`: data-parallel training whose workers may come and go
// (docs/cluster.md, "Elastic workers"). Torch-free header.
//
// The job runs in rounds (job/elastic_rendezvous.h). In each, the members connect a mesh of
// their own, rank 0 gives every member its state (model, optimizer, progress:
// torch/elastic/state.h), and they train (torch/elastic/round.h). When a worker is lost, the
// others' transports fail within the step; each aborts its transport (which tells the rest at
// once), keeps its model as it stood after its last complete step, and enters the next round.
// The survivors there take the most advanced state among them, renumber, rebuild the ring, and
// go on from the same place in the data (data/elastic_sampler.h: no sample skipped or repeated
// within the epoch). A worker that starts later (restarted by `gradsync launch --max-restarts`,
// or a new one) waits for the next round, which the members start at their next step-boundary
// check, and gets the current state there.
//
// What it runs: ring ssgd in gradient mode (--schedule fifo, wfbp, fusion:MB), dense or with any
// compressor (each round's compressors start afresh: torch/elastic/round.cc), any model and
// dataset, over TCP (--tls too), with checkpoints that resume on any number of workers within
// the range (torch/elastic/checkpoint.h). Refused, with the reason (validateElasticOptions): p3
// and sharded, parameter servers and the other strategies, traces.
#pragma once

#include "gradsync/bootstrap.h"
#include "gradsync/transport.h"
#include "job/agreement.h"
#include "torch/train/trainer.h"

namespace gradsync {

// One worker's place in an elastic job, as it was launched.
struct ElasticJob {
  BootstrapConfig bootstrap;  // rank: this worker's slot; size: the workers launched; the store
  TransportOptions link;      // link emulation (the timeout is the bootstrap's)
  Settings settings;          // what every worker must share (checked as it comes in)
  int restartCount = 0;       // GRADSYNC_RESTART_COUNT: the launcher restarted this slot so often
};

struct ElasticOutcome {
  TrainResult result;
  int rank = -1;    // in the last round this worker trained in; -1: it never got in, or left
  int workers = 0;  // that round's members
};

// Throws ConfigError for what an elastic run does not support, saying why, before any work.
void validateElasticOptions(const TrainOptions& options);

// Trains as one worker of the job until the training is over (every member returns; a worker
// still waiting to come in returns rank -1), this worker is asked to stop (result.stopped; rank
// -1 when it left alone and the others go on), or the job cannot go on: fewer than MIN workers are
// left (PeerLostError naming the lost ones), a round cannot form (TimeoutError), a worker with
// other settings (ConfigError). Rank 0 of the last round writes --metrics, with the rounds.
ElasticOutcome runElasticTraining(const ElasticJob& job, const TrainOptions& options);

}  // namespace gradsync
