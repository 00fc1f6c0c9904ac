#include "torch/loop/run_trace.h"

#include <fmt/format.h>

#include <string>
#include <vector>

#include "common/tags.h"
#include "gradsync/collectives.h"
#include "trace/trace_merge.h"

namespace gradsync {

void writeRunTrace(TraceRecorder& trace, Transport& transport, const TrainOptions& options,
                   const std::string& moreMetadata) {
  trace.endStep();
  // Each rank's events, preceded by the recorder's rank (an elastic member's is its worker slot).
  std::string mine = std::to_string(trace.rank()) + "\n" + trace.serialize();
  auto all = allgatherBytes(transport, {reinterpret_cast<const uint8_t*>(mine.data()), mine.size()},
                            {.tag = tags::kTrainer});
  if (transport.rank() != 0) return;
  std::vector<std::string> byRecorder;  // "[]" for a recorder no member has (a slot lost)
  for (const auto& bytes : all) {
    const std::string text(bytes.begin(), bytes.end());
    const size_t line = text.find('\n');
    const auto at = static_cast<size_t>(std::stoll(text.substr(0, line)));
    if (byRecorder.size() <= at) byRecorder.resize(at + 1, "[]");
    byRecorder[at] = text.substr(line + 1);
  }
  const std::string metadata = fmt::format(
      R"({{"model":"{}","schedule":"{}","sync":"{}","compress":"{}","workers":{},"steps":"{}"{}}})",
      options.model, options.schedule, options.sync, options.compression.spec, transport.size(),
      trace.window().describe(), moreMetadata);
  writeTraceFile(options.tracePath, mergeTraces(byRecorder, metadata));
}

}  // namespace gradsync
