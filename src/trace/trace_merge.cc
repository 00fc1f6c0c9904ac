#include "trace/trace_merge.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <nlohmann/json.hpp>

#include "common/socket.h"
#include "gradsync/error.h"
#include "gradsync/trace.h"

namespace gradsync {
namespace {

using Json = nlohmann::ordered_json;  // keeps each event's fields in the recorder's order

Json parseRank(const std::string& text, size_t rank) {
  Json events = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (events.is_discarded() || !events.is_array()) {
    throw DataError(
        fmt::format("rank {}'s trace is not a JSON array ({} bytes)", rank, text.size()),
        {.rank = static_cast<int>(rank),
         .operation = "merge traces",
         .hint = "pass TraceRecorder::serialize() of each rank, in rank order"});
  }
  return events;
}

// Adds `offset` to "ts" exactly: through integer nanoseconds, so that the printed value keeps the
// recorder's three decimals instead of picking up binary rounding noise.
void shiftTimestamp(Json& event, Nanos offset) {
  auto ts = event.find("ts");
  if (ts == event.end() || !ts->is_number()) return;
  auto nanos = std::llround(ts->get<double>() * 1000.0) + offset.count();
  *ts = static_cast<double>(nanos) / 1000.0;
}

// Appends rank `rank`'s events to `out`; returns how many events that rank dropped at its cap.
uint64_t appendRank(std::string& out, const std::string& text, size_t rank, Nanos offset) {
  Json events = parseRank(text, rank);
  uint64_t dropped = 0;
  for (Json& event : events) {
    auto pid = event.is_object() ? event.find("pid") : event.end();
    if (!event.is_object() || pid == event.end() || *pid != rank) {
      throw DataError(fmt::format("rank {}'s trace holds an event of another process: {}", rank,
                                  event.dump().substr(0, 200)),
                      {.rank = static_cast<int>(rank), .operation = "merge traces"});
    }
    if (offset.count() != 0) shiftTimestamp(event, offset);
    if (event.value("name", "") == TraceRecorder::kDroppedEventName && event.contains("args")) {
      dropped += event["args"].value("dropped", uint64_t{0});
    }
    out += event.dump(-1, ' ', false, Json::error_handler_t::replace);
    out += ",\n";
  }
  return dropped;
}

Json parseMetadata(const std::string& metadataJson) {
  if (metadataJson.empty()) return Json::object();
  Json metadata = Json::parse(metadataJson, nullptr, /*allow_exceptions=*/false);
  if (metadata.is_discarded() || !metadata.is_object()) {
    throw DataError("trace metadata is not a JSON object",
                    {.operation = "merge traces", .hint = "pass e.g. the configuration as {...}"});
  }
  return metadata;
}

}  // namespace

std::string mergeTraces(const std::vector<std::string>& perRank, const std::string& metadataJson,
                        const std::vector<Nanos>& clockOffsets) {
  if (!clockOffsets.empty() && clockOffsets.size() != perRank.size()) {
    throw DataError(
        fmt::format("{} clock offsets for {} ranks", clockOffsets.size(), perRank.size()),
        {.operation = "merge traces", .hint = "pass none, or one per rank"});
  }
  Json otherData = parseMetadata(metadataJson);
  size_t total = 0;
  for (const std::string& text : perRank) total += text.size();
  std::string out;
  out.reserve(total + 4096);
  out += "{\"traceEvents\":[\n";
  uint64_t dropped = 0;
  for (size_t rank = 0; rank < perRank.size(); ++rank) {
    Nanos offset = clockOffsets.empty() ? Nanos{0} : clockOffsets[rank];
    dropped += appendRank(out, perRank[rank], rank, offset);
  }
  if (out.ends_with(",\n")) out.resize(out.size() - 2);
  otherData["ranks"] = perRank.size();
  otherData["dropped_events"] = dropped;
  if (!clockOffsets.empty()) {
    Json offsets = Json::array();
    for (Nanos offset : clockOffsets) offsets.push_back(offset.count());
    otherData["clock_offsets_ns"] = offsets;
  }
  out += "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":";
  out += otherData.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += "}\n";
  return out;
}

void writeTraceFile(const std::string& path, const std::string& trace) {
  std::string temp = fmt::format("{}.tmp-{}", path, ::getpid());
  auto fail = [&](std::string_view what) {
    int err = errno;
    ::unlink(temp.c_str());
    throw SystemError(fmt::format("cannot {} trace file '{}': {}", what, path, errnoText(err)),
                      {.operation = "write trace"});
  };
  {
    Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!fd.valid()) fail("create");
    size_t done = 0;
    while (done < trace.size()) {
      ssize_t n = ::write(fd.get(), trace.data() + done, trace.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("write");
      done += static_cast<size_t>(n);
    }
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) fail("rename into");
}

}  // namespace gradsync
