#include "torch/loop/run_trace.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "common/tags.h"
#include "gradsync/collectives.h"
#include "trace/trace_merge.h"

namespace gradsync {

void writeRunTrace(TraceRecorder& trace, Transport& transport, const TrainOptions& options) {
  trace.endStep();
  const std::string mine = trace.serialize();
  auto all = allgatherBytes(transport, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size()},
                            {.tag = tags::kTrainer});
  if (transport.rank() != 0) return;
  std::vector<std::string> perRank;
  for (const auto& bytes : all) perRank.emplace_back(bytes.begin(), bytes.end());
  const std::string metadata = fmt::format(
      R"({{"model":"{}","schedule":"{}","sync":"{}","compress":"{}","workers":{},"steps":"{}"}})",
      options.model, options.schedule, options.sync, options.compression.spec, transport.size(),
      trace.window().describe());
  writeTraceFile(options.tracePath, mergeTraces(perRank, metadata));
}

}  // namespace gradsync
