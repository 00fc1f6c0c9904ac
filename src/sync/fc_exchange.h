// Lee et al.'s fully-connected exchange for --sync sharded (docs/algorithms.md, "Sharded: the
// fully-connected exchange"). For a linear layer y = x W^T + b, W of out x in, each of P ranks
// owns a block of W's columns (blockOf(in, P, r)). Instead of reduce-scattering the layer's
// weight gradient (out x in), the ranks exchange
//   forward:   their input activations' columns, all-to-all: rank r receives its columns of
//              every rank's x (rows x w_r each);
//   backward:  their output errors, allgathered: every rank gets every rank's dL/dy (rows x out);
// and each rank computes the gradient of its own columns directly over the global batch,
// G_r = (1/P) * Errors^T * Activations_r (out x w_r), the average that a reduce-scatter would
// have produced. The update and the allgather of the updated weights stay sharded's.
//
// Per step a rank sends (P-1)/P * rows * in + (P-1) * rows * out floats instead of
// (P-1)/P * out * in: far fewer when the batch is small against the layer (VGG's 25088 x 4096
// classifier: 4 MB instead of 308 MB at P = 4, rows = 32). fcUsesExchange is the rule.
//
// Torch-free: the torch layer (torch/models/fc_exchange_layer.h) does the matrix products.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "gradsync/collectives.h"
#include "gradsync/transport.h"
#include "sync/strategy.h"
#include "transport/counting_transport.h"

namespace gradsync {

struct FcShape {
  size_t rows = 0;  // rows of the layer's input per rank and step (the local batch)
  size_t in = 0;
  size_t out = 0;
};

// Bytes one rank sends per step for the layer's weight gradient, payloads only: the
// reduce-scatter of dW, or the exchange's all-to-all of activations plus allgather of errors.
uint64_t fcReduceBytes(const FcShape& shape, int ranks);
uint64_t fcExchangeBytes(const FcShape& shape, int ranks);
// Whether the layer is exchanged: always with kExchange, never with kReduce, and with kAuto when
// the exchange sends fewer bytes (fcExchangeBytes < fcReduceBytes).
bool fcUsesExchange(FcMode mode, const FcShape& shape, int ranks);

// A tensor of the engine whose gradient arrives through the exchange: a weight of
// `elements / columns` rows, each rank owning blockOf(columns, P, rank) of its columns.
struct ExchangedTensor {
  int tensor = 0;
  size_t columns = 0;
};

// `groups` (by tensor: schedule/schedule.h's planLayout groups) with every exchanged weight in a
// group of its own, so that it is a unit alone (its ownership is by columns).
std::vector<int> isolateExchanged(std::vector<int> groups,
                                  const std::vector<ExchangedTensor>& exchanged, size_t tensors);

// One layer's exchange on one rank. Not thread-safe: the training thread runs a layer's forward
// and backward. Every rank of `transport` runs the same layers with the same rows.
class FcExchange {
 public:
  // Activations travel on `tag`, errors on `tag` + 1 (tags::kFcExchange + 2 * layer).
  FcExchange(Transport& transport, uint64_t tag, size_t in, size_t out);
  ~FcExchange();
  FcExchange(const FcExchange&) = delete;
  FcExchange& operator=(const FcExchange&) = delete;

  Block ownColumns() const { return own_; }
  // Forward: sends every rank its columns of `x` (rows x in, row-major; copied here, so x may
  // change at once) and posts the receives of this rank's columns of every rank's x. Does not
  // wait. (A previous forward's transfers that no backward consumed are waited for first.)
  void startActivations(std::span<const float> x, size_t rows);
  // Backward: this rank's columns of every rank's x, rank after rank: (P * rows) x w, row-major.
  // Waits for startActivations' transfers (bounded by the transport's timeout).
  std::span<const float> ownActivations();
  // Backward: every rank's output errors `delta` (rows x out each), rank after rank:
  // (P * rows) x out. Blocking (an allgather).
  std::span<const float> gatherErrors(std::span<const float> delta);

  // What this layer's exchanges sent, and how long the training thread waited for them.
  uint64_t bytesSent() const { return counting_.bytesSent(); }
  double waitSeconds() const { return waitSeconds_; }

 private:
  CountingTransport counting_;
  const uint64_t tag_;
  const size_t in_;
  const size_t out_;
  const Block own_;
  size_t rows_ = 0;
  std::vector<float> packed_;       // x's column blocks, rank after rank (the all-to-all's send)
  std::vector<float> activations_;  // this rank's columns of every rank's x
  std::vector<float> errors_;       // every rank's delta
  std::vector<WorkPtr> pending_;    // the all-to-all in flight
  double waitSeconds_ = 0;
};

}  // namespace gradsync
