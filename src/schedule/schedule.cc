#include "schedule/schedule.h"

#include <fmt/format.h>

#include "common/units.h"
#include "gradsync/error.h"

namespace gradsync {

ScheduleSpec ScheduleSpec::parse(const std::string& text) {
  ScheduleSpec spec;
  if (text == "fifo") {
    spec.kind = Kind::kFifo;
  } else if (text == "wfbp") {
    spec.kind = Kind::kWfbp;
  } else if (text == "fusion" || text.starts_with("fusion:")) {
    spec.kind = Kind::kFusion;
    if (text.size() > 7) {
      double mb = parseNumber(text.substr(7), "--schedule fusion:MB");
      if (mb <= 0) throw ConfigError("--schedule fusion:MB needs a positive size in MiB");
      spec.fusionBytes = static_cast<size_t>(mb * 1024 * 1024);
    }
  } else {
    throw ConfigError(fmt::format("unknown schedule '{}'", text),
                      {.hint = "choose fifo, wfbp or fusion:MB (e.g. fusion:25)"});
  }
  return spec;
}

std::string ScheduleSpec::toString() const {
  switch (kind) {
    case Kind::kFifo:
      return "fifo";
    case Kind::kWfbp:
      return "wfbp";
    case Kind::kFusion:
      return fmt::format("fusion:{:g}", static_cast<double>(fusionBytes) / (1024 * 1024));
  }
  return "?";
}

GradientLayout planLayout(const std::vector<size_t>& tensorElements, const ScheduleSpec& spec,
                          const std::vector<int>& groups) {
  GradientLayout layout;
  int count = static_cast<int>(tensorElements.size());
  layout.offsetOf.resize(count);
  layout.unitOf.resize(count);
  CommUnit open;
  auto close = [&] {
    if (open.tensors.empty()) return;
    for (int t : open.tensors) layout.unitOf[t] = static_cast<int>(layout.units.size());
    layout.units.push_back(std::move(open));
    open = CommUnit{.offset = layout.totalElements};
  };
  auto groupOf = [&](int t) { return groups.empty() ? 0 : groups[t]; };
  for (int t = count - 1; t >= 0; --t) {  // reverse registration: backward's order
    if (!open.tensors.empty() && groupOf(open.tensors.back()) != groupOf(t)) close();
    layout.offsetOf[t] = layout.totalElements;
    layout.totalElements += tensorElements[t];
    open.elements += tensorElements[t];
    open.tensors.push_back(t);
    bool full = spec.kind != ScheduleSpec::Kind::kFusion ||
                open.elements * sizeof(float) >= spec.fusionBytes;
    if (full) close();
  }
  close();
  return layout;
}

}  // namespace gradsync
