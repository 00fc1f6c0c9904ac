#include "torch/api/schedule_tuning.h"

#include <fmt/format.h>

#include "common/logging.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "torch/api/distributed_model.h"

namespace gradsync {

ScheduleTuning::ScheduleTuning(const std::string& schedule, size_t largestTensorElements,
                               Transport& workers)
    : tuner_(parseAutoSchedule(schedule), largestTensorElements), workers_(workers) {}

void ScheduleTuning::checkRunCanSwitch(const std::string& why) {
  if (why.empty()) return;
  throw ConfigError(fmt::format("--schedule auto switches schedules between steps, which {} "
                                "does not allow",
                                why),
                    {.operation = "distributed optimizer",
                     .hint = "choose the schedule yourself (gradsync tune predicts the best)"});
}

void ScheduleTuning::afterStep(DistributedModel& model) {
  if (tuner_.done()) return;
  const auto now = std::chrono::steady_clock::now();
  const bool first = !lastStep_.has_value();
  float seconds = first ? 0.0f : std::chrono::duration<float>(now - *lastStep_).count();
  lastStep_ = now;
  ++steps_;
  if (first) return;  // the first step has no start to time from (its end starts the next)
  // The workers' mean step (synchronous steps take about as long everywhere): every rank feeds
  // the tuner the same time and so switches at the same step (the ring gives every rank the
  // same bits).
  allreduce(workers_, std::span<float>(&seconds, 1), ReduceOp::kAverage,
            {.tag = tags::kModelState});
  if (tuner_.observe(seconds)) {
    model.reschedule(tuner_.current());
    lastStep_ = std::chrono::steady_clock::now();  // the switch's drain counts for nobody
  }
  if (tuner_.done() && workers_.rank() == 0)
    GS_LOG(kInfo, "schedule auto: tuned in {} steps: {}", steps_, tuner_.summary());
}

}  // namespace gradsync
