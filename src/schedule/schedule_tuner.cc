#include "schedule/schedule_tuner.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/units.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr const char* kAutoForms = "auto, or auto:tune=p3|fusion,steps=N (e.g. auto:steps=6)";
constexpr size_t kMiB = 1024 * 1024;

// p3's slice sizes: 4x apart around P3's default of 40,000 elements, up to the first that holds
// the largest tensor whole.
std::vector<size_t> sliceGrid(size_t largest) {
  std::vector<size_t> grid;
  for (size_t slice = 10'000;; slice *= 4) {
    grid.push_back(slice);
    if (slice >= largest || slice >= 10'240'000) return grid;
  }
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

bool isAutoSchedule(const std::string& text) {
  return text == "auto" || text.starts_with("auto:");
}

ScheduleTunerOptions parseAutoSchedule(const std::string& text) {
  if (!isAutoSchedule(text))
    throw ConfigError(fmt::format("'{}' is not an auto schedule", text), {.hint = kAutoForms});
  ScheduleTunerOptions options;
  const std::string items = text == "auto" ? "" : text.substr(5);
  if (text != "auto" && items.empty())
    throw ConfigError("--schedule auto: needs options after the colon", {.hint = kAutoForms});
  size_t start = 0;
  while (start < items.size()) {
    const size_t end = std::min(items.find(',', start), items.size());
    const std::string item = items.substr(start, end - start);
    const size_t equals = item.find('=');
    const std::string key = item.substr(0, equals), value = item.substr(equals + 1);
    if (equals != std::string::npos && key == "tune" && (value == "p3" || value == "fusion")) {
      options.kind = value == "p3" ? ScheduleSpec::Kind::kP3 : ScheduleSpec::Kind::kFusion;
    } else if (equals != std::string::npos && key == "steps") {
      const int64_t steps = parseInteger(value, "--schedule auto:steps");
      if (steps < 1) throw ConfigError("--schedule auto:steps must be at least 1");
      options.trialSteps = static_cast<int>(steps);
    } else {
      throw ConfigError(fmt::format("unknown --schedule auto option '{}'", item),
                        {.hint = kAutoForms});
    }
    start = end + 1;
  }
  return options;
}

ScheduleSpec firstCandidate(const ScheduleTunerOptions& options) {
  return ScheduleTuner(options, 40'000).current();
}

ScheduleTuner::ScheduleTuner(ScheduleTunerOptions options, size_t largestTensorElements)
    : options_(options), largest_(std::max<size_t>(largestTensorElements, 1)) {
  if (options.kind == ScheduleSpec::Kind::kP3) {
    current_.kind = ScheduleSpec::Kind::kP3;
    std::vector<size_t> grid = sliceGrid(largest_);
    const size_t start = std::min<size_t>(1, grid.size() - 1);  // 40,000: P3's default
    startSearch(std::move(grid), start);
  } else if (options.kind == ScheduleSpec::Kind::kFusion) {
    current_.kind = ScheduleSpec::Kind::kFusion;
    // Horovod's and DDP's 25 MiB, 4x apart: 1.5625, 6.25, 25, 100 and 400 MiB.
    startSearch({25 * kMiB / 16, 25 * kMiB / 4, 25 * kMiB, 100 * kMiB, 400 * kMiB}, 2);
  } else {
    throw ConfigError("only p3 and fusion have knobs to tune", {.hint = kAutoForms});
  }
  current_ = withValue(search_.grid[search_.at]);
}

void ScheduleTuner::startSearch(std::vector<size_t> grid, size_t start) {
  search_ = Search{.grid = std::move(grid), .start = start, .at = start, .best = start};
  search_.cost.assign(search_.grid.size(), -1);
}

ScheduleSpec ScheduleTuner::withValue(size_t value) const {
  ScheduleSpec spec = current_;
  if (spec.kind == ScheduleSpec::Kind::kFusion) {
    spec.fusionBytes = value;
  } else if (phase_ == 0) {
    spec.sliceElements = value;
  } else {
    spec.window = value;
  }
  return spec;
}

bool ScheduleTuner::observe(double stepSeconds) {
  if (done_) return false;
  if (settled_ < options_.settleSteps) {
    ++settled_;
    return false;
  }
  steps_.push_back(stepSeconds);
  if (static_cast<int>(steps_.size()) < options_.trialSteps) return false;
  const ScheduleSpec tried = current_;
  finishTrial(median(steps_));
  steps_.clear();
  settled_ = 0;
  return current_.toString() != tried.toString();
}

// The descent: from the start upwards while each move beats the best so far by minGain; if the
// first move up does not (or there is none), downwards from the start instead.
size_t ScheduleTuner::nextIndex(bool& finished) {
  Search& s = search_;
  if (s.at != s.best && s.cost[s.at] < s.cost[s.best] * (1 - options_.minGain)) s.best = s.at;
  auto unmeasured = [&](std::ptrdiff_t i) {
    return i >= 0 && i < static_cast<std::ptrdiff_t>(s.grid.size()) &&
           s.cost[static_cast<size_t>(i)] < 0;
  };
  finished = false;
  const auto at = static_cast<std::ptrdiff_t>(s.at);
  if (s.at == s.best && unmeasured(at + s.direction)) return s.at + s.direction;
  if (!s.turned && s.best == s.start && unmeasured(static_cast<std::ptrdiff_t>(s.start) - 1)) {
    s.direction = -1;
    s.turned = true;
    return s.start - 1;
  }
  finished = true;
  return s.best;
}

void ScheduleTuner::finishTrial(double seconds) {
  trials_.push_back({current_, seconds});
  search_.cost[search_.at] = seconds;
  bool finished = false;
  size_t next = nextIndex(finished);
  if (finished && phase_ == 0 && current_.kind == ScheduleSpec::Kind::kP3) {
    // The slice is chosen; its trial ran with window 2, the start of the window's descent.
    current_ = withValue(search_.grid[next]);
    const double best = search_.cost[next];
    phase_ = 1;
    startSearch({1, 2, 4, 8}, 1);
    search_.cost[1] = best;
    next = nextIndex(finished);
  }
  if (finished) {
    current_ = withValue(search_.grid[next]);
    done_ = true;
    return;
  }
  search_.at = next;
  current_ = withValue(search_.grid[next]);
}

std::string ScheduleTuner::summary() const {
  std::string text;
  for (const Trial& trial : trials_) {
    text += fmt::format("{}{} {:.1f} ms", text.empty() ? "" : ", ", trial.spec.toString(),
                        trial.seconds * 1e3);
  }
  return fmt::format("{} -> {} {}", text, done_ ? "chose" : "trying", current_.toString());
}

}  // namespace gradsync
