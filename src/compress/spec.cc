#include "compress/spec.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/units.h"
#include "compress/compressed_allreduce.h"
#include "compress/error_feedback.h"
#include "compress/registry.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? end : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

bool parseOnOff(const std::string& text, const std::string& what, const std::string& key) {
  if (text == "on") return true;
  if (text == "off") return false;
  throw ConfigError(fmt::format("{}: {} must be on or off, not '{}'", what, key, text));
}

// Applies the ",key=value" options to `spec`, rejecting keys the method does not know.
void applyKeys(CompressSpec& spec, const MethodInfo& method, const std::vector<std::string>& parts,
               const std::string& what) {
  for (size_t i = 1; i < parts.size(); ++i) {
    size_t eq = parts[i].find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError(fmt::format("{}: expected key=value, got '{}'", what, parts[i]));
    }
    std::string key = parts[i].substr(0, eq);
    std::string value = parts[i].substr(eq + 1);
    if (key == "ef") {
      spec.errorFeedback = parseOnOff(value, what, key);
      continue;
    }
    if (key == "allreduce") {
      spec.compressedAllreduce = parseOnOff(value, what, key);
      continue;
    }
    if (key == "ef_decay") {
      spec.errorFeedbackDecay = parseNumber(value, what + " option ef_decay");
      continue;
    }
    if (std::find(method.keys.begin(), method.keys.end(), key) == method.keys.end()) {
      std::string known = "ef, ef_decay";
      for (const auto& k : method.keys) known += ", " + k;
      known += ", allreduce";
      throw ConfigError(fmt::format("{}: {} has no option '{}'", what, method.name, key),
                        {.hint = "its options are: " + known});
    }
    parseNumber(value, fmt::format("{} option {}", what, key));
    spec.args.keys.emplace_back(key, value);
  }
}

// ef_decay needs the ErrorFeedback decorator: error feedback on, and not a method that keeps
// its residual itself.
void checkDecay(const CompressSpec& spec, const MethodInfo& method, const std::string& what) {
  const double decay = spec.errorFeedbackDecay;
  if (!(decay >= 0 && decay <= 1)) {
    throw ConfigError(fmt::format("{}: ef_decay needs 0 <= β <= 1, got {}", what, decay));
  }
  if (decay == 1) return;
  if (!spec.errorFeedback) {
    throw ConfigError(fmt::format("{}: ef_decay applies to error feedback, which is off", what),
                      {.hint = "drop ef=off, or ef_decay"});
  }
  if (method.ownErrorFeedback) {
    throw ConfigError(
        fmt::format("{}: {} keeps its residual itself and has no ef_decay", what, method.name));
  }
}

}  // namespace

CompressSpec CompressSpec::parse(const std::string& text, const std::string& what) {
  CompressSpec spec;
  if (text == "none" || text.empty()) return spec;
  std::vector<std::string> parts = split(text, ',');
  size_t colon = parts[0].find(':');
  spec.method = parts[0].substr(0, colon);
  const MethodInfo& method = findMethod(spec.method);
  spec.errorFeedback = method.errorFeedback;
  spec.args.value = method.defaultValue;
  if (colon != std::string::npos) {
    if (*method.valueName == '\0') {
      throw ConfigError(fmt::format("{}: {} takes no ':' value", what, method.name));
    }
    spec.args.value = parseNumber(parts[0].substr(colon + 1), what + " " + method.name);
    spec.args.hasValue = true;
  }
  applyKeys(spec, method, parts, what);
  checkDecay(spec, method, what);
  spec.args.errorFeedback = spec.errorFeedback;
  TensorShape probe{"probe", {64, 64}, 4096};
  try {
    if (spec.compressedAllreduce && method.absorbsMomentum) {  // its velocity is the unit's
      throw CompressedAllreduce::unavailable(method.name);
    }
    if (spec.compressedAllreduce) {
      CompressedAllreduce(method.make(spec.args, {}), method.name, false);
    } else {
      method.make(spec.args, {&probe, 1});
    }
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{} {}: {}", what, text, e.detail()), e.context());
  }
  return spec;
}

std::string CompressSpec::toString() const {
  if (dense()) return "none";
  const MethodInfo& method = findMethod(this->method);
  std::string text = this->method;
  if (*method.valueName != '\0') text += fmt::format(":{}", args.value);
  for (const auto& [k, v] : args.keys) text += fmt::format(",{}={}", k, v);
  if (errorFeedback != method.errorFeedback) text += errorFeedback ? ",ef=on" : ",ef=off";
  if (errorFeedbackDecay != 1) text += fmt::format(",ef_decay={}", errorFeedbackDecay);
  if (compressedAllreduce) text += ",allreduce=on";
  return text;
}

std::unique_ptr<Compressor> makeCompressor(const CompressSpec& spec,
                                           std::span<const TensorShape> unit) {
  if (spec.dense()) return nullptr;
  const MethodInfo& method = findMethod(spec.method);
  MethodArgs args = spec.args;
  args.errorFeedback = spec.errorFeedback;
  std::unique_ptr<Compressor> compressor;
  if (spec.compressedAllreduce) {  // it encodes shards, not the unit's tensors
    compressor = std::make_unique<CompressedAllreduce>(method.make(args, {}), method.name,
                                                       spec.errorFeedback);
  } else {
    compressor = method.make(args, unit);
  }
  if (!spec.errorFeedback || method.ownErrorFeedback) return compressor;
  size_t elements = 0;
  for (const TensorShape& t : unit) elements += t.elements;
  return std::make_unique<ErrorFeedback>(std::move(compressor), elements,
                                         static_cast<float>(spec.errorFeedbackDecay));
}

}  // namespace gradsync
