// What the members of an elastic round share (torch/elastic/trainer.h): the model, the
// optimizer's state and where the run stands. Rank 0 of a round holds the most advanced state
// (the rendezvous ranks by it) and gives it to every other member at the round's start: a joiner
// gets everything it needs, and survivors that lost a step to a failure catch up.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "data/elastic_sampler.h"
#include "gradsync/transport.h"
#include "torch/loop/options.h"
#include "torch/models/models.h"

namespace gradsync {

// Where an elastic run stands; the same on every member of a round.
struct ElasticProgress {
  int64_t step = 0;           // steps completed, over every round
  int64_t samples = 0;        // samples trained on, over every round
  EpochPosition data;         // samples of the current epoch used (ElasticSampler)
  double epochLossSum = 0;    // the epoch's losses reported at the step-boundary checks so far
  double epochLossCount = 0;  // how many (one per rank and step)
  double epochSeconds = 0;    // training time of the epoch so far (rank 0's clock)
  std::vector<EpochRecord> epochs;      // finished epochs
  std::vector<RoundRecord> rounds;      // the rounds this state went through
  std::vector<Evaluation> evaluations;  // --eval-every's, in step order
};

// Makes every member's model (parameters and buffers), optimizer state and progress rank 0's;
// with `sync` (localsgd and diloco: the committed synchronization state, torch/elastic/round.h)
// rank 0's bytes too. Only the members that lack it receive it (torch/elastic/state_transfer.h
// says how): a member at another step than rank 0's (a joiner; a survivor that lost a step)
// receives it at once, while rank 0 hashes its own; then every member at rank 0's step hashes
// what it holds (sharedStateHash's pieces, without copying) and those whose hash differs from
// rank 0's receive it too, while those that hold it already (the survivors of a failure, rolled
// back to the same commit) take only the progress. With `keepOwnOnFailure`, a member replaces
// its own only once every byte arrived, so a failure midway leaves its state as it was (still
// its own, consistent); without it (a joiner, which holds nothing of the job's yet), rank 0's
// bytes go straight into its tensors, sent from rank 0's own (no serialised copy on either
// side), and a failure midway leaves them part rank 0's (the caller must not count them as the
// job's). Collective over `transport`; throws what the transport throws (PeerLostError,
// TimeoutError), DataError for bytes that do not load. Then every member checks that what it
// holds is rank 0's (checkSameState of the hash of the progress and of what it received or
// held): DataError naming a member whose state differs.
void shareState(Transport& transport, Model& net, torch::optim::Optimizer& optimizer,
                ElasticProgress& progress, std::vector<uint8_t>* sync = nullptr,
                bool keepOwnOnFailure = true);

// A hash (CRC-32C) of everything shareState makes alike: the progress, `sync` (when given), every
// parameter and buffer of `net` and the optimizer's state.
uint32_t sharedStateHash(Model& net, torch::optim::Optimizer& optimizer,
                         const ElasticProgress& progress,
                         const std::vector<uint8_t>* sync = nullptr);
// Collective: gathers every member's `hash`; DataError on every member, naming the first member
// whose hash is not rank 0's.
void checkSameState(Transport& transport, uint32_t hash);

// The progress as bytes and back (exposed for tests).
std::vector<uint8_t> encodeProgress(const ElasticProgress& progress);
ElasticProgress decodeProgress(const std::vector<uint8_t>& bytes);

}  // namespace gradsync
