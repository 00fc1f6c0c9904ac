// What every trainer of `gradsync train` shares (the data-parallel trainer, Wavelet's waves, the
// pipeline, the recommendation and the elastic trainers): the run's options, what a run reports,
// and the process-level setup their loops have in common (the SyncOptions the flags amount to,
// emulated compute, the compute threads' budget). Torch-free header: the CLI includes it without
// paying for torch headers.
#pragma once

#include <cstdint>
#include <functional>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/policy.h"
#include "data/shard_cache.h"
#include "gradsync/error.h"
#include "gradsync/guard_event.h"
#include "gradsync/sync_options.h"
#include "gradsync/transport.h"
#include "pipeline/pipeline_options.h"
#include "pipeline/wave_placement.h"
#include "sim/model_profile.h"
#include "sync/staleness_report.h"
#include "sync/straggler.h"
#include "sync/strategy.h"
#include "torch/models/catalog.h"

namespace gradsync {

struct TrainOptions {
  // mlp | cnn | resnet20 | vgg11 | cnn-gn | vgg11-gn, or the language model
  // gpt[:layers=L,width=D,heads=A,context=T] (torch/models/gpt_config.h)
  std::string model = "cnn";
  // "real": the model computes on this host; "emulate:PROFILE": emulated accelerator compute
  // with a profile's shapes and times (a built-in name or a JSON file; emulated_model.h).
  std::string compute = "real";
  double computeScale = 1;  // emulated compute: the profile's times multiplied by this
  // fashion-mnist | synthetic | text[:PATH] (gpt's: Debian's fortunes, or PATH's UTF-8 text)
  std::string dataset = "fashion-mnist";
  std::string dataDir = "/usr/share/datasets/fashion-mnist";
  // --data-url: the data comes from shards on this HTTP store (`gradsync shard` writes them),
  // cached on local disk (--cache-dir; "" = defaultCacheDirectory(dataUrl)) and in memory
  // (--cache-memory MiB); each rank trains on its own partition (torch/loop/remote_data_source.h).
  std::string dataUrl;
  std::string cacheDir;
  double cacheMemoryMiB = 1024;
  int epochs = 2;
  int64_t steps = 0;      // > 0: stop after this many steps (overrides epochs)
  size_t batchSize = 64;  // per worker; the global batch is workers x this
  double lr = 0.05;
  double momentum = 0.9;  // sgd's
  // --optimizer sgd | adamw | sign (torch/loop/training_optimizer.h); --weight-decay: adamw's
  // and sign's decoupled weight decay.
  std::string optimizer = "sgd";
  double weightDecay = 0.01;
  // --warmup-steps W: the learning rate rises linearly over the first W steps; --lr-schedule
  // constant | cosine: then stays at --lr, or falls along a cosine to a tenth of it at the end.
  int64_t warmupSteps = 0;
  std::string lrSchedule = "constant";
  double clipGradNorm = 0;  // --clip-grad-norm: > 0 clips the gradients' global L2 norm to it
  uint64_t seed = 0;
  int threads = 1;                  // torch intra-op threads per rank
  std::string schedule = "wfbp";    // fifo | wfbp | fusion:MB | p3[:slice=N,window=W]
  std::string sync = "ssgd";        // sync/strategy.h: ssgd | sharded | asgd | ssp:S | odsgd | ...
  StrategyKnobs strategy;           // --ps, --servers and the delayed strategies' knobs
  bool fusedUpdate = true;          // --fused-update: the optimizer step through flat buffers
  double lars = 0;                  // --lars: LARS's trust coefficient (0: plain SGD)
  CompressionConfig compression;    // --compress and its companions (compress/policy.h)
  size_t syntheticSamples = 16384;  // size of the synthetic training set
  std::string metricsPath;          // JSON metrics (rank 0 writes)
  std::string checkpointDir;        // "" = no checkpoints
  int64_t checkpointEvery = 0;      // steps between checkpoints (0: only at the end)
  int64_t evalEvery = 0;            // > 0: also evaluate every N steps (time-to-accuracy)
  size_t evalSamples = 0;           // > 0: those evaluations use the first N test samples
  bool resume = false;              // continue from the newest checkpoint, if any
  std::string tracePath;            // Chrome trace of every rank, merged (rank 0 writes)
  std::string traceSteps;           // "A:B" window of steps to trace ("" = default window)
  bool quiet = false;               // no progress display
  // BatchNorm normalises with its running statistics and does not update them (frozen, as in
  // fine-tuning). The equivalence tests use it: batch statistics over a few samples turn a
  // one-ulp difference into percent-level differences within a few steps.
  bool freezeBatchNorm = false;
  // SIGTERM or SIGINT stop the run gracefully (common/stop_request.h): about every half second
  // of training, after the same step, the ranks agree whether any rank was asked to stop, and
  // then all of them finish the step, write a final checkpoint (with --checkpoint-dir) and
  // return TrainResult::stopped. `gradsync train` turns it on.
  bool stopOnSignal = false;
  // --inject-slow-rank R:MS ("": none): rank R's compute takes MS milliseconds longer every
  // step. Fault injection, to see straggler detection name it (tests, demos).
  std::string injectSlowRank;
  // --pipeline S and its companions: the model split into stages (torch/pipeline/pipeline.h).
  PipelineOptions pipeline;
  // --elastic MIN:MAX ("": a fixed set of workers): the job goes on with at least MIN workers
  // when some are lost, and takes in up to MAX (torch/elastic/trainer.h, docs/cluster.md).
  std::string elastic;
  // --record-samples DIR (elastic runs): each worker writes the dataset indices of every step it
  // trains, so that a run can be checked to use every sample once per epoch.
  std::string recordSamples;
  // --hang-timeout (elastic runs; a duration, "0": off): a member whose heartbeats stop this long
  // (SIGSTOP, frozen, swapping) is evicted within about 1.5 times it, whatever --timeout says
  // (job/hang_watch.h).
  std::string hangTimeout = "10s";
  // --waves K: Wavelet's tick-tock waves per worker (torch/waves/wavelet_trainer.h; 1: none),
  // training one set of weights per worker as --wave-consistency says: "shared" or "accumulate".
  // With
  // --pipeline S: model-parallel Wavelet, K pipeline replicas placed on S devices
  // (torch/pipeline/pipeline.h).
  int waves = 1;
  std::string waveConsistency = "accumulate";
};

enum class WavePhase { kForward, kBackward };

// One pass of a Wavelet wave through a gate (torch/waves/gates.h): seconds since the gates were
// made (tests check the order).
struct WaveInterval {
  int wave = 0;
  int64_t step = 0;  // the wave's own step (0, 1, ...)
  WavePhase phase = WavePhase::kForward;
  double start = 0, end = 0;
};

struct EpochRecord {
  int epoch = 0;
  double trainLoss = 0;     // mean over the epoch's steps and ranks
  double testAccuracy = 0;  // on the whole test set (NaN for a language model)
  double seconds = 0;       // training time of the epoch (evaluation excluded)
  double samplesPerSecond = 0;
  double dataSeconds = 0;  // of it, this rank's training thread getting its batches
  double heldOutLoss = 0;  // a language model's, in nats per token (NaN for a classifier)
};

// Means per step over the whole run.
struct StepProfile {
  double computeMs = 0;      // forward + backward
  double commMs = 0;         // time the communication thread spent in collectives
  double exposedCommMs = 0;  // time the training thread waited for communication
  double optimizerMs = 0;
  double stepMs = 0;
  double bytesSent = 0;   // by this rank
  double denseBytes = 0;  // what a dense ring allreduce would have made this rank send
  double encodeMs = 0;    // compressors' encoding time (part of commMs)
  double decodeMs = 0;    // compressors' decoding time (part of commMs)
  // Emulated compute: the device's work (the profile's times, exactly), of which computeMs and
  // optimizerMs are the host's view with its wake-ups and waits; 0 on real compute.
  double deviceMs = 0;
};

// `sums` over a run's steps divided by `steps` (at least 1): a TrainResult's perStep.
inline StepProfile perStepOf(const StepProfile& sums, int64_t steps) {
  const double n = static_cast<double>(steps > 1 ? steps : 1);
  return {sums.computeMs / n, sums.commMs / n,    sums.exposedCommMs / n, sums.optimizerMs / n,
          sums.stepMs / n,    sums.bytesSent / n, sums.denseBytes / n,    sums.encodeMs / n,
          sums.decodeMs / n,  sums.deviceMs / n};
}

// What an evaluation measured: a classifier's accuracy or a language model's held-out loss (the
// other NaN).
struct Quality {
  double testAccuracy;
  double heldOutLoss;
};

// A test-set evaluation during training (--eval-every, and every epoch's end).
struct Evaluation {
  int64_t step = 0;         // steps completed
  double seconds = 0;       // training time so far (evaluations excluded)
  double testAccuracy = 0;  // on the whole test set (NaN for a language model)
  double heldOutLoss = 0;   // a language model's, nats per token (NaN for a classifier)
};

// A round of an elastic run: its members trained from this step on.
struct RoundRecord {
  int64_t round = 0;
  int workers = 0;
  int64_t firstStep = 0;  // steps completed when it began
  int64_t epoch = 0;      // where the data stood then (0-based epoch, samples of it used)
  size_t offset = 0;
};

struct TrainResult {
  std::vector<EpochRecord> epochs;
  std::vector<Evaluation> evaluations;  // of this run (a resumed run starts a new list)
  std::vector<float> losses;      // this rank's loss at every step (for reproducibility checks)
  std::vector<float> parameters;  // the final parameters, flattened in registration order
  int64_t steps = 0;
  double seconds = 0;           // training time (evaluation excluded)
  double samplesPerSecond = 0;  // global
  double tokensPerSecond = 0;   // global, a language model's (samples x context); 0 otherwise
  double finalTestAccuracy = 0;
  double finalHeldOutLoss = 0;  // a language model's, nats per token (NaN for a classifier)
  StepProfile perStep;
  std::vector<StragglerReport> stragglers;  // ranks named persistently slower (sync/straggler.h)
  std::vector<GuardEvent> guard;  // units the compression guard made dense (compress/guard.h)
  std::vector<RankStaleness> staleness;  // asgd, ssp: every worker's (sync/staleness_report.h)
  int64_t fusedUpdateSteps = 0;          // optimizer steps that took FusedSGD's flat-buffer path
  int64_t compressWarmupSteps = 0;  // the dense steps it began with (--compress-warmup, resolved)
  std::string
      compressSpec;  // --compress as run, with what auto resolved (dgc's ramp); "": as given
  std::optional<ShardCacheStats> dataCache;  // --data-url: this rank's cache counters at the end
  std::string schedule;        // the schedule used: --schedule's, or what --schedule auto chose
  std::string scheduleTuning;  // --schedule auto: the candidates' step times and the choice
  bool stopped = false;  // a stop was asked for (stopOnSignal): the run ended early, checkpointed
  std::vector<RoundRecord> rounds;  // elastic runs: every round the job went through, in order
  std::vector<WaveInterval> waveIntervals;  // --waves: every forward and backward, as they ran
  std::vector<RankPlacement> placement;     // pinned pipelines: every rank's device and core
};

// A language model's loss in nats per byte token, in bits per byte.
inline double bitsPerByte(double natsPerToken) {
  return natsPerToken / std::numbers::ln2;
}

// `gradsync train`'s exit status after a graceful stop (EX_TEMPFAIL: "try again"), so that a
// scheduler can requeue the job and resume it with --resume.
inline constexpr int kStoppedExitCode = 75;

// The milliseconds --inject-slow-rank adds to `rank`'s compute per step (0 for other ranks).
// Throws ConfigError naming the expected form "R:MS".
double injectedSlowdownMs(const std::string& spec, int rank);
// Whether the run emulates accelerator compute (--compute emulate:PROFILE).
bool emulatesCompute(const TrainOptions& options);
// The emulated run's profile, its times multiplied by --compute-scale. Throws ConfigError.
ModelProfile emulatedProfile(const TrainOptions& options);
// The options a run of `workers` workers actually uses: with emulated compute the profile's
// batch (its times are for that batch) and synthetic placeholder inputs, enough of them that an
// epoch lasts 256 steps. Unchanged otherwise. Idempotent.
TrainOptions resolveCompute(TrainOptions options, int workers);
// The parameters of the model a run trains: --model's, or the emulated profile's.
std::vector<TensorShape> describeTrainingModel(const TrainOptions& options);

// The learning rate of step `step` (0-based) of a run of `total` steps: --lr, rising linearly
// from lr/W to lr over the first W = --warmup-steps steps; then constant, or (--lr-schedule
// cosine) falling along half a cosine to a tenth of --lr at the last step. Implemented in
// training_optimizer.cc, which applies it.
double scheduledLearningRate(const TrainOptions& options, int64_t step, int64_t total);

// A language model's defaults (--model gpt) for the flags a command line did not give (`given`
// says whether one was): --dataset text, --optimizer adamw, --lr 0.003, --warmup-steps 50,
// --lr-schedule cosine, --clip-grad-norm 1 (docs/cli.md). Other models' options unchanged.
TrainOptions withModelDefaults(TrainOptions options,
                               const std::function<bool(const std::string& flag)>& given);

// The options with --compress-warmup auto (kAutoWarmup) replaced by its steps for an epoch of
// `stepsPerEpoch` steps (compress/policy.h); other options unchanged.
TrainOptions withResolvedWarmup(TrainOptions options, size_t stepsPerEpoch);

// The public SyncOptions that train's flags amount to (the DistributedOptimizer it trains with).
SyncOptions syncOptionsOf(const TrainOptions& options);

// Bounds this process's compute pools (torch's and OpenBLAS's) to `threads`, as every rank of
// `gradsync train --threads` does; the profiler measures under the same bound.
void limitComputeThreads(int threads);
// Lowers the calling thread's priority, as train's training thread runs (trainer.cc says why).
void yieldToCommunication();

// Whether `rank` of a job of `worldSize` ranks is a separate parameter server.
inline bool isServerRank(const TrainOptions& options, int rank, int worldSize) {
  return options.strategy.servers > 0 && rank >= worldSize - options.strategy.servers;
}

// Rethrows `lost`, naming the peer by its role when it is a separate parameter server: a worker
// may notice a lost server first in any collective (the transport watches every peer), or hear
// of it from a worker that noticed first (its abort says where the failure began: error.h's
// failureOrigin), and the error then says "lost parameter server S (rank R)", as the servers'
// own client does.
[[noreturn]] void rethrowNamingServer(const PeerLostError& lost, const TrainOptions& options,
                                      int worldSize);

}  // namespace gradsync
