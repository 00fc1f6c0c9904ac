#include "compress/policy.h"

#include <fnmatch.h>

#include <algorithm>

#include <fmt/format.h>

#include "compress/registry.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

struct Override {
  std::string pattern;
  CompressSpec spec;
};

std::vector<Override> parseOverrides(const std::vector<std::string>& texts) {
  std::vector<Override> overrides;
  for (const std::string& text : texts) {
    // The first '=' separates: a spec such as "topk:0.1,ef=off" has more of them.
    size_t eq = text.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw ConfigError(fmt::format("--compress-override '{}' is not GLOB=SPEC", text),
                        {.hint = "e.g. --compress-override 'classifier.*=none'"});
    }
    overrides.push_back(
        {text.substr(0, eq), CompressSpec::parse(text.substr(eq + 1), "--compress-override")});
  }
  return overrides;
}

// `text` with DGC's sparsity ramp over the first `steps` steps (`dgc:R,warmup=N`), when it is dgc
// and gives no warm-up of its own; any other spec unchanged.
std::string withDgcRamp(const std::string& text, int64_t steps, const std::string& what) {
  const CompressSpec spec = CompressSpec::parse(text, what);
  if (spec.method != "dgc") return text;
  for (const auto& [key, value] : spec.args.keys) {
    if (key == "warmup") return text;
  }
  return fmt::format("{},warmup={}", text, steps);
}

}  // namespace

bool CompressionPlan::any() const {
  for (const CompressSpec& spec : perTensor) {
    if (!spec.dense()) return true;
  }
  return false;
}

bool CompressionPlan::absorbsMomentum(size_t t) const {
  return !perTensor[t].dense() && findMethod(perTensor[t].method).absorbsMomentum;
}

std::vector<int> CompressionPlan::groups() const {
  std::vector<std::string> seen;
  std::vector<int> groups;
  for (const CompressSpec& spec : perTensor) {
    std::string key = spec.toString();
    auto it = std::find(seen.begin(), seen.end(), key);
    if (it == seen.end()) it = seen.insert(seen.end(), key);
    groups.push_back(static_cast<int>(it - seen.begin()));
  }
  return groups;
}

int64_t resolveWarmupSteps(const CompressionConfig& config, uint64_t stepsPerEpoch) {
  if (config.warmupSteps >= 0) return config.warmupSteps;
  if (config.warmupSteps != kAutoWarmup) throw ConfigError("--compress-warmup must be >= 0");
  bool compresses = !CompressSpec::parse(config.spec).dense();
  for (const Override& o : parseOverrides(config.overrides)) compresses |= !o.spec.dense();
  if (!compresses) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>((stepsPerEpoch + 5) / 10));
}

CompressionConfig resolveAutoWarmups(CompressionConfig config, uint64_t stepsPerEpoch) {
  if (config.warmupSteps != kAutoWarmup) return config;
  config.warmupSteps = resolveWarmupSteps(config, stepsPerEpoch);
  const int64_t ramp = std::max<int64_t>(1, static_cast<int64_t>((stepsPerEpoch + 1) / 2));
  config.spec = withDgcRamp(config.spec, ramp, "--compress");
  for (std::string& o : config.overrides) {
    const size_t eq = o.find('=');
    if (eq != std::string::npos && eq > 0)  // else planCompression names the malformed override
      o = o.substr(0, eq + 1) + withDgcRamp(o.substr(eq + 1), ramp, "--compress-override");
  }
  return config;
}

int64_t parseWarmupFlag(const std::string& text) {
  if (text == "auto") return kAutoWarmup;
  size_t used = 0;
  int64_t steps = -1;
  try {
    steps = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || steps < 0) {
    throw ConfigError(
        fmt::format("--compress-warmup takes auto or a number of steps >= 0, not '{}'", text));
  }
  return steps;
}

std::string warmupFlagText(int64_t warmupSteps) {
  return warmupSteps == kAutoWarmup ? "auto" : std::to_string(warmupSteps);
}

CompressionPlan planCompression(const CompressionConfig& config,
                                const std::vector<TensorShape>& tensors, double momentum) {
  CompressSpec global = CompressSpec::parse(config.spec);
  std::vector<Override> overrides = parseOverrides(config.overrides);
  if (config.warmupSteps < 0) throw ConfigError("--compress-warmup must be >= 0");
  CompressionPlan plan;
  plan.warmupSteps = config.warmupSteps;
  plan.warmupCodec = CompressSpec::parse(config.warmupCodec, "--compress-warmup-codec");
  if (!plan.warmupCodec.dense() && plan.warmupCodec.toString() != "fp16" &&
      plan.warmupCodec.toString() != "int8") {
    throw ConfigError(fmt::format("--compress-warmup-codec {}: the warm-up is for dense steps",
                                  config.warmupCodec),
                      {.hint = "choose none (float32), fp16 or int8, which hold where dense does"});
  }
  for (const TensorShape& tensor : tensors) {
    CompressSpec spec = tensor.elements < config.minElements ? CompressSpec{} : global;
    for (const Override& o : overrides) {
      if (fnmatch(o.pattern.c_str(), tensor.name.c_str(), 0) == 0) {
        spec = o.spec;
        break;
      }
    }
    spec.args.momentum = momentum;
    plan.perTensor.push_back(std::move(spec));
  }
  return plan;
}

}  // namespace gradsync
