// DistributedOptimizer: data-parallel training of any torch::nn::Module with any
// torch::optim::Optimizer, in Horovod's shape. examples/02_own_model shows a full program:
//
//   gradsync::Context context = gradsync::init();
//   gradsync::broadcastParameters(*model, context.transport());  // gradsync/torch/collectives.h
//   torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
//   gradsync::DistributedOptimizer distributed(optimizer, model.ptr(), context.transport(),
//                                              {.schedule = "wfbp", .compress = "topk:0.01"});
//   for (...) {
//     distributed.zeroGrad();
//     torch::Tensor loss = lossOf(model->forward(x), y);  // on this rank's share of the batch
//     loss.backward();                                    // gradients travel during backward
//     distributed.step();                                 // averages in .grad, then optimizer
//   }
//
// With SyncOptions::servers the job's last ranks are parameter servers: they call serve()
// instead (see isServer). Parameters are contiguous float32 tensors on the CPU. Requires the
// library gradsync::torch (find_package(gradsync COMPONENTS torch)); docs/api.md documents every
// call.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "gradsync/guard_event.h"
#include "gradsync/sync_options.h"
#include "gradsync/trace.h"
#include "gradsync/transport.h"

namespace gradsync {

class CompressedMomentum;
class DistributedModel;
class OuterOptimizer;
class ScheduleTuning;

// What synchronizing has cost on this rank so far, summed over every step.
struct SyncStats {
  uint64_t bytesSent = 0;    // what this rank sent for gradients (pushes and replies included)
  uint64_t denseBytes = 0;   // what dense ring allreduces of the same gradients would send
  double commSeconds = 0;    // time during which communication was in flight
  double encodeSeconds = 0;  // compressors' encoding (part of commSeconds)
  double decodeSeconds = 0;  // compressors' decoding (part of commSeconds)
  // Time the training thread waited for parameters (update mode: the forward's waits, and
  // waitForParameters): communication that compute did not hide.
  double waitSeconds = 0;
  // asgd and ssp: the pushes the servers answered, and the sum and maximum of their staleness
  // (the updates other workers applied to a unit between this rank's pull of it and its push's
  // update). Zero under every other strategy.
  uint64_t asyncPushes = 0;
  uint64_t stalenessSum = 0;
  uint64_t stalenessMax = 0;
};

// Averages gradients across the ranks of `transport` while backward runs, then steps the
// user's optimizer (gradient mode: fifo, wfbp, fusion, any compressor, any optimizer); or, with
// p3 and sharded (update mode), applies the optimizer's rule (SGD, Adam or AdamW, read from its
// options) in the engine as each slice's average arrives, so the update overlaps the next
// forward. In update mode the optimizer's state lives in the engine: the torch optimizer itself
// never steps and its state stays empty. Through parameter servers (SyncOptions::sync asgd,
// ssp, odsgd, ssdsgd, cdsgd, or ssgd with parameterServers; one server thread per rank) each
// worker pushes gradients (compressed, if asked) and the servers apply SGD with the
// optimizer's learning rate and momentum: update mode too. With localsgd the optimizer steps
// locally and the models are averaged every H steps. examples/03_parameter_server shows both.
//
// Not thread-safe: one training thread calls every method. Collective: every rank constructs
// it with the same parameter names and shapes and the same options, or the constructor throws
// ConfigError on every rank naming the first difference and its rank. A failed peer makes the
// next call throw PeerLostError naming it, never hang.
class DistributedOptimizer {
 public:
  // Hooks every parameter of `module` that requires a gradient; the optimizer's parameters must
  // be among them. Keeps `optimizer` and `transport` by reference (they must outlive this) and
  // shares `module`. With SyncOptions::servers, `transport` spans the whole job, servers
  // included. Throws ConfigError for an impossible combination: update mode with an optimizer
  // other than SGD, Adam and AdamW, with amsgrad, or with groups whose options differ (the engine
  // applies one rule; dgc's parameters may have a group of their own with momentum 0); parameter
  // servers with anything but SGD with momentum (what the servers apply); a compressor that
  // applies momentum itself (dgc) in an SGD group with momentum (see absorbsMomentum), or one
  // that cannot push to servers; parameters that are not contiguous CPU float32; this rank
  // being a separate server.
  DistributedOptimizer(torch::optim::Optimizer& optimizer,
                       std::shared_ptr<torch::nn::Module> module, Transport& transport,
                       SyncOptions options = {});
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Before a forward: in update mode, waits until every parameter holds the last step's update
  // (a forward may instead wait layer by layer with waitFor); then zeroes the gradients.
  void zeroGrad();
  // After backward. Gradient mode: waits for the averaged gradients, writes them into each
  // parameter's .grad and steps the optimizer. Update mode: returns at once (the engine
  // updates); throws ConfigError if the optimizer's learning rate changed since construction
  // (the engine would not follow a schedule). Parameters no rank used this step get a zero
  // average. localsgd and diloco: steps the optimizer on this rank's own gradients, then
  // endLocalStep(). SyncOptions::compressMomentum, past the dense warm-up: exchanges the ranks'
  // momenta instead and applies Adam's update over the frozen second moment itself (the
  // optimizer's step() is not called; its state is updated); with p3 the engine does, keeping
  // the moments itself.
  void step();
  // localsgd and diloco, for a loop that steps its optimizer itself (clipping, schedules): after
  // each local step, the outer work due then (every H steps the outer step; Streaming DiLoCo a
  // fragment every H/P). Collective: every rank calls it after every local step. ConfigError for
  // the other strategies.
  void endLocalStep();
  // Gradient mode: as step() without stepping, e.g. to clip the averaged gradients first; then
  // call the optimizer's step() directly. ConfigError once exchangesMomenta(). With diloco's
  // group=host: the average over this host's ranks, before the local step and endLocalStep()
  // (ConfigError for the other local strategies, whose steps use each rank's own gradients).
  void synchronize();
  // SyncOptions::compressMomentum past its dense warm-up in gradient mode: the ranks' momenta
  // are averaged (during backward) and step() applies Adam's update; synchronize() is refused.
  // Before that, without the option and in update mode (p3: the engine's business), false.
  bool exchangesMomenta() const;
  // Update mode: waits for the parameters of `layer` (a submodule) only; call it in a forward
  // before each layer runs, to overlap the previous step's communication. No-op otherwise.
  void waitFor(const torch::nn::Module& layer);
  // Waits for every parameter (update mode); call before reading or saving them.
  void waitForParameters();
  // Makes every rank's parameters the one global model, where ranks may differ: the servers'
  // model (asgd, ssp and the delayed strategies let each worker train its own copy) or the
  // average (localsgd, between its periodic averages). No-op otherwise (the replicas are
  // equal). Collective: every rank calls it at the same step; e.g. before evaluating or saving.
  void synchronizeModel();
  // Whether the engine applies the update (p3, sharded, parameter servers): then step() does
  // not call the optimizer.
  bool updatesParameters() const;
  // The schedule in use: SyncOptions::schedule's, or with "auto" the candidate on trial and,
  // once tuned, the choice (e.g. "p3:slice=640000,window=2").
  std::string schedule() const;
  // With "auto": every candidate tried with its median step time, then the choice (e.g.
  // "p3:slice=40000,window=2 8.9 ms, p3:slice=160000,window=2 6.4 ms, ... -> chose
  // p3:slice=160000,window=2"); empty otherwise.
  std::string scheduleTuning() const;
  // Bytes this rank sent for gradients so far, and what dense ring allreduces would have sent.
  uint64_t bytesSent() const;
  uint64_t denseBytes() const;
  SyncStats stats() const;
  // The compression guard's decisions so far (SyncOptions::guard): each unit it made dense,
  // from which step and why; the same on every rank. Empty when it never acted.
  std::vector<GuardEvent> guardEvents() const;
  // Optional: this rank's loss of the current step, after its forward and before step() (or
  // the end of its backward), for the guard's loss signal: a window's mean loss over the ranks
  // against the dense warm-up's last window (docs/algorithms.md, "The compression guardrail").
  // Without it (or without a warm-up) the guard watches the other signals only. Training
  // thread; nothing without compression or with the guard off.
  void reportLoss(double loss);
  // Records the engine's communication (queueing and each operation, on the recorder's
  // communication lane) and the training thread's waits. Null: none. Set before the first step;
  // the recorder must outlive this object.
  void setTrace(TraceRecorder* trace);
  // The global step the next step() is (compression warm-up, seeds, the delayed strategies'
  // warm-up); set it after resuming from a checkpoint, before the first step.
  void setStep(int64_t step);

  // Checkpoints. In update mode the optimizer's state lives in the engine or the servers:
  // withOptimizerState(fn) copies it into the torch optimizer's state (SGD's momentum buffers;
  // Adam's and AdamW's moments and step count; sharded gathers it whole) for `fn` (which saves
  // the optimizer as usual) and clears it again afterwards, and, through servers, runs `fn` on
  // the global model (as withGlobalModel). loadOptimizerState() hands a loaded optimizer's state
  // to the engine or the servers (a parameter without state starts from zeros) and clears it
  // from the optimizer; it maps onto any number of workers. In gradient mode the optimizer keeps
  // its own state: `fn` just runs, and loading does nothing. Between steps; collective; servers:
  // load before the first step.
  void withOptimizerState(const std::function<void()>& fn);
  void loadOptimizerState();
  // This rank's synchronization state beyond the model and the optimizer: the compressors'
  // (error-feedback residuals, PowerSGD's Q, DGC's momentum and velocity, GradiVeQ's basis),
  // the delayed strategies' local state (the last two pulled
  // models, the local velocity, CD-SGD's residual) and, where each rank trains its own copy
  // (asgd, ssp, the delayed strategies, localsgd), this rank's parameters (and with localsgd its
  // optimizer). Opaque bytes that differ per rank: save every rank's beside the model and the
  // optimizer (e.g. gathered to rank 0 with allgatherBytes), and give each rank its own back
  // with loadSyncState after loadOptimizerState, before the first step; the run then repeats
  // the uninterrupted one bitwise. Not collective; call syncState() before withOptimizerState.
  // loadSyncState throws DataError for state of another run (another schedule, compressor,
  // strategy or model), saying what differs.
  std::vector<uint8_t> syncState();
  void loadSyncState(std::span<const uint8_t> state);
  // Instead of loadSyncState, on a resume with another number of workers: adopts from the
  // syncState() of one rank of the saving run (any: e.g. rank % saved workers) what maps onto a
  // new membership, and starts the rest afresh, as at a run's start: the compressors' state
  // (residuals, Q, DGC's buffers, the guard's) and the own copies and pulled models of asgd,
  // ssp and the delayed strategies (each worker's copy starts from the loaded model). localsgd
  // and diloco adopt the rank's parameters, inner optimizer and outer state, which is the job's
  // only at an outer step: a state saved between two (`step`, the steps the saving run had
  // completed, is not one where the outer state settles: a multiple of H, or with fragments or
  // a delay a fragment's merge; or θ_global is not the parameters) or with a fragment
  // in flight is refused (ConfigError), as is a state written before 2026-12-01 with Adam's
  // moments in update mode (p3, sharded: kept per rank then; they now travel with the optimizer,
  // withOptimizerState). Same call order as loadSyncState; not collective.
  void adoptSyncState(std::span<const uint8_t> state, int64_t step);
  // localsgd and diloco: syncState() with the parameters every rank can restart from alike
  // instead of this rank's own: θ_global, the model of the last outer update (localsgd: the
  // parameters, its average). With Streaming DiLoCo each fragment's is that of its own last
  // merge, and the local steps since are left out. Taken where the outer state settles (after an
  // outer step; with fragments or a delay after each fragment's merge) and loaded with
  // loadSyncState on every member, it restarts them all from the same state: an elastic round's
  // commit (docs/cluster.md). ConfigError with a fragment's all-reduce in flight (eager=on) or
  // for the other strategies. Not collective.
  std::vector<uint8_t> settledSyncState();
  // Runs `fn` with this worker's parameters being the one global model (the servers', where
  // workers train their own copies: asgd, ssp, the delayed strategies), then gives the worker
  // its own parameters back, so that evaluating or saving the global model leaves training
  // undisturbed. Without servers `fn` just runs. Collective; `fn` may use collectives.
  void withGlobalModel(const std::function<void()>& fn);
  // Averages the module's floating-point buffers (BatchNorm running statistics) across the
  // workers, so evaluation and checkpoints see one model. Collective.
  void averageBuffers();
  // The workers' transport: with SyncOptions::servers, the training ranks alone (rank and size
  // among the workers, for the program's own collectives); else the transport given.
  Transport& workers();

  // Which parameters of `module` (those requiring a gradient, in order) have a compressor that
  // applies momentum itself under `options` (dgc's momentum correction): put them in an SGD
  // group with momentum 0; the compressor applies the other group's momentum.
  static std::vector<bool> absorbsMomentum(const torch::nn::Module& module,
                                           const SyncOptions& options);
  // Whether `rank` of a job of `size` ranks is a separate parameter server (SyncOptions::servers).
  static bool isServer(int rank, int size, const SyncOptions& options) {
    return options.servers > 0 && rank >= size - options.servers;
  }
  // A separate parameter server's life, instead of training: serves `module`'s parameters (their
  // shapes; rank 0 sends the values) with `optimizer`'s SGD learning rate and momentum until
  // every worker has stopped. Blocking; rethrows a failure (a lost worker, named).
  static void serve(const torch::optim::Optimizer& optimizer, const torch::nn::Module& module,
                    Transport& transport, const SyncOptions& options);

  // With SyncOptions::join, for ranks whose data ends before the others' (Horovod's and DDP's
  // join): a rank out of data calls join(), which takes part in the other ranks' remaining
  // steps with zero gradients (their averages are over the ranks that still have data), steps
  // its optimizer with the same averages (so every replica stays the same) and returns once
  // every rank has joined. Every rank calls it once, after its last step. Without
  // SyncOptions::join it throws ConfigError; a rank that just stops instead leaves the others
  // to fail with TimeoutError naming it.
  void join();

 private:
  // With join: how many ranks still have data this step (a collective).
  int ranksWithData(bool mine);
  // synchronize() without its checks: the averaged gradients into .grad (with
  // compressMomentum, then counts the step).
  void averageGradients();
  // SyncOptions::compressMomentum's step(), and its gradient transform once past the warm-up.
  void compressedMomentumStep();
  void installMomentumTransform();

  torch::optim::Optimizer& optimizer_;
  std::unique_ptr<Transport> workerView_;  // with separate servers: the training ranks
  Transport& transport_;                   // the workers'
  std::unique_ptr<Transport> hostGroup_;   // diloco's group=host: this rank's host
  const bool joinable_;
  double engineLr_ = 0;  // update mode: the learning rate the engine applies
  int localPeriod_ = 0;  // localsgd, diloco: H (local steps between outer steps); else 0
  int64_t localSteps_ = 0;
  std::unique_ptr<OuterOptimizer> outer_;         // localsgd, diloco
  std::unique_ptr<CompressedMomentum> momentum_;  // SyncOptions::compressMomentum
  std::unique_ptr<DistributedModel> model_;
  std::string schedule_;                    // what the engine was built with
  std::unique_ptr<ScheduleTuning> tuning_;  // with schedule "auto", until the run ends
};

}  // namespace gradsync
