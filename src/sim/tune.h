// gradsync tune: searches schedules, compressors and strategies in the simulator and ranks them
// by predicted time to accuracy = predicted step time x the method's measured convergence cost
// (sim/convergence_costs.h; docs/simulator.md). Blocking, single-threaded; no torch.
#pragma once

#include <string>
#include <vector>

#include "sim/convergence_costs.h"
#include "sim/simulator.h"

namespace gradsync::sim {

// A synchronisation strategy as `train` takes it: --sync plus --ps or --servers K.
struct SyncChoice {
  std::string sync = "ssgd";
  bool ps = false;
  int servers = 0;
  bool throughServers() const { return ps || servers > 0; }
  std::string label() const;  // "ssgd", "ssgd/ps", "ssgd/servers:2", "localsgd:4"
};

// What to search: every schedule x compressor x strategy.
struct TuneGrid {
  std::vector<std::string> schedules;
  std::vector<std::string> compressors;
  std::vector<SyncChoice> syncs;
};

// fifo, wfbp, fusion at 3 sizes, p3 on a log grid of slices x windows 1 and 2; the measured
// compressors and a few unmeasured densities; ssgd, sharded, ssgd through co-located servers,
// through `servers` separate ones when > 0, localsgd:4, and the DiLoCo family (localsgd:50; H of
// 10, 50 and 200; int8; 5 fragments with a delay of 1 and 9).
TuneGrid defaultTuneGrid(int servers);

struct TuneCandidate {
  std::string schedule;
  std::string compress;
  SyncChoice sync;
  double stepSeconds = 0;  // the simulator's prediction
  CandidateCost cost;      // kMeasured or kAtLeast
  // With hedged latencies (tune's `hedgeLatencies`): the largest time to accuracy over them and
  // the stated latency, each as a multiple of that latency's best measured candidate (1: the
  // best at every latency); 0 without.
  double worstRatio = 0;
  // stepSeconds x cost.factor: a time per dense step's worth of progress.
  double timeToAccuracy() const { return stepSeconds * cost.factor; }
};

// A compressor x strategy pair left out for its convergence cost (not simulated).
struct TuneExclusion {
  std::string compress;
  SyncChoice sync;
  CandidateCost cost;  // kDoesNotReach or kNotMeasured, with the reason
};

// A combination the simulator (with train's checks: sync_setup's checkCompressionApplies and
// Engine::validate) refuses: never ranked.
struct TuneRejection {
  std::string schedule, compress;
  SyncChoice sync;
  std::string error;
};

struct TuneResult {
  std::vector<TuneCandidate> ranked;  // by timeToAccuracy, ties by step time, then grid order
  std::vector<TuneExclusion> excluded;
  std::vector<TuneRejection> rejected;
  // The recommendation: among the candidates with a measured (not bounded) factor predicted
  // within 1% of the first of them (a tie), the one predicted fastest with every link at half its
  // rate; among those within 1% of that, dense if there is one, else the first ranked. With
  // hedged latencies, "within 1% of the first" is within 1% of the smallest worstRatio instead.
  // ranked.size() when no candidate has a measured factor.
  size_t topPick = 0;
  std::vector<double> hedgeLatencies;  // as given to tune()
};

// Simulates every valid candidate of `grid` with `base`'s profile, cluster and steps (its
// schedule, compression spec and sync are replaced per candidate). With `hedgeLatencies`
// (seconds per message between hosts; the latency within a host scaled alike), every candidate
// with a measured factor is simulated again at each, and the recommendation is the one whose
// worst ratio to the best is smallest: a pick that holds whatever the latency the user did not
// state. Throws ConfigError when no candidate is valid.
TuneResult tune(const SimOptions& base, const TuneGrid& grid,
                const std::vector<double>& hedgeLatencies = {});

// The `gradsync train` flags that run `candidate` on `workers` workers.
std::string trainFlags(const TuneCandidate& candidate, int workers);

}  // namespace gradsync::sim
