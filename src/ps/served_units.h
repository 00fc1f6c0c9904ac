// The communication units a model's parameter servers hold, as workers and servers must agree
// on them: the schedule's units (tensors, fusion buckets, p3 slices) and how workers may encode
// each unit's pushes (compress/push_codec.h).
#pragma once

#include <cstddef>
#include <vector>

#include "common/tensor_shape.h"
#include "compress/policy.h"
#include "compress/spec.h"
#include "schedule/schedule.h"

namespace gradsync {

struct ServedUnit {
  size_t elements = 0;
  CompressSpec compression;         // how workers may encode its pushes (kEncoded); dense: never
  std::vector<TensorShape> shapes;  // its tensors, as the workers' codecs see them
};

// Which tensors' pushes are compressed, and how. Throws ConfigError naming a method that cannot
// push (PushCodec::pushable).
CompressionPlan planPushes(const CompressionConfig& compression,
                           const std::vector<TensorShape>& tensors);
// The units of `layout` (planned with `plan`'s groups).
std::vector<ServedUnit> servedUnits(const GradientLayout& layout, const CompressionPlan& plan,
                                    const std::vector<TensorShape>& tensors);
// The same from the options (what a separate server derives from the command line).
std::vector<ServedUnit> servedUnits(const std::vector<TensorShape>& tensors,
                                    const ScheduleSpec& schedule,
                                    const CompressionConfig& compression);

}  // namespace gradsync
