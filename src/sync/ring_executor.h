// Carries out the engine's operations with collectives among the workers (the ring):
//   allreduce       the unit's average (through its compressor after the plan's warm-up; a p3
//                   slice of a sparsified tensor selects its share of the tensor's k:
//                   slice_budgets.h); in update mode (p3) the optimizer's rule then applies it
//                   to the parameters
//   reduce-scatter  sharded (Lee et al.): the average of this rank's block, whose parameters it
//                   updates (its velocity is that block only: 1/P of the optimizer state); a
//                   weight of the fully-connected exchange (fc_exchange.h) arrives averaged over
//                   this rank's columns already: no collective, the update of those columns
//   allgather       sharded: every rank's updated block (or columns), into the parameters
// Each unit's collectives run on a stream of their own (tags::kGradientUnits + unit), so
// operations on different units may run at the same time, from different threads (p3's
// concurrent slices); operations on one unit must not overlap.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/compressor.h"
#include "compress/guard.h"
#include "compress/policy.h"
#include "gradsync/clock.h"
#include "gradsync/transport.h"
#include "optim/update_rule.h"
#include "schedule/executor.h"
#include "schedule/schedule.h"
#include "sync/shard_ownership.h"
#include "sync/slice_budgets.h"

namespace gradsync {

struct RingSetup {
  const std::vector<TensorShape>& tensors;
  const GradientLayout& layout;
  const CompressionPlan& plan;
  std::span<float> gradients;  // the engine's slots, flat by layout
  // The parameters by tensor (the model's storage): updated when `updates`; else unused.
  std::vector<std::span<float>> parameters;
  bool updates = false;  // apply `rule` (p3, sharded) instead of returning averages
  bool sharded = false;
  // sharded: by tensor, the columns of a weight whose gradient the FC exchange delivers (its own
  // columns, averaged) and whose columns each rank owns; 0 (or empty) for every other tensor.
  // Such a tensor is a unit of its own.
  std::vector<size_t> exchangedColumns;
  UpdateRule rule;
  uint64_t seed = 0;  // stochastic compressors draw from it
  const Clock* clock = &SteadyClock::instance();
  // The compression guard (compress/guard.h), owned by the engine; null: none. Units it made dense
  // exchange densely; its measured steps' compressed exchanges report their norms to it.
  CompressionGuard* guard = nullptr;
};

class RingExecutor final : public Executor {
 public:
  // Keeps references to `transport` and to setup's tensors, layout and plan (they must outlive
  // it). Throws ConfigError for a compressor it cannot build.
  RingExecutor(Transport& transport, RingSetup setup);

  OpOutcome run(const PlannedOp& op) override;
  // Update mode: SGD's velocity, or Adam's two moments one after the other, of every tensor
  // (sharded: gathered from the ranks that own each block, a collective); gradient mode: empty
  // (the caller's optimizer keeps it).
  std::vector<float> optimizerState() override;
  void setOptimizerState(std::span<const float> byTensor) override;
  void setStateOrigin(int64_t origin) override { stateOrigin_ = origin; }
  void pullGlobalModel() override {}  // every worker holds the one model already
  // The compressors' state (format 1 began with Adam's moments, this rank's).
  void saveState(StateWriter& out) const override;
  void loadState(StateReader& in, uint64_t format) override;
  // p3's 1-bit Adam: from velocity_, which holds Adam's first moment by flat element.
  void gradientToMomentum(int t, std::span<float> gradient) override;

 private:
  // Averages the unit in its slot; returns the compressor's method, or empty when dense.
  std::string exchange(const PlannedOp& op, Transport& transport, OpOutcome& outcome);
  // Applies the rule to the elements [begin, end) of `unit`, whose optimizer state starts at
  // velocity_[velocityAt] (element begin's).
  void update(size_t unit, size_t begin, size_t end, uint64_t step, size_t velocityAt);
  // sharded: the rule on this rank's elements of `unit` (its block, or its columns).
  void updateOwned(size_t unit, uint64_t step);
  // The FC exchange's columns of `unit`'s weight, or 0.
  size_t exchangedColumns(size_t unit) const;
  void allgatherParameters(size_t unit, Transport& transport);
  // Update mode: the optimizer's state arrays, laid out alike: velocity_, then secondMoment_
  // with Adam.
  std::vector<std::vector<float>*> stateArrays();
  // One state array laid out by tensor, whole (sharded: gathered, a collective), and back.
  std::vector<float> wholeByTensor(const std::vector<float>& local);
  void setFromTensors(std::span<const float> byTensor, std::vector<float>& local);
  // A compressor's scratch of at least `elements` floats, taken from and given back to a pool
  // (one buffer per operation in flight, reused across steps).
  std::vector<float> takeScratch(size_t elements);
  void giveBack(std::vector<float> scratch);

  Transport& transport_;
  const RingSetup s_;
  std::vector<std::unique_ptr<Compressor>> compressors_;   // by unit; null: dense
  std::vector<std::unique_ptr<Compressor>> warmupCodecs_;  // by unit; null: float32 warm-up
  SliceBudgets budgets_;                                   // p3 slices of sparsified tensors
  std::mutex budgetsMutex_;                                // slices of one tensor share budgets_
  std::mutex scratchMutex_;
  std::vector<std::vector<float>> scratch_;  // free scratch for compressors' exchanges
  std::vector<float> velocity_;      // update mode: by flat element (sharded: own blocks only);
                                     // SGD's velocity or Adam's first moment
  std::vector<float> secondMoment_;  // Adam's, laid out as velocity_ (empty for SGD)
  std::vector<size_t> velocityAt_;   // by unit: where its state starts in velocity_
  std::vector<Ownership> owned_;     // sharded, by unit: what this rank updates
  int64_t stateOrigin_ = 0;          // setStateOrigin's
};

}  // namespace gradsync
