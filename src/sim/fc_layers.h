// What sharded's fully-connected exchange (sync/fc_exchange.h) costs in the simulator: which of a
// profile's linear layers it takes (as DistributedModel decides, with the profile's batch as the
// layers' input rows), and its two transfers, both on the training thread's own streams: the
// activations' all-to-all in forward and the errors' allgather in backward.
#pragma once

#include <cstddef>
#include <vector>

#include "sim/cluster.h"
#include "sim/model_profile.h"
#include "sync/fc_exchange.h"

namespace gradsync::sim {

struct FcLayers {
  std::vector<bool> byLayer;               // the exchange takes layer l
  std::vector<ExchangedTensor> exchanged;  // their weights, as the engine's tensors
};
FcLayers exchangedLayers(const ModelProfile& profile, FcMode mode, int workers);

struct Transfer {
  double seconds = 0;
  double bytes = 0;  // what one rank sends
};
// Layer `layer`'s all-to-all of its input's columns, and its allgather of the output errors.
Transfer activationsTransfer(const ClusterSpec& cluster, const ModelProfile& profile, size_t layer);
Transfer errorsTransfer(const ClusterSpec& cluster, const ModelProfile& profile, size_t layer);

}  // namespace gradsync::sim
