#include "sim/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "gradsync/error.h"

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

// Every compressor of the convergence table, and a few densities and ranks that were not
// measured (shown as excluded, with the reason, rather than silently left out).
std::vector<std::string> defaultCompressors() {
  std::vector<std::string> compressors;
  for (const ConvergenceCost& row : convergenceCosts()) {
    if (!row.method.starts_with("sync:")) compressors.push_back(row.method);
  }
  for (const char* unmeasured : {"topk:0.001", "mstopk:0.05", "dgc:0.001", "powersgd:16"})
    compressors.emplace_back(unmeasured);
  return compressors;
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

size_t recommend(const std::vector<TuneCandidate>& ranked, const SimOptions& base) {
  const auto measured = [](const TuneCandidate& c) {
    return c.cost.status == Convergence::kMeasured;
  };
  const auto best = std::find_if(ranked.begin(), ranked.end(), measured);
  if (best == ranked.end()) return ranked.size();
  std::vector<std::pair<size_t, double>> tied;  // rank, time to accuracy on the slow links
  for (auto c = best; c != ranked.end(); ++c) {
    if (c->timeToAccuracy() > best->timeToAccuracy() * (1 + kTie)) break;
    if (measured(*c))
      tied.emplace_back(static_cast<size_t>(c - ranked.begin()), slowLinkTimeToAccuracy(base, *c));
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
  return grid;
}

TuneResult tune(const SimOptions& base, const TuneGrid& grid) {
  TuneResult result;
  for (const SyncChoice& sync : grid.syncs) {
    for (const std::string& compress : grid.compressors) {
      const CandidateCost cost = convergenceCostOf(compress, sync.sync, sync.throughServers());
      if (cost.status == Convergence::kDoesNotReach || cost.status == Convergence::kNotMeasured) {
        result.excluded.push_back({compress, sync, cost});
        continue;
      }
      for (const std::string& schedule : grid.schedules) {
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
