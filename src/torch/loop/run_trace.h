// --trace FILE: every rank's recorded events gathered to rank 0 and written as one Chrome trace
// (Perfetto), with the run's options as metadata. Torch-free.
#pragma once

#include "gradsync/trace.h"
#include "gradsync/transport.h"
#include "torch/loop/options.h"

namespace gradsync {

// Ends `trace`'s last step and gathers every rank's events to rank 0, which writes
// options.tracePath. Collective over `transport` (the workers); blocking.
void writeRunTrace(TraceRecorder& trace, Transport& transport, const TrainOptions& options);

}  // namespace gradsync
