// Chrome-trace timeline of one rank, recorded only inside a window of training steps.
//
// Why a window: a full-run timeline of a distributed job is hundreds of MB to GB (Horovod's
// timeline.json, see docs/trace.md) and too big for a browser to load. Ten steps show the
// pattern of overlap between compute and communication; that is all one needs to read.
//
// Threading: every method is thread-safe. The training thread calls setStep()/endStep(); the
// training and communication threads record events concurrently. Outside the window, active()
// is a single relaxed atomic load and recording calls return before touching the mutex, so
// instrumented code costs ~1 ns per event when tracing is off.
//
// Output: serialize() returns this rank's events as a JSON array (pid = rank, tid = lane);
// mergeTraces() (src/trace/trace_merge.h) joins the arrays of all ranks into one file for Perfetto.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gradsync/clock.h"

namespace gradsync {

// Key/value arguments attached to a trace event ("args" in the Chrome trace format), e.g.
// TraceArgs().add("tensor", name).add("bytes", n).add("priority", p).
// Holds the members already encoded as JSON, so attaching them to an event is one string move.
// Keys are not de-duplicated: add each key once. Not thread-safe (a value type).
class TraceArgs {
 public:
  TraceArgs& add(std::string_view key, std::string_view value);
  TraceArgs& add(std::string_view key, const char* value) {
    return add(key, std::string_view(value));
  }
  TraceArgs& add(std::string_view key, const std::string& value) {
    return add(key, std::string_view(value));
  }
  TraceArgs& add(std::string_view key, double value);
  TraceArgs& add(std::string_view key, bool value);
  // Integers of any width and signedness (a template, so add("bytes", 3) is not ambiguous
  // between the double and the 64-bit overloads).
  template <std::integral T>
  requires(!std::same_as<T, bool>) TraceArgs& add(std::string_view key, T value) {
    if constexpr (std::is_signed_v<T>) {
      return addSigned(key, static_cast<int64_t>(value));
    } else {
      return addUnsigned(key, static_cast<uint64_t>(value));
    }
  }

  bool empty() const { return members_.empty(); }
  // The members without the surrounding braces: "\"k\":1,\"s\":\"v\"".
  const std::string& members() const { return members_; }

 private:
  TraceArgs& addSigned(std::string_view key, int64_t value);
  TraceArgs& addUnsigned(std::string_view key, uint64_t value);
  void appendKey(std::string_view key);

  std::string members_;
};

// Inclusive range of step numbers (the trainer's global step counter, starting at 0).
struct StepWindow {
  static constexpr int64_t kOpenEnd = std::numeric_limits<int64_t>::max();
  int64_t first = 10;
  int64_t last = 19;  // kOpenEnd: until the end of training

  bool contains(int64_t step) const { return step >= first && step <= last; }
  // "10:19", "10:" for an open end; parseStepWindow() reads it back.
  std::string describe() const;
  bool operator==(const StepWindow&) const = default;
};

// Parses --trace-steps. Accepted forms: "A:B" (steps A..B inclusive, A <= B), "A:" (from step A
// to the end of training) and "A" (step A only), with A, B non-negative integers. Throws
// ConfigError naming the flag and the accepted forms otherwise.
StepWindow parseStepWindow(const std::string& text);

// The window used when --trace is given without --trace-steps: ten steps after the first ten,
// which are skipped because they carry one-time costs (allocation, connection set-up, caches).
// When the run is known to be shorter (totalSteps > 0 and < 20), the window is moved to its last
// ten steps (or all of them), so a short run still gives a non-empty trace. totalSteps <= 0
// means unknown (e.g. --epochs) and gives 10:19.
StepWindow defaultStepWindow(int64_t totalSteps = 0);

// Thread lanes ("tid" in the trace): one timeline row per lane in the viewer. Lanes are small
// integers in [0, kMaxLanes); name extra ones with TraceRecorder::setLaneName.
using LaneId = int;
inline constexpr LaneId kMainLane = 0;       // "training": forward, backward, optimizer, wait
inline constexpr LaneId kCommLane = 1;       // "communication": queue, send, reduce per tensor
inline constexpr LaneId kTransportLane = 2;  // "transport": the transport's event loop
inline constexpr LaneId kMaxLanes = 64;

class TraceRecorder {
 public:
  // Past this many events the recorder keeps counting but stops storing: memory stays bounded
  // whatever the window (e.g. --trace-steps 0: on a long run), and the output notes how many
  // were dropped. 250k events are <= ~50 MB of memory and ~40 MB of JSON per rank, so even an
  // 8-rank merge at the cap stays loadable in Perfetto; a normal window is far below it.
  static constexpr size_t kDefaultMaxEvents = 250'000;
  // Name of the instant event that reports dropped events (args: dropped, max_events).
  static constexpr std::string_view kDroppedEventName = "trace events dropped";

  // `clock` must outlive the recorder; timestamps are clock.now() in nanoseconds.
  TraceRecorder(int rank, StepWindow window, const Clock& clock,
                size_t maxEvents = kDefaultMaxEvents);
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  int rank() const { return rank_; }
  StepWindow window() const { return window_; }
  Nanos now() const { return clock_.now(); }

  // Called by the training thread at the start of each step. Closes the previous step (see
  // endStep) and turns recording on iff `step` is inside the window; inside it, the step itself
  // is recorded as a "step N" span on kMainLane from this call to the next setStep/endStep.
  void setStep(int64_t step);
  // Closes the open step span, if any, and turns recording off. Call after the last step.
  void endStep();
  // True while the current step is inside the window. Cheap: check it before building args.
  bool active() const { return active_.load(std::memory_order_relaxed); }

  // Names a lane's row (default: "training", "communication", "transport", "lane N").
  void setLaneName(LaneId lane, std::string name);

  // A complete event ("ph":"X") from start to end (clock times). Dropped unless active().
  void complete(LaneId lane, std::string_view category, std::string_view name, Nanos start,
                Nanos end, const TraceArgs& args = {});
  // An instant event ("ph":"i") at now(), drawn as a marker on the lane. Dropped unless active().
  void instant(LaneId lane, std::string_view category, std::string_view name,
               const TraceArgs& args = {});
  // A counter sample ("ph":"C") at now(), e.g. counter("in flight", "bytes", n): the viewer
  // draws a per-rank graph titled "<name> <series>". Dropped unless active().
  void counter(std::string_view name, std::string_view series, double value);

  // Events stored so far (metadata excluded) and events dropped at the cap.
  size_t eventCount() const;
  uint64_t droppedCount() const;

  // This rank's trace: a JSON array of metadata events (process "rank N" sorted by rank, lane
  // names) followed by the recorded events, one per line; timestamps in microseconds with three
  // decimals. May be called while recording continues (it holds the lock while it runs).
  std::string serialize() const;

 private:
  friend class ScopedEvent;
  struct Event {
    int64_t startNs = 0;
    int64_t durationNs = 0;  // 'X' only
    LaneId lane = kMainLane;
    char phase = 'X';  // 'X', 'i' or 'C'
    std::string category;
    std::string name;
    std::string args;  // JSON object members without braces, or empty
  };

  // Stores `event` regardless of active() (ScopedEvent decides at its start), up to the cap.
  void record(Event&& event);
  void appendEvent(std::string& out, const Event& event) const;
  void appendMetadata(std::string& out) const;
  std::string laneName(LaneId lane) const;

  const int rank_;
  const StepWindow window_;
  const Clock& clock_;
  const size_t maxEvents_;
  std::atomic<bool> active_{false};

  mutable std::mutex mutex_;
  // Fixed-capacity chunks rather than one vector: growth never moves stored events, so a
  // recording thread never waits, lock held, for millions of events to be copied. (std::deque
  // would do the same but allocates every 4 events of this size.)
  static constexpr size_t kChunkEvents = 4096;
  std::vector<std::vector<Event>> chunks_;
  size_t eventCount_ = 0;
  uint64_t dropped_ = 0;
  int64_t firstDropNs_ = 0;
  uint64_t usedLanes_ = (1u << kMainLane) | (1u << kCommLane);  // bit per lane to name
  std::string laneNames_[kMaxLanes];
  bool stepOpen_ = false;
  int64_t openStep_ = 0;
  int64_t openStepStartNs_ = 0;
};

// Records the enclosing scope as a complete event, e.g.
//   ScopedEvent e(recorder, kCommLane, "comm", "send");
//   e.arg("tensor", name).arg("bytes", bytes);
// Whether it records is decided once, at construction (recorder non-null and active()), so a
// span that starts inside the window is kept even if it ends after the window closed. When not
// armed, construction, arg() and destruction do nothing but a branch. The recorder must outlive
// the event. Not thread-safe itself: use it on the thread that created it.
class ScopedEvent {
 public:
  ScopedEvent(TraceRecorder* recorder, LaneId lane, std::string_view category,
              std::string_view name);
  ~ScopedEvent() { end(); }
  ScopedEvent(const ScopedEvent&) = delete;
  ScopedEvent& operator=(const ScopedEvent&) = delete;

  bool armed() const { return recorder_ != nullptr; }
  template <typename T>
  ScopedEvent& arg(std::string_view key, const T& value) {
    if (armed()) args_.add(key, value);
    return *this;
  }
  // Records the event now instead of at the end of the scope; later calls do nothing.
  void end();

 private:
  TraceRecorder* recorder_ = nullptr;
  LaneId lane_;
  Nanos start_{0};
  std::string category_;
  std::string name_;
  TraceArgs args_;
};

}  // namespace gradsync
