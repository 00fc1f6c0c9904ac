#include "sim/unit_costs.h"

#include "compress/compressor.h"
#include "compress/impl/hitopk.h"
#include "compress/spec.h"

namespace gradsync::sim {
namespace {

// Every rank sends (P - 1) / P of the vector in each of the ring's two passes.
double ringBytes(const ClusterSpec& cluster, size_t bytes) {
  const double p = cluster.workers;
  return 2 * (p - 1) / p * static_cast<double>(bytes);
}

UnitCost compressedCost(const ClusterSpec& cluster, const Compressor& compressor, size_t elements) {
  UnitCost cost;
  cost.compressed = true;
  cost.wireBytes = compressor.encodedBytes(elements);
  const double p = cluster.workers;
  switch (compressor.aggregation()) {
    case Aggregation::kAllreduce:  // linear codes are summed inside the ring, as floats
      cost.allreduceSeconds = ringAllreduceSeconds(cluster, (cost.wireBytes + 3) / 4, 4);
      cost.bytesSent = ringBytes(cluster, cost.wireBytes);
      break;
    case Aggregation::kAllgather:  // every rank forwards every other rank's encoding
      cost.allreduceSeconds = allgathervSeconds(cluster, cost.wireBytes);
      cost.bytesSent = (p - 1) * static_cast<double>(cost.wireBytes);
      break;
    case Aggregation::kTree:  // P - 1 lists go up the tree and P - 1 come down: 2 (P-1)/P each
      cost.allreduceSeconds = treeSeconds(cluster, cost.wireBytes);
      cost.bytesSent = 2 * (p - 1) / p * static_cast<double>(cost.wireBytes);
      break;
    case Aggregation::kCompressedAllreduce:  // shards' codes all-to-all, then all-gathered
      cost.allreduceSeconds = 2 * allgathervSeconds(cluster, cost.wireBytes / cluster.workers);
      cost.bytesSent = ringBytes(cluster, cost.wireBytes);
      break;
    case Aggregation::kHierarchical: {  // hitopk: lists of a host shard's k pairs
      const size_t shard = regular(cluster) ? shardElements(cluster, elements) : elements;
      cost.wireBytes = compressor.encodedBytes(shard);
      cost.allreduceSeconds = hierarchicalSparseSeconds(cluster, elements, cost.wireBytes);
      cost.bytesSent = hierarchicalSparseBytes(cluster, elements, cost.wireBytes);
      break;
    }
  }
  return cost;
}

// Encoded once; decoded once per encoding received: P of them when they are all-gathered. The
// compressed all-reduce encodes the unit and its own shard again, and decodes the unit twice.
double codecSeconds(const ClusterSpec& cluster, const Compressor& compressor,
                    const CompressSpec& spec, size_t elements, const CodecCostFn& codecCost) {
  CompressSpec codec = spec;  // costs are measured per codec, on a world of one
  codec.compressedAllreduce = false;
  const CodecCost cost = codecCost(codec.toString());
  double encodes = 1.0, decodes = 1.0;
  if (compressor.aggregation() == Aggregation::kAllgather) decodes = cluster.workers;
  if (compressor.aggregation() == Aggregation::kCompressedAllreduce) {
    encodes = 1.0 + 1.0 / cluster.workers;
    decodes = 2.0;
  }
  return (encodes * cost.encodeSeconds + decodes * cost.decodeSeconds) *
         static_cast<double>(elements);
}

}  // namespace

std::vector<UnitCost> unitCosts(const ClusterSpec& cluster, const GradientLayout& layout,
                                const std::vector<TensorShape>& tensors,
                                const CompressionPlan& plan, const CodecCostFn& codecCost) {
  std::vector<UnitCost> costs;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const CommUnit& unit = layout.units[u];
    const CompressSpec& spec = plan.perTensor[unit.tensors[0]];
    // Without error feedback: it changes neither the bytes nor the aggregation, and its residual
    // (4 bytes per element, zeroed) was most of tune's time on large models.
    CompressSpec bare = spec;
    bare.errorFeedback = false;
    std::unique_ptr<Compressor> compressor = makeCompressor(bare, unitShapes(layout, u, tensors));
    const auto* hitopk = dynamic_cast<const methods::HiTopK*>(compressor.get());
    if (hitopk != nullptr && unit.elements < hitopk->bypass()) compressor.reset();  // dense
    if (compressor) {
      costs.push_back(compressedCost(cluster, *compressor, unit.elements));
      if (codecCost)
        costs.back().codecSeconds =
            codecSeconds(cluster, *compressor, spec, unit.elements, codecCost);
      continue;
    }
    UnitCost dense;
    dense.wireBytes = unit.elements * sizeof(float);
    dense.allreduceSeconds = denseAllreduceSeconds(cluster, unit.elements, sizeof(float));
    dense.bytesSent = denseAllreduceBytes(cluster, unit.elements, sizeof(float));
    costs.push_back(dense);
  }
  return costs;
}

}  // namespace gradsync::sim
