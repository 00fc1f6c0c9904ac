// Joins the per-rank traces of TraceRecorder::serialize() into one Chrome trace file that
// Perfetto (ui.perfetto.dev) and chrome://tracing open, with one process row group per rank in
// rank order. Communication is the caller's job: gather the per-rank strings (e.g. an allgatherv
// of their bytes, or files), then call mergeTraces on one rank.
#pragma once

#include <string>
#include <vector>

#include "gradsync/clock.h"

namespace gradsync {

// Returns {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}}.
//
// perRank[i] must be rank i's serialize() output (its events carry pid i; any other pid throws
// DataError, so that offsets cannot be applied to the wrong rank). A string that is not a JSON
// array of objects throws DataError naming the rank.
//
// metadataJson: a JSON object (text; "" means {}) copied into "otherData", e.g. the training
// configuration. The merge adds "ranks" (perRank.size()) and "dropped_events" (sum over ranks of
// events dropped at each recorder's cap), and "clock_offsets_ns" when offsets are given.
// Anything else throws DataError.
//
// clockOffsets: empty, or one per rank, added to that rank's timestamps. Ranks on one host share
// CLOCK_MONOTONIC (SteadyClock), so their timestamps are directly comparable and no offset is
// needed. Across hosts, monotonic clocks have unrelated epochs: pass, for each rank, the offset
// that maps its clock onto a reference rank's clock (e.g. reference_now - rank_now measured in a
// barrier-synchronized exchange; error ≈ half the round trip).
//
// Not thread-safe with respect to its inputs; allocates about one rank's parsed events at a time.
std::string mergeTraces(const std::vector<std::string>& perRank,
                        const std::string& metadataJson = "",
                        const std::vector<Nanos>& clockOffsets = {});

// Writes `trace` to `path` through a temporary file renamed over it, so a crash or a full disk
// never leaves a truncated, unloadable trace behind. Throws SystemError naming the path.
void writeTraceFile(const std::string& path, const std::string& trace);

}  // namespace gradsync
