#include "sync/strategy.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include <fmt/format.h>

#include "common/units.h"
#include "gradsync/error.h"
#include "optim/delay_compensation.h"

namespace gradsync {
namespace {

constexpr const char* kForms =
    "choose ssgd, sharded[:fc=reduce|exchange|auto,concurrent=N], asgd, ssp:S, odsgd, "
    "ssdsgd:K, cdsgd:K, localsgd:H or "
    "diloco:H[,outer_lr=X,outer_momentum=M,nesterov=on|off,quantize=int8|none,fragments=P,"
    "delay=T,alpha=A,eager=on|off,group=rank|host]";

int parseCount(const std::string& text, const std::string& whole, int minimum) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < minimum) {
    throw ConfigError(fmt::format("--sync {}: '{}' is not an integer >= {}", whole, text, minimum),
                      {.hint = kForms});
  }
  return value;
}

// sharded's options, "fc=reduce|exchange|auto" and "concurrent=N", joined by commas.
void parseShardedOptions(const std::string& options, const std::string& whole,
                         SyncStrategy& strategy) {
  if (options.empty()) {
    throw ConfigError(fmt::format("--sync {}: no option after ':'", whole),
                      {.hint = "sharded takes fc=reduce|exchange|auto and concurrent=N"});
  }
  for (const auto& [option, key, value, hasValue] : splitOptions(options)) {
    bool known = false;
    for (FcMode mode : {FcMode::kReduce, FcMode::kExchange, FcMode::kAuto}) {
      if (key == "fc" && value == toString(mode)) strategy.fc = mode, known = true;
    }
    if (key == "concurrent" && hasValue) {
      strategy.concurrent = parseCount(value, whole, 1);
      known = true;
    }
    if (!known) {
      throw ConfigError(fmt::format("--sync {}: unknown option '{}'", whole, option),
                        {.hint = "sharded takes fc=reduce|exchange|auto and concurrent=N"});
    }
  }
}

// --compensate under --sync (the pipeline's own is checked with --pipeline): the asynchronous
// modes' staleness is what SC (on the servers) and LWP (on the workers) compensate.
void checkCompensationApplies(const SyncStrategy& strategy, const DelayCompensation& c) {
  using K = SyncStrategy::Kind;
  if (!c.any() || strategy.kind == K::kAsgd || strategy.kind == K::kSsp) return;
  static const char* const kNames[] = {"ssgd",  "sharded", "asgd",  "ssp",
                                       "odsgd", "ssdsgd",  "cdsgd", "localsgd"};
  const std::string what = fmt::format("--compensate {} does not apply to --sync {}", c.describe(),
                                       kNames[static_cast<int>(strategy.kind)]);
  if (strategy.delayed()) {
    throw ConfigError(
        what, {.hint = "odsgd, ssdsgd and cdsgd compute each gradient on their local model, "
                       "which already predicts the global model the push will meet (LWP by "
                       "another name; SC would count the delay twice); compensate with asgd or "
                       "ssp:S"});
  }
  if (c.predict && strategy.kind == K::kSsgd) {
    throw ConfigError(what, {.hint = "ssgd applies every gradient to the parameters it was "
                                     "computed on: there is no staleness for lwp to predict "
                                     "over; use it with asgd or ssp:S (or --pipeline S "
                                     "--pipeline-mode pb)"});
  }
  throw ConfigError(what, {.hint = "sc (on the servers) and lwp (on the workers) compensate "
                                   "staleness under asgd and ssp:S; for pipeline stages, "
                                   "--pipeline S with --pipeline-mode pb"});
}

// "diloco:H[,outer_lr=X,outer_momentum=M,nesterov=on|off,quantize=int8|none,fragments=P,
// delay=T,alpha=A,eager=on|off,group=rank|host]": the paper's outer Nesterov SGD (lr 0.7,
// momentum 0.9) unless an option says otherwise; int8 pseudo-gradients with quantize=int8
// (INTELLECT-1's int8 ring); Streaming DiLoCo's fragments, overlap and mixing; eager: the
// overlap of a whole turn, merged one turn late; group=host: a host's ranks are one DiLoCo
// worker, data-parallel among themselves every step.
// Streaming DiLoCo's options: fragments dividing H, a delay shorter than a fragment's turn, alpha
// in [0, 1] (default 0.5 with a delay: the paper's mixing); eager sets the delay to the turn.
void checkStreaming(SyncStrategy& strategy, bool alphaGiven, bool delayGiven,
                    const std::string& text) {
  OuterOptions& o = strategy.outer;
  const int period = strategy.parameter;
  if (period % o.fragments != 0) {
    throw ConfigError(
        fmt::format("--sync {}: fragments={} must divide H={}", text, o.fragments, period),
        {.hint = "one fragment syncs every H/P steps"});
  }
  if (o.eager) {
    if (alphaGiven || delayGiven) {
      throw ConfigError(
          fmt::format("--sync {}: eager=on sets the delay (H/P) and keeps the local "
                      "steps whole: it takes no delay or alpha",
                      text));
    }
    o.delay = period / o.fragments;
    return;
  }
  if (o.delay >= period / o.fragments) {
    throw ConfigError(
        fmt::format("--sync {}: delay={} must be shorter than H/P = {} steps", text, o.delay,
                    period / o.fragments),
        {.hint = "a fragment's all-reduce must end before the next fragment's begins"});
  }
  if (!alphaGiven && o.delay > 0) o.alpha = 0.5;
  if (!(o.alpha >= 0 && o.alpha <= 1)) {
    throw ConfigError(fmt::format("--sync {}: alpha must be in [0, 1]", text));
  }
}

SyncStrategy parseDiloco(const std::string& text) {
  SyncStrategy strategy{SyncStrategy::Kind::kLocalSgd, 0};
  strategy.diloco = true;
  strategy.outer = {.lr = 0.7, .momentum = 0.9, .nesterov = true};
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    throw ConfigError(fmt::format("--sync {} needs a parameter (diloco:H)", text),
                      {.hint = kForms});
  }
  const std::vector<OptionItem> parts = splitOptions(text.substr(colon + 1));
  strategy.parameter = parseCount(parts.empty() ? "" : parts[0].text, text, 1);
  bool alphaGiven = false, delayGiven = false;
  for (size_t i = 1; i < parts.size(); ++i) {
    const auto& [option, key, value, hasValue] = parts[i];
    if (key == "outer_lr") {
      strategy.outer.lr = parseNumber(value, "diloco's outer_lr");
    } else if (key == "outer_momentum") {
      strategy.outer.momentum = parseNumber(value, "diloco's outer_momentum");
    } else if (key == "nesterov" && (value == "on" || value == "off")) {
      strategy.outer.nesterov = value == "on";
    } else if (key == "quantize" && (value == "int8" || value == "none")) {
      strategy.outer.int8 = value == "int8";
    } else if (key == "fragments") {
      strategy.outer.fragments = parseCount(value, text, 1);
    } else if (key == "delay") {
      strategy.outer.delay = parseCount(value, text, 0);
      delayGiven = true;
    } else if (key == "eager" && (value == "on" || value == "off")) {
      strategy.outer.eager = value == "on";
    } else if (key == "alpha") {
      strategy.outer.alpha = parseNumber(value, "diloco's alpha");
      alphaGiven = true;
    } else if (key == "group" && (value == "rank" || value == "host")) {
      strategy.outer.perHost = value == "host";
    } else {
      throw ConfigError(fmt::format("--sync {}: unknown option '{}'", text, option),
                        {.hint = "diloco takes outer_lr=X, outer_momentum=M, nesterov=on|off, "
                                 "quantize=int8|none, fragments=P, delay=T, alpha=A, "
                                 "eager=on|off, group=rank|host"});
    }
  }
  if (!(strategy.outer.lr > 0) || !(strategy.outer.momentum >= 0 && strategy.outer.momentum < 1)) {
    throw ConfigError(
        fmt::format("--sync {}: outer_lr must be > 0 and outer_momentum in [0, 1)", text));
  }
  checkStreaming(strategy, alphaGiven, delayGiven, text);
  return strategy;
}

}  // namespace

const char* toString(FcMode mode) {
  switch (mode) {
    case FcMode::kReduce:
      return "reduce";
    case FcMode::kExchange:
      return "exchange";
    case FcMode::kAuto:
      return "auto";
  }
  return "?";
}

SyncStrategy SyncStrategy::parse(const std::string& text) {
  using K = Kind;
  struct Form {
    const char* name;
    Kind kind;
    int defaultParameter;  // -1: none taken; 0: required
    int minimum;
  };
  static const Form kTable[] = {{"ssgd", K::kSsgd, -1, 0},   {"sharded", K::kSharded, -1, 0},
                                {"asgd", K::kAsgd, -1, 0},   {"ssp", K::kSsp, 0, 0},
                                {"odsgd", K::kOdsgd, -1, 0}, {"ssdsgd", K::kSsdsgd, 5, 1},
                                {"cdsgd", K::kCdsgd, 5, 1},  {"localsgd", K::kLocalSgd, 0, 1}};
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  if (name == "diloco") return parseDiloco(text);
  for (const Form& form : kTable) {
    if (name != form.name) continue;
    SyncStrategy strategy{form.kind, std::max(form.defaultParameter, 0)};
    // Measured on emulated ResNet-50 (docs/performance.md): 4 beat 2, which beat 1.
    if (form.kind == K::kSharded) strategy.concurrent = 4;
    if (colon == std::string::npos) {
      if (form.defaultParameter == 0) {
        throw ConfigError(fmt::format("--sync {} needs a parameter ({}:N)", text, name),
                          {.hint = kForms});
      }
      return strategy;
    }
    if (form.kind == K::kSharded) {
      parseShardedOptions(text.substr(colon + 1), text, strategy);
      return strategy;
    }
    if (form.defaultParameter == -1) {
      throw ConfigError(fmt::format("--sync {} takes no parameter", name), {.hint = kForms});
    }
    strategy.parameter = parseCount(text.substr(colon + 1), text, form.minimum);
    return strategy;
  }
  throw ConfigError(fmt::format("unknown --sync '{}'", text), {.hint = kForms});
}

int64_t paperWarmup(SyncStrategy::Kind kind) {
  switch (kind) {
    case SyncStrategy::Kind::kOdsgd:
      return 200;
    case SyncStrategy::Kind::kSsdsgd:
      return 500;
    case SyncStrategy::Kind::kCdsgd:
      return 1000;
    default:
      return 0;
  }
}

std::optional<PsOptions> psOptionsFor(const SyncStrategy& strategy, const StrategyKnobs& knobs,
                                      int workers, double lr, double momentum) {
  using K = SyncStrategy::Kind;
  const bool servers = knobs.ps || knobs.servers > 0;
  if (knobs.servers < 0) throw ConfigError("--servers must be >= 0");
  const DelayCompensation compensation = DelayCompensation::parse(knobs.compensate);
  checkCompensationApplies(strategy, compensation);
  if (!strategy.needsServers() && strategy.kind != K::kSsgd) {
    if (servers) {
      throw ConfigError("--ps and --servers apply to ssgd, asgd, ssp, odsgd, ssdsgd and cdsgd",
                        {.hint = "sharded and localsgd run among the workers, without servers"});
    }
    return std::nullopt;
  }
  if (!strategy.needsServers() && !servers) return std::nullopt;
  if (knobs.warmup < -1) throw ConfigError("--delay-warmup must be >= 0");
  if (knobs.localLr < 0 || knobs.glu < 0 || knobs.threshold <= 0 || knobs.localMomentum >= 1) {
    throw ConfigError(
        "--local-lr and --glu must be >= 0, --local-momentum < 1, --cd-threshold > 0");
  }
  PsOptions options;
  options.placement = {.workers = workers,
                       .servers = knobs.servers > 0 ? knobs.servers : workers,
                       .colocated = knobs.servers == 0};
  options.server.momentum = momentum;
  options.server.spikeCompensation = compensation.spike;
  options.predictWeights = compensation.predict;
  if (strategy.kind == K::kAsgd) options.server.consistency = ServerOptions::Consistency::kAsync;
  if (strategy.kind == K::kSsp) {
    options.server.consistency = ServerOptions::Consistency::kStale;
    options.server.staleness = strategy.parameter;
  }
  static const PsOptions::Delay kDelays[] = {
      PsOptions::Delay::kOneStep, PsOptions::Delay::kSeveralSteps, PsOptions::Delay::kCompressed};
  if (strategy.delayed()) {
    options.delay = kDelays[static_cast<int>(strategy.kind) - static_cast<int>(K::kOdsgd)];
    options.delaySteps = std::max(strategy.parameter, 1);
    options.warmupSteps = knobs.warmup >= 0 ? knobs.warmup : paperWarmup(strategy.kind);
    options.localLr = knobs.localLr > 0 ? knobs.localLr : lr;
    options.localMomentum = knobs.localMomentum >= 0 ? knobs.localMomentum : momentum;
    options.glu = knobs.glu;
    options.threshold = static_cast<float>(knobs.threshold);
  }
  return options;
}

void checkCompressionApplies(const SyncStrategy& strategy, const CompressionConfig& compression,
                             const std::string& syncText) {
  const bool compressed = compression.spec != "none" || !compression.overrides.empty();
  if (compression.warmupCodec != "none" && strategy.kind == SyncStrategy::Kind::kLocalSgd) {
    throw ConfigError(fmt::format("--compress-warmup-codec does not apply to --sync {}", syncText),
                      {.hint = "it is for the ring's warm-up steps; localsgd and diloco average "
                               "models or pseudo-gradients with no such warm-up"});
  }
  if (!compressed && compression.warmupCodec != "none") {
    throw ConfigError(
        "--compress-warmup-codec codes the warm-up of what --compress compresses after it, and "
        "--compress is none",
        {.hint = "choose a compressor (--compress onebit), or drop --compress-warmup-codec"});
  }
  if (!compressed) return;
  if (strategy.kind == SyncStrategy::Kind::kLocalSgd) {
    // diloco compresses its pseudo-gradients (torch/api/outer_optimizer.h); localsgd averages
    // whole models, which no compressor is made for.
    if (!strategy.diloco) {
      throw ConfigError(fmt::format("--compress does not apply to --sync {}", syncText),
                        {.hint = "localsgd averages whole models; diloco:H,outer_lr=1,"
                                 "outer_momentum=0 is the same method on pseudo-gradients, "
                                 "which --compress applies to"});
    }
    if (strategy.outer.int8) {
      throw ConfigError(fmt::format("--compress does not combine with --sync {}", syncText),
                        {.hint = "quantize=int8 and --compress both encode the pseudo-gradients: "
                                 "choose one"});
    }
    if (!compression.overrides.empty()) {
      throw ConfigError(fmt::format("--compress-override does not apply to --sync {}", syncText),
                        {.hint = "diloco compresses every pseudo-gradient of at least "
                                 "--compress-min-elements with the one --compress method"});
    }
  }
  if (strategy.kind == SyncStrategy::Kind::kCdsgd) {
    throw ConfigError(fmt::format("--compress does not combine with --sync {}", syncText),
                      {.hint = "cdsgd pushes its own 2-bit codes; compress with odsgd or ssdsgd"});
  }
}

}  // namespace gradsync
