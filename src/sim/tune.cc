#include "sim/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "gradsync/error.h"
#include "sync/strategy.h"

namespace gradsync::sim {
namespace {

std::vector<std::string> defaultSchedules() {
  std::vector<std::string> schedules{"fifo", "wfbp", "fusion:4", "fusion:25", "fusion:64"};
  for (int slice : {40000, 160000, 640000, 2000000}) {
    for (int window : {1, 2})
      schedules.push_back(fmt::format("p3:slice={},window={}", slice, window));
  }
  return schedules;
}

// Every compressor of the convergence table (once, whatever the workloads it was measured on),
// and a few densities and ranks that were not measured (shown as excluded, with the reason,
// rather than silently left out).
std::vector<std::string> defaultCompressors() {
  std::vector<std::string> compressors;
  for (const ConvergenceCost& row : convergenceCosts()) {
    const bool listed =
        std::find(compressors.begin(), compressors.end(), row.method) != compressors.end();
    if (!row.method.starts_with("sync:") && !listed) compressors.push_back(row.method);
  }
  for (const char* unmeasured : {"topk:0.001", "mstopk:0.05", "dgc:0.001", "powersgd:16"})
    compressors.emplace_back(unmeasured);
  return compressors;
}

// localsgd and diloco (without group=host) send nothing per step: --schedule changes none of
// their syncs (sim/outer_rounds.h), so one schedule stands for all.
std::vector<std::string> schedulesFor(const SyncChoice& sync,
                                      const std::vector<std::string>& schedules) {
  const SyncStrategy strategy = SyncStrategy::parse(sync.sync);
  const bool outerRounds =
      strategy.kind == SyncStrategy::Kind::kLocalSgd && !strategy.outer.perHost;
  if (!outerRounds || schedules.empty()) return schedules;
  const bool wfbp = std::find(schedules.begin(), schedules.end(), "wfbp") != schedules.end();
  return {wfbp ? std::string("wfbp") : schedules.front()};
}

// Simulates one candidate; false (with the reason) when the combination cannot run.
bool simulateCandidate(const SimOptions& base, TuneCandidate& candidate, std::string& error) {
  SimOptions options = base;
  options.sync = candidate.sync.sync;
  options.strategy.ps = candidate.sync.ps;
  options.strategy.servers = candidate.sync.servers;
  options.compression.spec = candidate.compress;
  try {
    options.schedule = ScheduleSpec::parse(candidate.schedule);
    candidate.stepSeconds = simulate(options).stepSeconds;
    return true;
  } catch (const ConfigError& e) {
    error = e.what();
    return false;
  }
}

// The recommendation. Among the measured candidates predicted within kTie of the best (closer
// than the simulator's own error), the one that loses least when every link is half as fast as
// stated: the links are what the model knows least (measured steps exposed more communication
// than predicted on vgg11 and ResNet-50, docs/performance.md "gradsync tune against measured
// time to accuracy"), so a tie goes to the candidate with the most slack. Among those still tied
// then, dense (its factor is exact and it has no codec to pay for), else the first ranked.
constexpr double kTie = 0.01;

double slowLinkTimeToAccuracy(const SimOptions& base, const TuneCandidate& c) {
  SimOptions slow = base;
  slow.cluster.bandwidth /= 2;
  slow.cluster.localBandwidth /= 2;
  TuneCandidate copy = c;
  std::string error;
  if (!simulateCandidate(slow, copy, error)) throw Error("gradsync tune: " + error);
  return copy.timeToAccuracy();
}

// What the recommendation minimises: the time to accuracy, or with hedged latencies the worst
// ratio to the best over them.
double score(const TuneCandidate& c) {
  return c.worstRatio > 0 ? c.worstRatio : c.timeToAccuracy();
}

bool measured(const TuneCandidate& c) {
  return c.cost.status == Convergence::kMeasured;
}

size_t recommend(const std::vector<TuneCandidate>& ranked, const SimOptions& base) {
  double lowest = 0;
  for (const TuneCandidate& c : ranked) {
    if (measured(c) && (lowest == 0 || score(c) < lowest)) lowest = score(c);
  }
  if (lowest == 0) return ranked.size();
  std::vector<std::pair<size_t, double>> tied;  // rank, time to accuracy on the slow links
  for (size_t rank = 0; rank < ranked.size(); ++rank) {
    const TuneCandidate& c = ranked[rank];
    if (measured(c) && score(c) <= lowest * (1 + kTie))
      tied.emplace_back(rank, slowLinkTimeToAccuracy(base, c));
  }
  double fastest = tied.front().second;
  for (const auto& [rank, slow] : tied) fastest = std::min(fastest, slow);
  std::optional<size_t> first;
  for (const auto& [rank, slow] : tied) {
    if (slow > fastest * (1 + kTie)) continue;
    if (ranked[rank].compress == "none") return rank;
    if (!first) first = rank;
  }
  return *first;
}

// Sets every measured candidate's worstRatio over `latencies` and base's own latency.
void hedge(const SimOptions& base, const std::vector<double>& latencies,
           std::vector<TuneCandidate>& ranked) {
  auto bestOf = [](const std::vector<double>& times, const std::vector<TuneCandidate>& ranked) {
    double best = 0;
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (measured(ranked[i]) && (best == 0 || times[i] < best)) best = times[i];
    }
    return best;
  };
  std::vector<double> times(ranked.size());
  for (size_t i = 0; i < ranked.size(); ++i) times[i] = ranked[i].timeToAccuracy();
  const double bestHere = bestOf(times, ranked);
  for (size_t i = 0; i < ranked.size(); ++i) {
    if (measured(ranked[i])) ranked[i].worstRatio = times[i] / bestHere;
  }
  for (double latency : latencies) {
    SimOptions other = base;
    other.cluster.latency = latency;
    if (base.cluster.latency > 0) other.cluster.localLatency *= latency / base.cluster.latency;
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (!measured(ranked[i])) continue;
      TuneCandidate copy = ranked[i];
      std::string error;
      if (!simulateCandidate(other, copy, error)) throw Error("gradsync tune: " + error);
      times[i] = copy.timeToAccuracy();
    }
    const double best = bestOf(times, ranked);
    for (size_t i = 0; i < ranked.size(); ++i) {
      if (measured(ranked[i]))
        ranked[i].worstRatio = std::max(ranked[i].worstRatio, times[i] / best);
    }
  }
}

bool cheaper(const TuneCandidate& a, const TuneCandidate& b) {
  if (a.timeToAccuracy() != b.timeToAccuracy()) return a.timeToAccuracy() < b.timeToAccuracy();
  return a.stepSeconds < b.stepSeconds;
}

}  // namespace

std::string SyncChoice::label() const {
  if (servers > 0) return fmt::format("{}/servers:{}", sync, servers);
  return ps ? sync + "/ps" : sync;
}

TuneGrid defaultTuneGrid(int servers) {
  TuneGrid grid{defaultSchedules(), defaultCompressors(), {}};
  grid.syncs = {{"ssgd"}, {"sharded"}, {"ssgd", true, 0}};
  if (servers > 0) grid.syncs.push_back({"ssgd", false, servers});
  grid.syncs.push_back({"localsgd:4"});
  // The DiLoCo family (measured on the language model: H and fragments as candidates).
  for (const char* diloco :
       {"localsgd:50", "diloco:10", "diloco:50", "diloco:200", "diloco:50,quantize=int8",
        "diloco:50,fragments=5,delay=1", "diloco:50,fragments=5,delay=9"})
    grid.syncs.push_back({diloco});
  return grid;
}

TuneResult tune(const SimOptions& base, const TuneGrid& grid,
                const std::vector<double>& hedgeLatencies) {
  TuneResult result;
  result.hedgeLatencies = hedgeLatencies;
  const Workload workload = workloadOf(base.profile.name);
  for (const SyncChoice& sync : grid.syncs) {
    for (const std::string& compress : grid.compressors) {
      const CandidateCost cost =
          convergenceCostOf(compress, sync.sync, sync.throughServers(), workload);
      if (cost.status == Convergence::kDoesNotReach || cost.status == Convergence::kNotMeasured) {
        result.excluded.push_back({compress, sync, cost});
        continue;
      }
      for (const std::string& schedule : schedulesFor(sync, grid.schedules)) {
        TuneCandidate candidate{schedule, compress, sync, 0, cost};
        std::string error;
        if (simulateCandidate(base, candidate, error)) {
          result.ranked.push_back(std::move(candidate));
        } else {
          result.rejected.push_back({schedule, compress, sync, error});
        }
      }
    }
  }
  if (result.ranked.empty())
    throw ConfigError("gradsync tune: no valid candidate with a measured convergence cost");
  std::stable_sort(result.ranked.begin(), result.ranked.end(), cheaper);
  if (!hedgeLatencies.empty()) hedge(base, hedgeLatencies, result.ranked);
  result.topPick = recommend(result.ranked, base);
  return result;
}

std::string trainFlags(const TuneCandidate& candidate, int workers) {
  std::string flags = fmt::format("--workers {} --schedule {} --compress {} --sync {}", workers,
                                  candidate.schedule, candidate.compress, candidate.sync.sync);
  if (candidate.sync.ps) flags += " --ps";
  if (candidate.sync.servers > 0) flags += fmt::format(" --servers {}", candidate.sync.servers);
  return flags;
}

}  // namespace gradsync::sim
