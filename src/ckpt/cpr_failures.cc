#include "ckpt/cpr_failures.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "common/random.h"
#include "common/units.h"
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

namespace {

// The failure process, one event at a time (failureTrace and nthFailureOf draw the same one).
class FailureProcess {
 public:
  FailureProcess(const FailureSpec& spec, int shards)
      : spec_(spec), shards_(shards), state_(rng::mixSeed(spec.seed, 0xfa11)) {}
  std::optional<FailureEvent> next() {
    if (shards_ < 1 || (spec_.maxFailures >= 0 && drawn_ >= spec_.maxFailures)) return {};
    ++drawn_;
    time_ += -spec_.mtbf * std::log(uniform());
    const auto shard = static_cast<int>(uniform() * shards_);
    return FailureEvent{time_, std::min(shard, shards_ - 1)};
  }

 private:
  double uniform() {  // in (0, 1)
    state_ = rng::splitMix64(state_);
    return (static_cast<double>(state_ >> 11) + 0.5) * 0x1.0p-53;
  }
  FailureSpec spec_;
  int shards_;
  uint64_t state_;
  double time_ = 0;
  int drawn_ = 0;
};

}  // namespace

std::vector<FailureEvent> failureTrace(const FailureSpec& spec, int shards, double horizon) {
  std::vector<FailureEvent> trace;
  FailureProcess process(spec, shards);
  for (auto event = process.next(); event && event->time < horizon; event = process.next()) {
    trace.push_back(*event);
  }
  return trace;
}

std::optional<double> nthFailureOf(const FailureSpec& spec, int shards, int shard, int n) {
  if (shard < 0 || shard >= shards || n < 1) return std::nullopt;
  FailureProcess process(spec, shards);
  int seen = 0;
  for (auto event = process.next(); event; event = process.next()) {
    if (event->shard == shard && ++seen == n) return event->time;
  }
  return std::nullopt;
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
