// How an elastic round's rank 0 gives its held state (the synchronization state, the model's
// tensors and the optimizer's state: what shareState, torch/elastic/state.h, makes alike) to a
// member that lacks it, over the round's transport on tags::kElasticState.
//
// Rank 0 first sends the member the size of what it will receive; the member makes room for it,
// posts its receives and says it is ready (one byte); only then does rank 0 send the bytes, so
// they land where they belong (in one single-copy read through shared memory), not in a buffer
// the transport would allocate, fault in and copy from. A member takes the state
//  - whole: into one buffer, loaded into its model and optimizer once every byte arrived, so a
//    failure midway leaves its own state as it was; or
//  - in place (a joiner, which holds nothing of the job's yet): rank 0 first sends a gatherer's
//    bytes (StateWriter::gatherer: the small arrays and the tensors' sizes), which the member
//    reads with a scatterer into its own model and optimizer (their state tensors allocated),
//    then each tensor's bytes, from rank 0's tensor straight into the member's: no serialised
//    copy on either side; a failure midway leaves the member's tensors part rank 0's.
// Torch headers: src/torch/ only. Not thread-safe.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "common/state_bytes.h"
#include "gradsync/transport.h"
#include "torch/models/models.h"

namespace gradsync {

// The hash (hash()) and size (size()) of the state shareState moves besides the progress, from a
// hasher: nothing is copied.
StateWriter hashHeldState(Model& net, torch::optim::Optimizer& optimizer,
                          const std::vector<uint8_t>* sync);

// Rank 0's side: its held state, described once (a gatherer) and, for the members that take it
// whole, written once. The model, optimizer and `sync` must not change while it lives.
class HeldStateSource {
 public:
  HeldStateSource(Model& net, torch::optim::Optimizer& optimizer, const std::vector<uint8_t>* sync);

  // Gives `rank` the state, whole or in place (receiveHeldState): blocks until it is ready, then
  // adds the sends of the bytes to `pending`, not waited. They read this object's buffers and
  // the tensors: wait them before either goes, or abort the transport and wait them out
  // (abandonTransfers). Throws what the transport throws.
  void give(Transport& transport, int rank, bool inPlace, std::vector<WorkPtr>& pending);

 private:
  const StateWriter& whole();  // written on first use

  Model& net_;
  torch::optim::Optimizer& optimizer_;
  const std::vector<uint8_t>* sync_;
  StateWriter gatherer_ = StateWriter::gatherer();
  std::vector<torch::Tensor> kept_;  // copies the gatherer's segments point into
  std::optional<StateWriter> whole_;
  std::deque<uint64_t> sizes_;  // the size messages' bytes, until sent
};

// A member's side of HeldStateSource::give: rank 0's held state into its own model, optimizer
// and `sync` (when given), whole or in place. Blocks until it is all there. Throws what the
// transport throws (after aborting the transport, so that no receive is left writing), and
// DataError for bytes that do not load.
void receiveHeldState(Transport& transport, bool inPlace, Model& net,
                      torch::optim::Optimizer& optimizer, std::vector<uint8_t>* sync);

// Aborts the round's transport with `why` (the round fails anyway) and waits `pending` out, so
// that none of them still reads or writes memory about to go.
void abandonTransfers(Transport& transport, const std::vector<WorkPtr>& pending,
                      std::exception_ptr why);

}  // namespace gradsync
