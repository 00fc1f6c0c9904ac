// --trace FILE: every rank's recorded events gathered to rank 0 and written as one Chrome trace
// (Perfetto), with the run's options as metadata. Torch-free.
#pragma once

#include <string>

#include "gradsync/trace.h"
#include "gradsync/transport.h"
#include "torch/loop/options.h"

namespace gradsync {

// Ends `trace`'s last step and gathers every rank's events to rank 0, which writes
// options.tracePath: the events of the recorder of rank R (TraceRecorder::rank(), which need not
// be R's rank in `transport`: an elastic member's is its worker slot) as process R, none for a
// recorder no rank has. `moreMetadata`: ',"key":value...' appended to the file's metadata.
// Collective over `transport` (the workers); blocking.
void writeRunTrace(TraceRecorder& trace, Transport& transport, const TrainOptions& options,
                   const std::string& moreMetadata = "");

}  // namespace gradsync
