#include "schedule/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "common/check.h"
#include "common/units.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr const char* kValidForms =
    "choose fifo, wfbp, fusion:MB (e.g. fusion:25) or p3[:slice=N,window=W] (e.g. "
    "p3:slice=40000,window=2)";

// "slice=N,window=W" (either, in any order) into spec.
void parseP3Options(const std::string& options, ScheduleSpec& spec) {
  size_t start = 0;
  while (start <= options.size()) {
    size_t end = std::min(options.find(',', start), options.size());
    std::string item = options.substr(start, end - start);
    size_t equals = item.find('=');
    std::string key = item.substr(0, equals);
    if (equals == std::string::npos || (key != "slice" && key != "window" && key != "concurrent")) {
      throw ConfigError(fmt::format("unknown p3 option '{}'", item),
                        {.hint = "p3 takes slice=N (elements), window=W (slices) and "
                                 "concurrent=0|1 (the window's slices in flight at once)"});
    }
    int64_t value = parseInteger(item.substr(equals + 1), fmt::format("--schedule p3:{}", key));
    if (key == "concurrent") {
      if (value != 0 && value != 1) throw ConfigError("--schedule p3:concurrent must be 0 or 1");
      spec.concurrent = value == 1;
    } else if (value < 1) {
      throw ConfigError(fmt::format("--schedule p3:{} must be at least 1", key));
    } else {
      (key == "slice" ? spec.sliceElements : spec.window) = static_cast<size_t>(value);
      spec.sliceGiven = spec.sliceGiven || key == "slice";
    }
    start = end + 1;
  }
}

}  // namespace

size_t p3SliceForLink(int ranks, double latencySeconds, double bytesPerSecond) {
  const size_t fallback = ScheduleSpec{}.sliceElements;
  if (ranks < 2 || !(latencySeconds > 0) || !(bytesPerSecond > 0)) return fallback;
  // (1 - 1e-12): a bound that is a whole number up to rounding stays that number.
  const double slice = std::ceil(49 * latencySeconds * bytesPerSecond * ranks / 4 * (1 - 1e-12));
  // 2^31 elements: beyond any tensor, and the conversion stays defined.
  return std::max(fallback, static_cast<size_t>(std::min(slice, 0x1p31)));
}

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
  } else if (text == "p3" || text.starts_with("p3:")) {
    spec.kind = Kind::kP3;
    if (text != "p3") parseP3Options(text.substr(3), spec);
  } else {
    throw ConfigError(fmt::format("unknown schedule '{}'", text), {.hint = kValidForms});
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
    case Kind::kP3:
      return fmt::format("p3:slice={},window={}{}", sliceElements, window,
                         concurrent ? "" : ",concurrent=0");
  }
  return "?";
}

namespace {

// p3: every tensor is a run of slices of whole rows, each its own unit.
GradientLayout sliceLayout(const std::vector<size_t>& tensorElements, const ScheduleSpec& spec,
                           const std::vector<size_t>& rowElements) {
  GradientLayout layout;
  int count = static_cast<int>(tensorElements.size());
  layout.offsetOf.resize(count);
  layout.unitOf.resize(count);
  layout.unitCount.resize(count);
  for (int t = count - 1; t >= 0; --t) {  // reverse registration: backward's order
    layout.offsetOf[t] = layout.totalElements;
    layout.unitOf[t] = static_cast<int>(layout.units.size());
    size_t row = rowElements.empty() ? 1 : std::max<size_t>(rowElements[t], 1);
    size_t sliceElements = std::max(spec.sliceElements / row, size_t{1}) * row;
    size_t done = 0;
    do {
      size_t elements = std::min(sliceElements, tensorElements[t] - done);
      layout.units.push_back({.offset = layout.totalElements + done,
                              .elements = elements,
                              .tensors = {t},
                              .priority = t,
                              .tensorOffset = done});
      done += elements;
    } while (done < tensorElements[t]);
    layout.unitCount[t] = static_cast<int>(layout.units.size()) - layout.unitOf[t];
    layout.totalElements += tensorElements[t];
  }
  return layout;
}

}  // namespace

namespace {

// Which tensors each unit holds, in the order the units close (their communication order). fifo
// and wfbp: one tensor each. fusion: one open bucket per group, each closed once it holds
// fusionBytes, and the rest at the end of backward in the order their last tensors came, so
// tensors of one group fuse across the other groups' tensors between them (a compressed model's
// weights across its dense BatchNorm tensors) instead of being cut at each of them.
std::vector<std::vector<int>> unitTensors(const std::vector<size_t>& tensorElements,
                                          const ScheduleSpec& spec,
                                          const std::vector<int>& groups) {
  struct Open {
    std::vector<int> tensors;
    size_t elements = 0;
    int last = 0;  // when its last tensor came, in backward order
  };
  std::map<int, Open> open;
  std::vector<std::vector<int>> units;
  const int count = static_cast<int>(tensorElements.size());
  for (int t = count - 1; t >= 0; --t) {  // reverse registration: backward's order
    if (spec.kind != ScheduleSpec::Kind::kFusion) {
      units.push_back({t});
      continue;
    }
    const int group = groups.empty() ? 0 : groups[t];
    Open& bucket = open[group];
    bucket.tensors.push_back(t);
    bucket.elements += tensorElements[t];
    bucket.last = count - 1 - t;
    if (bucket.elements * sizeof(float) >= spec.fusionBytes) {
      units.push_back(std::move(bucket.tensors));
      open.erase(group);
    }
  }
  std::vector<Open> rest;
  for (auto& [group, bucket] : open) rest.push_back(std::move(bucket));
  std::sort(rest.begin(), rest.end(), [](const Open& a, const Open& b) { return a.last < b.last; });
  for (Open& bucket : rest) units.push_back(std::move(bucket.tensors));
  return units;
}

}  // namespace

GradientLayout planLayout(const std::vector<size_t>& tensorElements, const ScheduleSpec& spec,
                          const std::vector<int>& groups, const std::vector<size_t>& rowElements) {
  if (spec.kind == ScheduleSpec::Kind::kP3) return sliceLayout(tensorElements, spec, rowElements);
  GradientLayout layout;
  const int count = static_cast<int>(tensorElements.size());
  layout.offsetOf.resize(count);
  layout.unitOf.resize(count);
  layout.unitCount.assign(count, 1);
  for (std::vector<int>& tensors : unitTensors(tensorElements, spec, groups)) {
    CommUnit unit{.offset = layout.totalElements};
    for (int t : tensors) {
      layout.unitOf[t] = static_cast<int>(layout.units.size());
      layout.offsetOf[t] = layout.totalElements;
      layout.totalElements += tensorElements[t];
      unit.elements += tensorElements[t];
    }
    unit.tensors = std::move(tensors);
    unit.priority = unit.tensors.back();  // the unit's earliest tensor in forward order
    layout.units.push_back(std::move(unit));
  }
  return layout;
}

size_t rowElements(const TensorShape& tensor) {
  bool matrix = tensor.dims.size() > 1 && tensor.dims[0] > 0;
  return matrix ? tensor.elements / static_cast<size_t>(tensor.dims[0]) : 1;
}

GradientLayout planLayout(const std::vector<TensorShape>& tensors, const ScheduleSpec& spec,
                          const std::vector<int>& groups) {
  std::vector<size_t> elements, rows;
  for (const TensorShape& t : tensors) {
    elements.push_back(t.elements);
    rows.push_back(rowElements(t));
  }
  return planLayout(elements, spec, groups, rows);
}

std::vector<int> prioritiesOf(const GradientLayout& layout) {
  std::vector<int> priorities;
  for (const CommUnit& unit : layout.units) priorities.push_back(unit.priority);
  return priorities;
}

std::vector<TensorShape> unitShapes(const GradientLayout& layout, size_t unit,
                                    const std::vector<TensorShape>& tensors) {
  const CommUnit& u = layout.units[unit];
  std::vector<TensorShape> shapes;
  for (int t : u.tensors) shapes.push_back(tensors[t]);
  if (layout.unitCount[u.tensors[0]] > 1) {  // a p3 slice: whole rows of one tensor
    TensorShape& slice = shapes[0];
    slice.name += fmt::format("[{}:{}]", u.tensorOffset, u.tensorOffset + u.elements);
    if (slice.dims.size() > 1)
      slice.dims[0] = static_cast<int64_t>(u.elements / rowElements(slice));
    slice.elements = u.elements;
  }
  return shapes;
}

std::vector<float> layoutToTensors(const GradientLayout& layout,
                                   const std::vector<TensorShape>& tensors,
                                   std::span<const float> flat) {
  GS_CHECK(flat.size() == layout.totalElements);
  std::vector<float> byTensor;
  byTensor.reserve(flat.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    auto begin = flat.begin() + static_cast<std::ptrdiff_t>(layout.offsetOf[t]);
    byTensor.insert(byTensor.end(), begin,
                    begin + static_cast<std::ptrdiff_t>(tensors[t].elements));
  }
  return byTensor;
}

std::vector<float> tensorsToLayout(const GradientLayout& layout,
                                   const std::vector<TensorShape>& tensors,
                                   std::span<const float> byTensor) {
  GS_CHECK(byTensor.size() == layout.totalElements);
  std::vector<float> flat(layout.totalElements);
  size_t at = 0;
  for (size_t t = 0; t < tensors.size(); ++t) {
    std::copy_n(byTensor.begin() + static_cast<std::ptrdiff_t>(at), tensors[t].elements,
                flat.begin() + static_cast<std::ptrdiff_t>(layout.offsetOf[t]));
    at += tensors[t].elements;
  }
  return flat;
}

}  // namespace gradsync
