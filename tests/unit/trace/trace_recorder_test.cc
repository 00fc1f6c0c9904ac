#include "gradsync/trace.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "gradsync/error.h"

namespace gradsync {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// The recorded events of a serialized trace, without the metadata ("ph":"M") events.
Json recorded(const TraceRecorder& recorder) {
  Json all = Json::parse(recorder.serialize());
  Json events = Json::array();
  for (const Json& e : all) {
    if (e["ph"] != "M") events.push_back(e);
  }
  return events;
}

Json named(const Json& events, const std::string& name) {
  Json out = Json::array();
  for (const Json& e : events) {
    if (e["name"] == name) out.push_back(e);
  }
  return out;
}

TEST(StepWindow, ParsesAcceptedForms) {
  EXPECT_EQ(parseStepWindow("10:19"), (StepWindow{10, 19}));
  EXPECT_EQ(parseStepWindow("0:0"), (StepWindow{0, 0}));
  EXPECT_EQ(parseStepWindow("7"), (StepWindow{7, 7}));
  EXPECT_EQ(parseStepWindow("5:"), (StepWindow{5, StepWindow::kOpenEnd}));
  for (const char* text : {"10:19", "7:7", "5:"}) {
    EXPECT_EQ(parseStepWindow(text).describe(), text);
  }
}

TEST(StepWindow, RefusesOtherFormsNamingTheFlagAndTheForms) {
  for (const char* text : {"", ":", ":5", "a:b", "5:3", "-1:2", "1:-2", "1:2:3", " 1:2", "1:2x",
                           "1.5:3", "99999999999999999999:1"}) {
    try {
      parseStepWindow(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const ConfigError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find("--trace-steps"), std::string::npos) << message;
      EXPECT_NE(message.find("'A:B'"), std::string::npos) << message;
    }
  }
}

TEST(StepWindow, DefaultSkipsWarmUpAndFitsShortRuns) {
  EXPECT_EQ(defaultStepWindow(), (StepWindow{10, 19}));
  EXPECT_EQ(defaultStepWindow(1000), (StepWindow{10, 19}));
  EXPECT_EQ(defaultStepWindow(20), (StepWindow{10, 19}));
  EXPECT_EQ(defaultStepWindow(12), (StepWindow{2, 11}));
  EXPECT_EQ(defaultStepWindow(5), (StepWindow{0, 4}));
  EXPECT_EQ(defaultStepWindow(1), (StepWindow{0, 0}));
}

// Records one event of each kind per step for steps 0..5 with window 2:3.
TEST(TraceRecorder, RecordsOnlyInsideTheWindowWithInclusiveBounds) {
  ManualClock clock(1ms);
  TraceRecorder recorder(0, {2, 3}, clock);
  for (int64_t step = 0; step <= 5; ++step) {
    recorder.setStep(step);
    EXPECT_EQ(recorder.active(), step == 2 || step == 3) << step;
    {
      ScopedEvent forward(&recorder, kMainLane, "compute", "forward");
      forward.arg("step", step);
      clock.advance(10us);
    }
    Nanos start = clock.now();
    clock.advance(5us);
    recorder.complete(kCommLane, "comm", "send", start, clock.now(), TraceArgs().add("step", step));
    recorder.instant(kCommLane, "comm", "queue", TraceArgs().add("step", step));
    recorder.counter("in flight", "bytes", static_cast<double>(step));
  }
  recorder.endStep();
  EXPECT_FALSE(recorder.active());

  Json events = recorded(recorder);
  ASSERT_EQ(events.size(), 2u * 5u);  // 2 steps x (step span, forward, send, queue, counter)
  for (const Json& e : events) {
    int64_t step = e["args"].contains("step") ? e["args"]["step"].get<int64_t>()
                                              : e["args"]["bytes"].get<int64_t>();
    EXPECT_TRUE(step == 2 || step == 3) << e.dump();
  }
  Json steps = named(events, "step 2");
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0]["ph"], "X");
  EXPECT_EQ(steps[0]["tid"], kMainLane);
  EXPECT_DOUBLE_EQ(steps[0]["dur"].get<double>(), 15.0);  // one step = 10 us + 5 us
  EXPECT_EQ(named(events, "step 3").size(), 1u);
  EXPECT_EQ(named(events, "queue")[0]["s"], "t");
  EXPECT_FALSE(named(events, "in flight")[0].contains("tid"));
  EXPECT_EQ(recorder.eventCount(), 10u);
}

TEST(TraceRecorder, TimestampsAreMicrosecondsFromTheClock) {
  ManualClock clock(Nanos{1'234'567});
  TraceRecorder recorder(3, {0, 0}, clock);
  recorder.setStep(0);
  recorder.complete(kCommLane, "comm", "reduce", Nanos{2'000'001}, Nanos{2'500'000},
                    TraceArgs().add("tensor", "conv1.weight").add("bytes", 4096));
  std::string text = recorder.serialize();
  EXPECT_NE(text.find("\"ts\":2000.001,\"dur\":499.999"), std::string::npos) << text;
  Json reduce = named(recorded(recorder), "reduce")[0];
  EXPECT_EQ(reduce["pid"], 3);
  EXPECT_EQ(reduce["tid"], kCommLane);
  EXPECT_EQ(reduce["cat"], "comm");
  EXPECT_EQ(reduce["args"]["tensor"], "conv1.weight");
  EXPECT_EQ(reduce["args"]["bytes"], 4096);
  EXPECT_DOUBLE_EQ(reduce["ts"].get<double>(), 2000.001);
}

TEST(TraceRecorder, MetadataNamesProcessAndLanes) {
  ManualClock clock;
  TraceRecorder recorder(5, {1, 4}, clock);
  recorder.setLaneName(7, "prefetch");
  Json all = Json::parse(recorder.serialize());
  std::map<std::pair<std::string, int>, Json> meta;
  for (const Json& e : all) {
    ASSERT_EQ(e["ph"], "M");
    EXPECT_EQ(e["pid"], 5);
    meta[{e["name"].get<std::string>(), e["tid"].get<int>()}] = e["args"];
  }
  auto at = [&](const std::string& name, int tid) { return meta[{name, tid}]; };
  EXPECT_EQ(at("process_name", 0)["name"], "rank 5");
  EXPECT_EQ(at("process_sort_index", 0)["sort_index"], 5);
  EXPECT_EQ(at("process_labels", 0)["labels"], "steps 1:4");
  EXPECT_EQ(at("thread_name", kMainLane)["name"], "training");
  EXPECT_EQ(at("thread_name", kCommLane)["name"], "communication");
  EXPECT_EQ(at("thread_name", 7)["name"], "prefetch");
  EXPECT_EQ(at("thread_sort_index", 7)["sort_index"], 7);
  EXPECT_FALSE(meta.contains({"thread_name", kTransportLane}));  // unused lanes stay hidden
}

TEST(TraceRecorder, ScopedEventStartedInsideTheWindowIsKept) {
  ManualClock clock;
  TraceRecorder recorder(0, {0, 0}, clock);
  recorder.setStep(0);
  auto late = std::make_unique<ScopedEvent>(&recorder, kCommLane, "comm", "allgather");
  recorder.setStep(1);  // the window closes while the all-gather is still running
  ScopedEvent outside(&recorder, kCommLane, "comm", "dropped");
  EXPECT_FALSE(outside.armed());
  clock.advance(3us);
  late.reset();
  ScopedEvent noRecorder(nullptr, kMainLane, "compute", "forward");
  EXPECT_FALSE(noRecorder.armed());
  noRecorder.arg("ignored", 1);

  Json events = recorded(recorder);
  ASSERT_EQ(named(events, "allgather").size(), 1u);
  EXPECT_DOUBLE_EQ(named(events, "allgather")[0]["dur"].get<double>(), 3.0);
  EXPECT_EQ(named(events, "dropped").size(), 0u);
}

TEST(TraceRecorder, TwoThreadsRecordConcurrently) {
  constexpr int kPerThread = 10'000;
  TraceRecorder recorder(1, {0, 0}, SteadyClock::instance());
  recorder.setStep(0);
  auto body = [&](LaneId lane, const char* name) {
    for (int i = 0; i < kPerThread; ++i) {
      ScopedEvent event(&recorder, lane, "test", name);
      event.arg("i", i);
    }
  };
  std::thread comm(body, kCommLane, "send");
  body(kMainLane, "backward");
  comm.join();
  recorder.endStep();

  std::map<std::string, int> counts;
  std::map<int, int64_t> nextIndex;  // per lane: events of one thread stay in program order
  for (const Json& e : Json::parse(recorder.serialize())) {
    if (e["ph"] == "M") continue;
    ++counts[e["name"].get<std::string>()];
    if (e["cat"] != "test") continue;
    int lane = e["tid"].get<int>();
    EXPECT_EQ(e["args"]["i"].get<int64_t>(), nextIndex[lane]++);
    EXPECT_EQ(e["name"], lane == kCommLane ? "send" : "backward");
  }
  EXPECT_EQ(counts["send"], kPerThread);
  EXPECT_EQ(counts["backward"], kPerThread);
  EXPECT_EQ(counts["step 0"], 1);
  EXPECT_EQ(counts.size(), 3u);
}

TEST(TraceRecorder, CapBoundsMemoryAndNotesDrops) {
  ManualClock clock;
  TraceRecorder recorder(2, {0, 0}, clock, /*maxEvents=*/100);
  recorder.setStep(0);  // the step span itself is recorded at endStep, past the cap
  for (int i = 0; i < 149; ++i) recorder.instant(kMainLane, "test", "tick");
  recorder.endStep();
  EXPECT_EQ(recorder.eventCount(), 100u);
  EXPECT_EQ(recorder.droppedCount(), 50u);

  Json all = Json::parse(recorder.serialize());
  Json notes = named(all, std::string(TraceRecorder::kDroppedEventName));
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_EQ(notes[0]["args"]["dropped"], 50);
  EXPECT_EQ(notes[0]["args"]["max_events"], 100);
  Json labels = named(all, "process_labels");
  EXPECT_EQ(labels[0]["args"]["labels"], "steps 0:0, 50 events dropped");
  EXPECT_EQ(named(all, "tick").size(), 100u);
}

// Measures what one typical communication event costs in the file (quoted in docs/trace.md).
TEST(TraceRecorder, BytesPerEvent) {
  constexpr int kEvents = 1000;
  ManualClock clock(Nanos{123'456'789'012'345});  // a realistic CLOCK_MONOTONIC magnitude
  TraceRecorder recorder(0, {0, 0}, clock);
  recorder.setStep(0);
  size_t empty = recorder.serialize().size();
  for (int i = 0; i < kEvents; ++i) {
    ScopedEvent event(&recorder, kCommLane, "comm", "send");
    event.arg("tensor", "layer3.1.conv2.weight").arg("bytes", 147456).arg("priority", 17);
    clock.advance(1234567ns);
  }
  double withArgs = static_cast<double>(recorder.serialize().size() - empty) / kEvents;
  for (int i = 0; i < kEvents; ++i) {
    ScopedEvent event(&recorder, kMainLane, "compute", "backward");
    clock.advance(1234567ns);
  }
  double total = static_cast<double>(recorder.serialize().size() - empty);
  double withoutArgs = (total - withArgs * kEvents) / kEvents;
  std::printf("bytes/event: %.1f with 3 args, %.1f without args\n", withArgs, withoutArgs);
  RecordProperty("bytes_per_event_with_args", static_cast<int>(withArgs));
  EXPECT_LT(withArgs, 200.0);
  EXPECT_LT(withoutArgs, 120.0);
}

}  // namespace
}  // namespace gradsync
