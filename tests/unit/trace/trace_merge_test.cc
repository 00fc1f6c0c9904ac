#include "trace/trace_merge.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "gradsync/error.h"
#include "gradsync/trace.h"

namespace gradsync {
namespace {

using Json = nlohmann::json;
using namespace std::chrono_literals;

// Rank r records one "backward" span of 2 us starting at 100 us + r us.
std::vector<std::string> recordRanks(int ranks, uint64_t maxEvents = 1000) {
  std::vector<std::string> out;
  for (int rank = 0; rank < ranks; ++rank) {
    ManualClock clock(100us + std::chrono::microseconds(rank));
    TraceRecorder recorder(rank, {0, 0}, clock, maxEvents);
    recorder.setStep(0);
    {
      ScopedEvent event(&recorder, kMainLane, "compute", "backward");
      clock.advance(2us);
    }
    recorder.endStep();
    out.push_back(recorder.serialize());
  }
  return out;
}

Json eventsNamed(const Json& trace, const std::string& name) {
  Json out = Json::array();
  for (const Json& e : trace["traceEvents"]) {
    if (e["name"] == name) out.push_back(e);
  }
  return out;
}

TEST(MergeTraces, AllRanksInOneChromeTrace) {
  Json trace = Json::parse(mergeTraces(recordRanks(3), R"({"model":"cnn","workers":3})"));
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  EXPECT_EQ(trace["otherData"]["model"], "cnn");
  EXPECT_EQ(trace["otherData"]["workers"], 3);
  EXPECT_EQ(trace["otherData"]["ranks"], 3);
  EXPECT_EQ(trace["otherData"]["dropped_events"], 0);
  EXPECT_FALSE(trace["otherData"].contains("clock_offsets_ns"));

  Json backward = eventsNamed(trace, "backward");
  ASSERT_EQ(backward.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(backward[rank]["pid"], rank);
    EXPECT_DOUBLE_EQ(backward[rank]["ts"].get<double>(), 100.0 + rank);  // microseconds
    EXPECT_DOUBLE_EQ(backward[rank]["dur"].get<double>(), 2.0);
  }
  Json sortIndex = eventsNamed(trace, "process_sort_index");
  Json names = eventsNamed(trace, "process_name");
  ASSERT_EQ(sortIndex.size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(sortIndex[rank]["args"]["sort_index"], rank);
    EXPECT_EQ(names[rank]["args"]["name"], "rank " + std::to_string(rank));
  }
}

TEST(MergeTraces, ClockOffsetsShiftEachRankExactly) {
  std::string merged = mergeTraces(recordRanks(2), "", {Nanos{0}, Nanos{-1'000'500}});
  Json trace = Json::parse(merged);
  Json backward = eventsNamed(trace, "backward");
  EXPECT_DOUBLE_EQ(backward[0]["ts"].get<double>(), 100.0);
  EXPECT_DOUBLE_EQ(backward[1]["ts"].get<double>(), 101.0 - 1000.5);
  EXPECT_NE(merged.find("\"ts\":-899.5"), std::string::npos);  // no binary rounding noise
  EXPECT_EQ(trace["otherData"]["clock_offsets_ns"], Json::array({0, -1'000'500}));
}

TEST(MergeTraces, SumsDroppedEvents) {
  // Each rank stores 1 event (its backward span) and drops the step span.
  Json trace = Json::parse(mergeTraces(recordRanks(2, /*maxEvents=*/1)));
  EXPECT_EQ(trace["otherData"]["dropped_events"], 2);
}

TEST(MergeTraces, EmptyAndSingleRank) {
  Json none = Json::parse(mergeTraces({}));
  EXPECT_TRUE(none["traceEvents"].empty());
  EXPECT_EQ(none["otherData"]["ranks"], 0);
  Json one = Json::parse(mergeTraces(recordRanks(1)));
  EXPECT_EQ(eventsNamed(one, "backward").size(), 1u);
}

TEST(MergeTraces, RefusesMalformedInput) {
  std::vector<std::string> ranks = recordRanks(2);
  EXPECT_THROW(mergeTraces({ranks[1], ranks[0]}), DataError);            // out of rank order
  EXPECT_THROW(mergeTraces({ranks[0], "[{\"name\":\"x\""}), DataError);  // truncated
  EXPECT_THROW(mergeTraces({ranks[0], "{}"}), DataError);
  EXPECT_THROW(mergeTraces({ranks[0], "[1]"}), DataError);
  EXPECT_THROW(mergeTraces(ranks, "[1,2]"), DataError);
  EXPECT_THROW(mergeTraces(ranks, "{"), DataError);
  EXPECT_THROW(mergeTraces(ranks, "", {Nanos{0}}), DataError);
  try {
    mergeTraces({ranks[0], "not json"});
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

TEST(WriteTraceFile, WritesAtomicallyAndNamesThePathOnFailure) {
  auto dir = std::filesystem::temp_directory_path() /
             ("gradsync_trace_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "trace.json").string();
  std::string trace = mergeTraces(recordRanks(2));
  writeTraceFile(path, trace);
  std::ifstream in(path);
  std::stringstream read;
  read << in.rdbuf();
  EXPECT_EQ(read.str(), trace);
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temp left
  std::filesystem::remove_all(dir);

  std::string missing = (dir / "no" / "such" / "dir.json").string();
  try {
    writeTraceFile(missing, trace);
    FAIL();
  } catch (const SystemError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gradsync
