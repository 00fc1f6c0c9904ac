#include "ckpt/cpr_failures.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "common/units.h"
#include "data/random.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr std::string_view kForm =
    "mtbf=STEPS|DURATION,seed=S[,max=K], e.g. mtbf=300,seed=1 or mtbf=8h,seed=1";

bool hasTimeUnit(std::string_view value) {
  return !value.empty() && std::isalpha(static_cast<unsigned char>(value.back()));
}

}  // namespace

FailureSpec parseFailureSpec(std::string_view text, std::string_view what) {
  FailureSpec spec;
  bool haveMtbf = false;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw ConfigError(fmt::format("{}: '{}' is not key=value", what, item),
                        {.hint = std::string(kForm)});
    }
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    const std::string where = fmt::format("{} {}", what, key);
    if (key == "mtbf") {
      spec.duration = hasTimeUnit(value);
      spec.mtbf = spec.duration ? parseDurationSeconds(value, where) : parseNumber(value, where);
      haveMtbf = true;
    } else if (key == "seed") {
      spec.seed = static_cast<uint64_t>(parseInteger(value, where));
    } else if (key == "max") {
      spec.maxFailures = static_cast<int>(parseInteger(value, where));
    } else {
      throw ConfigError(fmt::format("{}: unknown key '{}'", what, key),
                        {.hint = std::string(kForm)});
    }
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (!haveMtbf || !(spec.mtbf > 0)) {
    throw ConfigError(fmt::format("{} needs a positive mtbf", what), {.hint = std::string(kForm)});
  }
  return spec;
}

std::vector<FailureEvent> failureTrace(const FailureSpec& spec, int shards, double horizon) {
  std::vector<FailureEvent> trace;
  if (shards < 1) return trace;
  uint64_t state = data::mixSeed(spec.seed, 0xfa11);
  auto uniform = [&state] {
    state = data::splitMix64(state);
    return (static_cast<double>(state >> 11) + 0.5) * 0x1.0p-53;  // in (0, 1)
  };
  double time = 0;
  for (;;) {
    if (spec.maxFailures >= 0 && static_cast<int>(trace.size()) >= spec.maxFailures) break;
    time += -spec.mtbf * std::log(uniform());
    if (time >= horizon) break;
    const auto shard = static_cast<int>(uniform() * shards);
    trace.push_back({time, std::min(shard, shards - 1)});
  }
  return trace;
}

std::optional<double> nthFailureOf(const std::vector<FailureEvent>& trace, int shard, int n) {
  int seen = 0;
  for (const FailureEvent& event : trace) {
    if (event.shard == shard && ++seen == n) return event.time;
  }
  return std::nullopt;
}

double RecoveryLedger::overheadFraction() const {
  const double total = totalTime();
  return total > 0 ? (total - trainingTime) / total : 0;
}

double RecoveryLedger::pls() const {
  uint64_t lost = 0;
  for (uint64_t l : lostAccesses) lost += l;
  return totalAccesses > 0 ? static_cast<double>(lost) / static_cast<double>(totalAccesses) : 0;
}

}  // namespace gradsync
