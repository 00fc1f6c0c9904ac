#include "sim/outer_rounds.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.h"
#include "gradsync/error.h"
#include "sim/unit_costs.h"
#include "sync/fragments.h"
#include "sync/strategy.h"

namespace gradsync::sim {
namespace {

// One outer sync of a fragment (or of the whole model), per worker.
struct SyncCost {
  double seconds = 0;       // the all-reduces (and codecs) on the communication side
  double bytes = 0;         // sent by one worker
  double outerSeconds = 0;  // the outer step's share on the training thread
  std::vector<size_t> tensors;
};

// What the pseudo-gradients travel as: the int8 ring for every tensor (quantize=int8, as
// allreduceInt8 takes every tensor whatever its size), else `--compress` (dense by default).
CompressionConfig pseudoGradientCompression(const SyncStrategy& strategy,
                                            const CompressionConfig& compression) {
  if (!strategy.outer.int8) return compression;
  CompressionConfig int8;
  int8.spec = "int8";
  int8.minElements = 0;
  return int8;
}

// By tensor: its all-reduce as the outer optimizer runs it (one per tensor), priced by the same
// unit costs as a step's (a wfbp layout is one unit per tensor).
std::vector<SyncCost> tensorCosts(const SimOptions& o, const SyncStrategy& strategy,
                                  const std::vector<TensorShape>& tensors) {
  const CompressionPlan plan =
      planCompression(pseudoGradientCompression(strategy, o.compression), tensors, kAnyMomentum);
  const GradientLayout layout = planLayout(tensors, ScheduleSpec::parse("wfbp"), plan.groups());
  const std::vector<UnitCost> units = unitCosts(o.cluster, layout, tensors, plan, o.codecCost);
  // localsgd's average needs no outer step; diloco's is an optimizer-like pass over the tensor.
  const bool outerStep = strategy.diloco && !strategy.outer.averagesModels();
  std::vector<SyncCost> costs(tensors.size());
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto u = static_cast<size_t>(layout.unitOf[t]);
    GS_CHECK(layout.unitCount[t] == 1 && layout.units[u].tensors.size() == 1);
    const double share = static_cast<double>(layout.units[u].elements) /
                         static_cast<double>(std::max<size_t>(layout.totalElements, 1));
    costs[t] = {units[u].allreduceSeconds + units[u].codecSeconds,
                units[u].bytesSent,
                outerStep ? o.profile.updateSeconds * share : 0,
                {t}};
  }
  return costs;
}

// By fragment (one with fragments=1): its tensors' syncs one after the other.
std::vector<SyncCost> fragmentCosts(const std::vector<SyncCost>& byTensor,
                                    const std::vector<TensorShape>& tensors, int fragments) {
  std::vector<int64_t> elements;
  for (const TensorShape& t : tensors) elements.push_back(static_cast<int64_t>(t.elements));
  const std::vector<int> fragmentOf = assignFragments(elements, fragments);
  std::vector<SyncCost> costs(static_cast<size_t>(fragments));
  for (size_t t = 0; t < tensors.size(); ++t) {
    SyncCost& c = costs[static_cast<size_t>(fragmentOf[t])];
    c.seconds += byTensor[t].seconds;
    c.bytes += byTensor[t].bytes;
    c.outerSeconds += byTensor[t].outerSeconds;
    c.tensors.push_back(t);
  }
  return costs;
}

// One local step: compute alone, or (group=host) a data-parallel ssgd step among the devices
// of one host, as the simulator predicts it.
struct LocalStep {
  double seconds = 0;
  double bytes = 0;  // sent by one worker inside its host
  std::string schedule = "wfbp";
};

LocalStep localStep(const SimOptions& o, const SyncStrategy& strategy) {
  const ModelProfile& p = o.profile;
  const int perHost = std::min(o.cluster.gpusPerHost, o.cluster.workers);
  if (!strategy.outer.perHost || perHost == 1)
    return {p.forwardSeconds() + p.backwardSeconds() + p.updateSeconds, 0};
  SimOptions host = o;
  host.cluster.workers = perHost;
  host.sync = "ssgd";
  host.strategy = {};
  host.compression = {};  // the inner steps are dense (train's innerOptionsOf)
  host.codecCost = nullptr;
  const SimResult r = simulate(host);
  return {r.stepSeconds, r.bytesSentPerStep, r.schedule};
}

struct Sync {  // one launched on the timeline
  double start = 0, seconds = 0, bytes = 0;
  int fragment = 0;
};

struct Timeline {
  std::vector<double> stepStart;  // steps 0 .. lastStep (the last: when step lastStep would begin)
  std::vector<Sync> syncs;
};

// The outer optimizer's afterLocalStep on simulated time: after each local step, a merge that is
// due waits for its all-reduce and runs the outer step; then the fragment whose turn it is
// launches, and without a delay is merged at once.
Timeline runRounds(double local, const std::vector<SyncCost>& fragments, const SyncStrategy& s,
                   int lastStep) {
  Timeline timeline;
  double now = 0;
  struct {
    int fragment = -1;
    int64_t mergeAt = 0;
    double arrives = 0;
  } inFlight;
  for (int step = 1; step <= lastStep; ++step) {
    timeline.stepStart.push_back(now);
    now += local;
    if (inFlight.fragment >= 0 && step >= inFlight.mergeAt) {
      now = std::max(now, inFlight.arrives) + fragments[inFlight.fragment].outerSeconds;
      inFlight.fragment = -1;
    }
    const int f = fragmentSyncedAfter(step, s.parameter, s.outer.fragments);
    if (f < 0) continue;
    const SyncCost& cost = fragments[static_cast<size_t>(f)];
    timeline.syncs.push_back({now, cost.seconds, cost.bytes, f});
    if (s.outer.delay == 0) {
      now += cost.seconds + cost.outerSeconds;
    } else {
      inFlight = {f, step + s.outer.delay, now + cost.seconds};
    }
  }
  timeline.stepStart.push_back(now);
  return timeline;
}

void validate(const SimOptions& o, const SyncStrategy& strategy, size_t tensors) {
  o.cluster.validate();
  if (o.steps < 3) throw ConfigError(fmt::format("--steps must be at least 3, not {}", o.steps));
  checkCompressionApplies(strategy, o.compression, o.sync);
  psOptionsFor(strategy, o.strategy, o.cluster.workers, kAnyLr, kAnyMomentum);  // refuses servers
  if (tensors < static_cast<size_t>(strategy.outer.fragments)) {
    throw ConfigError(fmt::format("diloco's fragments={}: the model has only {} parameter tensors",
                                  strategy.outer.fragments, tensors),
                      {.hint = "choose at most as many fragments as tensors"});
  }
}

}  // namespace

SimResult simulateOuterRounds(const SimOptions& o) {
  const SyncStrategy strategy = SyncStrategy::parse(o.sync);
  GS_CHECK(strategy.kind == SyncStrategy::Kind::kLocalSgd);
  const std::vector<TensorShape> tensors = o.profile.tensors();
  validate(o, strategy, tensors.size());
  const std::vector<SyncCost> fragments =
      fragmentCosts(tensorCosts(o, strategy, tensors), tensors, strategy.outer.fragments);
  const LocalStep local = localStep(o, strategy);
  // Whole periods after the first (which has no delayed merge to wait for) are measured.
  const int period = strategy.parameter;
  const int from = period;
  const int lastStep = from + period * std::max(1, (o.steps - from) / period);
  const Timeline timeline = runRounds(local.seconds, fragments, strategy, lastStep);

  SimResult r;
  r.schedule = local.schedule;
  const double start = timeline.stepStart[from], end = timeline.stepStart[lastStep];
  const double steps = lastStep - from;
  r.stepSeconds = (end - start) / steps;
  r.bytesSentPerStep = local.bytes;
  for (const Sync& sync : timeline.syncs) {
    if (sync.start < start || sync.start >= end) continue;
    r.commSeconds += sync.seconds / steps;
    r.bytesSentPerStep += sync.bytes / steps;
    r.lastStepOrder = fragments[static_cast<size_t>(sync.fragment)].tensors;
  }
  for (const SyncCost& f : fragments) r.largestSyncBytes = std::max(r.largestSyncBytes, f.bytes);
  const ModelProfile& p = o.profile;
  r.computeSeconds = p.forwardSeconds() + p.backwardSeconds() + p.updateSeconds;
  r.exposedCommSeconds = std::max(0.0, r.stepSeconds - r.computeSeconds);
  r.samplesPerSecond = static_cast<double>(o.cluster.workers * p.batchSize) / r.stepSeconds;
  r.units = tensors.size();
  r.events = timeline.stepStart.size() + timeline.syncs.size();
  return r;
}

}  // namespace gradsync::sim
