#include "sim/outer_rounds.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/check.h"
#include "gradsync/collectives.h"
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

// The dense pseudo-gradients of a sync (localsgd: the models) in one all-reduce, laid out as the
// outer optimizer lays them out (sync/fragments.h): fp32 by the engine's automatic choice, or
// (quantize=int8) the int8 ring, a flat ring of int8 codes with a scale per chunk.
void addDenseAllreduce(const SimOptions& o, bool int8, const std::vector<int64_t>& elements,
                       SyncCost& cost) {
  const ClusterSpec& c = o.cluster;
  const FusedLayout layout =
      fusedLayout(elements, int8 ? static_cast<int64_t>(kInt8ChunkElements) : 1, c.workers);
  const auto n = static_cast<size_t>(layout.elements);
  if (n == 0) return;
  if (!int8) {
    cost.seconds += denseAllreduceSeconds(c, n, sizeof(float));
    cost.bytes += denseAllreduceBytes(c, n, sizeof(float));
    return;
  }
  const size_t wire = int8WireBytes(n);
  const double p = c.workers;
  cost.seconds += ringAllreduceSeconds(c, (wire + 3) / 4, 4);
  cost.bytes += 2 * (p - 1) / p * static_cast<double>(wire);
  if (o.codecCost) {
    const CodecCost codec = o.codecCost("int8");
    cost.seconds += (codec.encodeSeconds + codec.decodeSeconds) * static_cast<double>(n);
  }
}

// By fragment (one with fragments=1): its compressed tensors one by one, priced by the same unit
// costs as a step's (a wfbp layout is one unit per tensor), then its dense ones in one
// all-reduce; diloco's outer step on the training thread, priced as an optimizer pass over the
// fragment (localsgd's average needs none).
std::vector<SyncCost> fragmentCosts(const SimOptions& o, const SyncStrategy& strategy,
                                    const std::vector<TensorShape>& tensors) {
  const CompressionPlan plan = planCompression(o.compression, tensors, kAnyMomentum);
  const GradientLayout layout = planLayout(tensors, ScheduleSpec::parse("wfbp"), plan.groups());
  const std::vector<UnitCost> units = unitCosts(o.cluster, layout, tensors, plan, o.codecCost);
  const bool outerStep = strategy.diloco && !strategy.outer.averagesModels();
  std::vector<int64_t> elements;
  for (const TensorShape& t : tensors) elements.push_back(static_cast<int64_t>(t.elements));
  const std::vector<int> fragmentOf = assignFragments(elements, strategy.outer.fragments);
  std::vector<SyncCost> costs(static_cast<size_t>(strategy.outer.fragments));
  for (size_t f = 0; f < costs.size(); ++f) {
    SyncCost& cost = costs[f];
    std::vector<int64_t> dense;
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (fragmentOf[t] != static_cast<int>(f)) continue;
      cost.tensors.push_back(t);
      const UnitCost& unit = units[static_cast<size_t>(layout.unitOf[t])];
      GS_CHECK(layout.unitCount[t] == 1);
      dense.push_back(unit.compressed ? 0 : elements[t]);
      if (unit.compressed) {
        cost.seconds += unit.allreduceSeconds + unit.codecSeconds;
        cost.bytes += unit.bytesSent;
      }
      const double share = static_cast<double>(elements[t]) /
                           static_cast<double>(std::max<size_t>(layout.totalElements, 1));
      if (outerStep) cost.outerSeconds += o.profile.updateSeconds * share;
    }
    addDenseAllreduce(o, strategy.outer.int8, dense, cost);
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
  checkFragmentsFit(strategy.outer.fragments, tensors);
}

}  // namespace

SimResult simulateOuterRounds(const SimOptions& o) {
  const SyncStrategy strategy = SyncStrategy::parse(o.sync);
  GS_CHECK(strategy.kind == SyncStrategy::Kind::kLocalSgd);
  const std::vector<TensorShape> tensors = o.profile.tensors();
  validate(o, strategy, tensors.size());
  const std::vector<SyncCost> fragments = fragmentCosts(o, strategy, tensors);
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
