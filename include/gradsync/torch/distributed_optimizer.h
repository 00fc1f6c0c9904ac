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
// Parameters are contiguous float32 tensors on the CPU. Requires the library gradsync::torch
// (find_package(gradsync COMPONENTS torch)); docs/api.md documents every call.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>

#include "gradsync/sync_options.h"
#include "gradsync/transport.h"

namespace gradsync {

class DistributedModel;

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
  // shares `module`. Throws ConfigError for an impossible combination: update mode with an
  // optimizer other than SGD, Adam and AdamW, with amsgrad, or with groups whose options differ
  // (the engine applies one rule); parameter servers with anything but SGD with momentum (what
  // the servers apply); a compressor that applies momentum itself (dgc) beside SGD momentum, or
  // one that cannot push to servers; parameters that are not contiguous CPU float32.
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
  // average.
  void step();
  // Gradient mode: as step() without stepping, e.g. to clip the averaged gradients first; then
  // call the optimizer's step() directly.
  void synchronize();
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
  // Bytes this rank sent for gradients so far, and what dense ring allreduces would have sent.
  uint64_t bytesSent() const;
  uint64_t denseBytes() const;

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

  torch::optim::Optimizer& optimizer_;
  Transport& transport_;
  const bool joinable_;
  double engineLr_ = 0;  // update mode: the learning rate the engine applies
  int localPeriod_ = 0;  // localsgd: H (steps between model averages); else 0
  int64_t localSteps_ = 0;
  std::unique_ptr<DistributedModel> model_;
};

}  // namespace gradsync
