// DistributedOptimizer's synchronization state (include/gradsync/torch/distributed_optimizer.h):
// saved and loaded by the rank that owns it, or adopted from a rank of a run on another number
// of workers (a resume on another world size).
#include <fmt/format.h>

#include "common/state_bytes.h"
#include "gradsync/error.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "torch/api/archive_bytes.h"
#include "torch/api/distributed_model.h"
#include "torch/api/optimizer_kind.h"
#include "torch/api/outer_optimizer.h"
#include "torch/models/float_span.h"

namespace gradsync {
namespace {

// localsgd and diloco, between averages: the rank's own parameters and inner optimizer, and the
// outer optimizer's state (its own, or `adopt`ed from a rank of another membership).
void readLocalState(StateReader& in, DistributedModel& model, torch::optim::Optimizer& optimizer,
                    OuterOptimizer& outer, bool adopt) {
  for (const torch::Tensor& p : model.parameters()) {
    in.readExact(floatSpan(p));
  }
  std::vector<uint8_t> bytes;
  in.read(bytes);
  loadArchiveBytes(bytes, "the optimizer state in the synchronization state",
                   [&](auto& archive) { optimizer.load(archive); });
  in.read(bytes);
  if (adopt) return outer.adoptState(bytes, model.parameters());
  outer.loadState(bytes, model.parameters());
}

// What readLocalState reads, with `parameters` as the rank's own.
void writeLocalState(StateWriter& out, const std::vector<torch::Tensor>& parameters,
                     torch::optim::Optimizer& optimizer, OuterOptimizer& outer) {
  for (const torch::Tensor& p : parameters) {
    out.write(std::span<const float>(floatSpan(p)));
  }
  out.write(archiveBytes([&](auto& archive) { optimizer.save(archive); }));
  out.write(outer.saveState());
}

}  // namespace

std::vector<uint8_t> DistributedOptimizer::syncState() {
  StateWriter out;
  out.write(model_->engineState());
  if (localPeriod_ > 0) {  // between averages, every rank's model and optimizer are its own
    writeLocalState(out, model_->parameters(), optimizer_, *outer_);
  }
  return out.take();
}

std::vector<uint8_t> DistributedOptimizer::settledSyncState() {
  if (localPeriod_ == 0) {
    throw ConfigError("settledSyncState() is for localsgd and diloco",
                      {.hint = "call syncState()"});
  }
  StateWriter out;
  out.write(model_->engineState());
  writeLocalState(out, outer_->settledParameters(model_->parameters()), optimizer_, *outer_);
  return out.take();
}

void DistributedOptimizer::loadSyncState(std::span<const uint8_t> state) {
  StateReader in(state, fmt::format("the synchronization state of rank {}", transport_.rank()));
  std::vector<uint8_t> bytes;
  in.read(bytes);
  model_->loadEngineState(bytes);
  if (localPeriod_ > 0) {
    readLocalState(in, *model_, optimizer_, *outer_, /*adopt=*/false);
  }
  in.expectEnd();
}

// What is this rank's own does not map onto another membership: the engine's state (the
// compressors' residuals, PowerSGD's Q, DGC's buffers, the guard; the own copies and pulled
// models of asgd, ssp and the delayed strategies) starts afresh, as at a run's start (the rule
// elastic rounds use, docs/cluster.md). Adam's moments in update mode are the optimizer's, whole
// (loadOptimizerState), unless the state is of the older format that kept them per rank (sharded:
// in blocks laid out for the saving run's ranks): refused. localsgd and diloco take the saved
// rank's parameters, inner optimizer and outer state, which describe the job only at an outer step.
void DistributedOptimizer::adoptSyncState(std::span<const uint8_t> state, int64_t step) {
  if (localPeriod_ > 0 && step > 0 && !outer_->settlesAfter(step)) {
    const std::string where =
        outer_->streams()
            ? fmt::format(
                  "between two fragments' merges (a fragment in flight, or each worker's "
                  "steps since the last merge its own; outer steps every {})",
                  localPeriod_)
            : fmt::format(
                  "between two outer steps of every {} (each worker's steps since the "
                  "last are its own)",
                  localPeriod_);
    throw ConfigError(
        fmt::format("the synchronization state of step {} is {}: it cannot be resumed on another "
                    "number of workers",
                    step, where),
        {.hint = fmt::format("resume it on the number of workers that saved it, or from a "
                             "checkpoint of a step where the outer state settles (a multiple of "
                             "{}; with fragments or a delay, a fragment's merge)",
                             localPeriod_)});
  }
  StateReader in(state, "the synchronization state of another number of workers");
  std::vector<uint8_t> bytes;
  in.read(bytes);  // the engine's: left behind
  if (model_->updatesParameters() && !isSgd(optimizer_) &&
      DistributedModel::engineStateKeepsMoments(bytes)) {
    throw ConfigError(
        "this checkpoint's Adam moments in update mode (p3, sharded) are kept per rank (sharded: "
        "in blocks of the saving run's ranks), as gradsync wrote them before 2026-12-01: they "
        "cannot be resumed on another number of workers",
        {.hint = "resume on the number of workers that saved them; its next checkpoint can"});
  }
  if (localPeriod_ > 0) {
    readLocalState(in, *model_, optimizer_, *outer_, /*adopt=*/true);
  }
  in.expectEnd();
}

}  // namespace gradsync
