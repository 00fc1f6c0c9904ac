// gradsync simulate: predicts the step time of data-parallel training on a cluster we do not
// have (docs/simulator.md). It runs the real policies on simulated time: the schedule/ planner
// lays out and slices the gradients and its PriorityScheduler picks p3's order; the real
// compressors give each unit's bytes on the wire and how ranks combine them; the collectives'
// step structure (cluster.h) and parameter-server links give each transfer's time. Workers are
// assumed alike (same profile, same data size), so one representative worker's timeline is
// simulated, and every collective's cost follows from the cluster's topology. localsgd and diloco
// (local steps, then outer syncs) take a timeline of their own (sim/outer_rounds.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compress/policy.h"
#include "schedule/schedule.h"
#include "sim/cluster.h"
#include "sim/model_profile.h"
#include "sync/strategy.h"

namespace gradsync::sim {

// What compression costs per element of a compressed unit, on the communication thread:
// encoded once by the sender, decoded once per encoding a rank receives (P of them for the
// all-gathered methods, one for the others).
struct CodecCost {
  double encodeSeconds = 0;
  double decodeSeconds = 0;
};
// The cost of a spec (CompressSpec::toString(), e.g. "qsgd:16").
using CodecCostFn = std::function<CodecCost(const std::string& spec)>;

struct SimOptions {
  ModelProfile profile;
  ClusterSpec cluster;
  ScheduleSpec schedule;
  CompressionConfig compression;  // as `train --compress` (its warm-up is not simulated)
  std::string sync = "ssgd";      // as `train --sync`
  StrategyKnobs strategy;         // --ps, --servers (the other knobs do not change timing)
  // Null: codecs are free (an accelerator's kernels, which overlap). `gradsync simulate` and
  // `tune` measure each spec the run uses on this machine when the profile's codecs run on the
  // CPU (apps/gradsync/codec_costs.h).
  CodecCostFn codecCost;
  // Simulated steps. The first two (nothing to overlap yet) are not measured; strategies with a
  // period (localsgd:H, diloco:H, ssdsgd:K, cdsgd:K) measure whole periods after the first,
  // so they may run more.
  int steps = 8;
};

struct SimResult {
  std::string schedule;           // as simulated (p3's slice resolved from the link)
  double stepSeconds = 0;         // predicted, steady state
  double computeSeconds = 0;      // forward + backward (+ the optimizer when it is not in comm)
  double exposedCommSeconds = 0;  // step - compute: communication not hidden behind compute
  double commSeconds = 0;         // per step: the communication thread's busy time
  double bytesSentPerStep = 0;    // per worker
  // localsgd and diloco: the largest outer sync's bytes per worker (a fragment's, streaming).
  double largestSyncBytes = 0;
  double samplesPerSecond = 0;  // all workers together
  // Throughput over `workers` times one worker's without communication.
  double scalingEfficiency = 0;
  size_t units = 0;     // communication units per step (tensors, buckets or slices; outer: tensors)
  uint64_t events = 0;  // simulated events (the simulator's own cost)
  // The units in the order the last step sent them (outer rounds: the last sync's tensors).
  std::vector<size_t> lastStepOrder;
};

// Throws ConfigError for a combination `gradsync train` would refuse, or one not simulated.
SimResult simulate(const SimOptions& options);

}  // namespace gradsync::sim
