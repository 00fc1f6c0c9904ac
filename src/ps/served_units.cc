#include "ps/served_units.h"

#include <string>

#include <fmt/format.h>

#include "compress/push_codec.h"
#include "gradsync/error.h"

namespace gradsync {

// No momentum for the plan: the one method that absorbs it (dgc) cannot push.
CompressionPlan planPushes(const CompressionConfig& compression,
                           const std::vector<TensorShape>& tensors) {
  CompressionPlan plan = planCompression(compression, tensors, 0.0);
  for (const CompressSpec& spec : plan.perTensor) {
    std::string why;
    if (!spec.dense() && !PushCodec::pushable(spec, &why)) {
      throw ConfigError(
          fmt::format("--compress {} does not apply through parameter servers: {}", spec.toString(),
                      why),
          {.hint =
               "over servers use fp16, topk, mstopk, randomk, qsgd, terngrad, twobit, onebit or "
               "signsgd; or ring ssgd for any method"});
    }
  }
  return plan;
}

std::vector<ServedUnit> servedUnits(const GradientLayout& layout, const CompressionPlan& plan,
                                    const std::vector<TensorShape>& tensors) {
  std::vector<ServedUnit> units;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const CommUnit& unit = layout.units[u];
    units.push_back({.elements = unit.elements,
                     .compression = plan.perTensor[unit.tensors.front()],
                     .shapes = unitShapes(layout, u, tensors)});
  }
  return units;
}

std::vector<ServedUnit> servedUnits(const std::vector<TensorShape>& tensors,
                                    const ScheduleSpec& schedule,
                                    const CompressionConfig& compression) {
  CompressionPlan plan = planPushes(compression, tensors);
  return servedUnits(planLayout(tensors, schedule, plan.groups()), plan, tensors);
}

}  // namespace gradsync
