#include "sim/fc_layers.h"

#include "gradsync/collectives.h"

namespace gradsync::sim {
namespace {

FcShape shapeOf(const ModelProfile& profile, size_t layer) {
  const TensorShape& weight = profile.layers[layer].tensors[0];  // out x in
  return {.rows = static_cast<size_t>(profile.batchSize),
          .in = static_cast<size_t>(weight.dims[1]),
          .out = static_cast<size_t>(weight.dims[0])};
}

}  // namespace

FcLayers exchangedLayers(const ModelProfile& profile, FcMode mode, int workers) {
  FcLayers layers;
  layers.byLayer.assign(profile.layers.size(), false);
  size_t tensor = 0;
  for (size_t l = 0; l < profile.layers.size(); ++l) {
    if (profile.layers[l].kind == kLinearLayer) {
      const FcShape shape = shapeOf(profile, l);
      if (fcUsesExchange(mode, shape, workers)) {
        layers.byLayer[l] = true;
        layers.exchanged.push_back({static_cast<int>(tensor), shape.in});
      }
    }
    tensor += profile.layers[l].tensors.size();
  }
  return layers;
}

Transfer activationsTransfer(const ClusterSpec& cluster, const ModelProfile& profile,
                             size_t layer) {
  const FcShape s = shapeOf(profile, layer);
  const size_t widest = blockOf(s.in, cluster.workers, 0).size();  // blocks differ by one
  return {alltoallSeconds(cluster, s.rows * widest * sizeof(float)),
          static_cast<double>(
              fcExchangeBytes({.rows = s.rows, .in = s.in, .out = 0}, cluster.workers))};
}

Transfer errorsTransfer(const ClusterSpec& cluster, const ModelProfile& profile, size_t layer) {
  const FcShape s = shapeOf(profile, layer);
  const size_t ranks = static_cast<size_t>(cluster.workers);
  return {allgatherSeconds(cluster, ranks * s.rows * s.out, sizeof(float)),
          static_cast<double>(
              fcExchangeBytes({.rows = s.rows, .in = 0, .out = s.out}, cluster.workers))};
}

}  // namespace gradsync::sim
