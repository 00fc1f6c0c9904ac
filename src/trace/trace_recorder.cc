#include "gradsync/trace.h"

#include "trace/trace_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr std::string_view kWindowForms =
    "'A:B' (steps A to B inclusive), 'A:' (from step A to the end) or 'A' (step A only), with "
    "A <= B non-negative integers, e.g. --trace-steps 10:19";

[[noreturn]] void badWindow(const std::string& text, std::string_view why) {
  throw ConfigError(fmt::format("invalid --trace-steps '{}': {}", text, why),
                    {.hint = fmt::format("expected {}", kWindowForms)});
}

int64_t parseStep(const std::string& text, std::string_view part) {
  int64_t value = 0;
  const char* end = part.data() + part.size();
  auto [ptr, ec] = std::from_chars(part.data(), end, value);
  if (part.empty() || ec != std::errc() || ptr != end) {
    badWindow(text, fmt::format("'{}' is not a step number", part));
  }
  if (value < 0) badWindow(text, "step numbers start at 0");
  return value;
}

}  // namespace

std::string StepWindow::describe() const {
  if (last == kOpenEnd) return fmt::format("{}:", first);
  return fmt::format("{}:{}", first, last);
}

StepWindow parseStepWindow(const std::string& text) {
  std::string_view view(text);
  size_t colon = view.find(':');
  if (colon == std::string_view::npos) {
    int64_t step = parseStep(text, view);
    return {step, step};
  }
  StepWindow window;
  window.first = parseStep(text, view.substr(0, colon));
  std::string_view rest = view.substr(colon + 1);
  window.last = rest.empty() ? StepWindow::kOpenEnd : parseStep(text, rest);
  if (window.last < window.first) badWindow(text, "the last step comes before the first");
  return window;
}

StepWindow defaultStepWindow(int64_t totalSteps) {
  constexpr int64_t kSkip = 10;
  constexpr int64_t kLength = 10;
  if (totalSteps <= 0 || totalSteps >= kSkip + kLength) return {kSkip, kSkip + kLength - 1};
  int64_t first = std::max<int64_t>(0, totalSteps - kLength);
  return {first, totalSteps - 1};
}

TraceRecorder::TraceRecorder(int rank, StepWindow window, const Clock& clock, size_t maxEvents)
    : rank_(rank), window_(window), clock_(clock), maxEvents_(maxEvents) {
  GS_CHECK(window.first <= window.last);
}

void TraceRecorder::setStep(int64_t step) {
  endStep();
  if (!window_.contains(step)) return;
  {
    std::lock_guard lock(mutex_);
    stepOpen_ = true;
    openStep_ = step;
    openStepStartNs_ = clock_.now().count();
  }
  active_.store(true, std::memory_order_relaxed);
}

void TraceRecorder::endStep() {
  active_.store(false, std::memory_order_relaxed);
  Event span;
  {
    std::lock_guard lock(mutex_);
    if (!stepOpen_) return;
    stepOpen_ = false;
    span.startNs = openStepStartNs_;
    span.name = fmt::format("step {}", openStep_);
    span.args = fmt::format("\"step\":{}", openStep_);
  }
  span.durationNs = clock_.now().count() - span.startNs;
  span.lane = kMainLane;
  span.category = "step";
  record(std::move(span));
}

void TraceRecorder::setLaneName(LaneId lane, std::string name) {
  GS_CHECK(lane >= 0 && lane < kMaxLanes);
  std::lock_guard lock(mutex_);
  laneNames_[lane] = std::move(name);
  usedLanes_ |= uint64_t{1} << lane;
}

void TraceRecorder::complete(LaneId lane, std::string_view category, std::string_view name,
                             Nanos start, Nanos end, const TraceArgs& args) {
  GS_CHECK(lane >= 0 && lane < kMaxLanes);
  if (!active()) return;
  record({.startNs = start.count(),
          .durationNs = (end - start).count(),
          .lane = lane,
          .phase = 'X',
          .category = std::string(category),
          .name = std::string(name),
          .args = args.members()});
}

void TraceRecorder::instant(LaneId lane, std::string_view category, std::string_view name,
                            const TraceArgs& args) {
  GS_CHECK(lane >= 0 && lane < kMaxLanes);
  if (!active()) return;
  record({.startNs = clock_.now().count(),
          .lane = lane,
          .phase = 'i',
          .category = std::string(category),
          .name = std::string(name),
          .args = args.members()});
}

void TraceRecorder::counter(std::string_view name, std::string_view series, double value) {
  if (!active()) return;
  TraceArgs args;
  args.add(series, value);
  record({.startNs = clock_.now().count(),
          .lane = kMainLane,
          .phase = 'C',
          .category = "counter",
          .name = std::string(name),
          .args = args.members()});
}

// Callers have checked the lane (ScopedEvent in its constructor, so its destructor cannot throw).
void TraceRecorder::record(Event&& event) {
  std::lock_guard lock(mutex_);
  if (eventCount_ >= maxEvents_) {
    if (dropped_++ == 0) firstDropNs_ = event.startNs;
    return;
  }
  if (chunks_.empty() || chunks_.back().size() == kChunkEvents) {
    chunks_.emplace_back().reserve(kChunkEvents);
  }
  usedLanes_ |= uint64_t{1} << event.lane;
  chunks_.back().push_back(std::move(event));
  ++eventCount_;
}

size_t TraceRecorder::eventCount() const {
  std::lock_guard lock(mutex_);
  return eventCount_;
}

uint64_t TraceRecorder::droppedCount() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

std::string TraceRecorder::laneName(LaneId lane) const {
  if (!laneNames_[lane].empty()) return laneNames_[lane];
  switch (lane) {
    case kMainLane:
      return "training";
    case kCommLane:
      return "communication";
    case kTransportLane:
      return "transport";
    default:
      return fmt::format("lane {}", lane);
  }
}

// Metadata events ("ph":"M") name the process and its rows and fix their order in the viewer;
// "process_labels" shows the step window (and drops) next to the process name.
void TraceRecorder::appendMetadata(std::string& out) const {
  auto meta = [&](std::string_view name, int tid, std::string_view argsMembers) {
    fmt::format_to(std::back_inserter(out),
                   "{{\"name\":\"{}\",\"ph\":\"M\",\"pid\":{},\"tid\":{},\"args\":{{{}}}}},\n",
                   name, rank_, tid, argsMembers);
  };
  meta("process_name", 0, TraceArgs().add("name", fmt::format("rank {}", rank_)).members());
  meta("process_sort_index", 0, TraceArgs().add("sort_index", rank_).members());
  std::string labels = fmt::format("steps {}", window_.describe());
  if (dropped_ > 0) labels += fmt::format(", {} events dropped", dropped_);
  meta("process_labels", 0, TraceArgs().add("labels", labels).members());
  for (LaneId lane = 0; lane < kMaxLanes; ++lane) {
    if ((usedLanes_ & (uint64_t{1} << lane)) == 0) continue;
    meta("thread_name", lane, TraceArgs().add("name", laneName(lane)).members());
    meta("thread_sort_index", lane, TraceArgs().add("sort_index", lane).members());
  }
}

void TraceRecorder::appendEvent(std::string& out, const Event& event) const {
  out += "{\"name\":";
  appendJsonString(out, event.name);
  out += ",\"cat\":";
  appendJsonString(out, event.category);
  out += ",\"ph\":\"";
  out += event.phase;
  out += "\",\"pid\":";
  appendInteger(out, rank_);
  // Counters belong to the process, not to a row; instants are drawn on their row ("s":"t").
  if (event.phase != 'C') {
    out += ",\"tid\":";
    appendInteger(out, event.lane);
  }
  if (event.phase == 'i') out += ",\"s\":\"t\"";
  out += ",\"ts\":";
  appendMicros(out, event.startNs);
  if (event.phase == 'X') {
    out += ",\"dur\":";
    appendMicros(out, event.durationNs);
  }
  if (!event.args.empty()) {
    out += ",\"args\":{";
    out += event.args;
    out += '}';
  }
  out += '}';
}

std::string TraceRecorder::serialize() const {
  std::lock_guard lock(mutex_);
  std::string out = "[\n";
  // ~110 bytes per event with args (measured in trace_test); one reservation, few regrowths.
  out.reserve(1024 + eventCount_ * 128);
  appendMetadata(out);
  for (const std::vector<Event>& chunk : chunks_) {
    for (const Event& event : chunk) {
      appendEvent(out, event);
      out += ",\n";
    }
  }
  if (dropped_ > 0) {
    Event note{.startNs = firstDropNs_, .lane = kMainLane, .phase = 'i', .category = "trace"};
    note.name = std::string(kDroppedEventName);
    note.args = TraceArgs().add("dropped", dropped_).add("max_events", maxEvents_).members();
    appendEvent(out, note);
    out += ",\n";
  }
  // Every line above ends with ",\n"; JSON allows no trailing comma.
  out.resize(out.size() - 2);
  out += "\n]\n";
  return out;
}

ScopedEvent::ScopedEvent(TraceRecorder* recorder, LaneId lane, std::string_view category,
                         std::string_view name)
    : lane_(lane) {
  GS_CHECK(lane >= 0 && lane < kMaxLanes);
  if (recorder == nullptr || !recorder->active()) return;
  recorder_ = recorder;
  start_ = recorder->now();
  category_ = category;
  name_ = name;
}

void ScopedEvent::end() {
  if (recorder_ == nullptr) return;
  TraceRecorder* recorder = recorder_;
  recorder_ = nullptr;
  Nanos end = recorder->now();
  recorder->record({.startNs = start_.count(),
                    .durationNs = (end - start_).count(),
                    .lane = lane_,
                    .phase = 'X',
                    .category = std::move(category_),
                    .name = std::move(name_),
                    .args = args_.members()});
}

}  // namespace gradsync
