// Shi et al.'s HiTopKComm (hitopk:0.01, error feedback on) trains the cnn on the real
// Fashion-MNIST for one epoch on 4 rank threads as 2 hosts x 2 ranks (loopback with the topology
// attached, support/transports.h's kLoopbackHosts) and ends close to dense SSGD on the same
// hosts: the same global batch (128), seed, data and 10% dense warm-up as the 2-worker
// compression cases (convergence_test.cc). Issue 21 asks for 1.0 point: the mean gap over 11
// runs is 0.72 (sd 0.66; docs/performance.md, "hitopk on 2 hosts x 2 ranks"), and the bounds
// follow the Bound rule (convergence_support.h) over that spread. make test-long runs it (the two
// runs take 80-170 s here); torch_test's TrainerOnHosts checks the path on every make test.
//
// Before the accuracy, the run shows it took the hierarchical path: every byte sent is counted as
// inside a host or across hosts (train_on_threads.h's HostTraffic). HiTopKComm moves its
// compressed units densely inside a host (reduce-scatter, allgather: 2/3 of a flat 4-rank ring's
// bytes) and only the shards' lists across; a run that silently went flat (every rank its own
// host: one sparse allgather among all) would send almost nothing inside hosts.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "convergence_support.h"
#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

constexpr int kRanks = 4;  // 2 hosts x 2 ranks (kLoopbackHosts: 2 ranks per host)

struct HostsRun {
  TrainResult rank0;
  double insideMBPerStep = 0, acrossMBPerStep = 0;  // per rank, averaged over ranks and steps
};

HostsRun trainOnTwoHosts(const std::string& compress) {
  TrainOptions o;
  o.model = "cnn";
  o.steps = kSteps;
  o.batchSize = 128 / kRanks;  // the 2-worker cases' global batch
  o.quiet = true;
  o.compression.spec = compress;
  o.compression.warmupSteps = kWarmup;
  o.seed = testSeed();
  HostTraffic traffic;
  HostsRun run{train(kRanks, o, TransportKind::kLoopbackHosts, traffic)};
  const double perRankStep = 1e6 * kRanks * static_cast<double>(run.rank0.steps);
  run.insideMBPerStep = static_cast<double>(traffic.inside) / perRankStep;
  run.acrossMBPerStep = static_cast<double>(traffic.across) / perRankStep;
  std::printf("%-14s 2 hosts x 2 ranks: %.3f MB/step inside hosts, %.3f MB/step across\n",
              compress.c_str(), run.insideMBPerStep, run.acrossMBPerStep);
  return run;
}

// Dense SSGD on the same hosts (allreduce, hierarchical where its cost model prefers it), the
// reference; computed once.
const HostsRun& denseOnTwoHosts() {
  static const HostsRun run = [] {
    HostsRun dense = trainOnTwoHosts("none");
    report("none/2x2", dense.rank0.finalTestAccuracy, dense.rank0.finalTestAccuracy);
    return dense;
  }();
  return run;
}

// The bounds: the Bound rule over 11 runs (seeds 0-9, seed 0 also under Haswell's kernels), as
// scripts/convergence_spread.py computes it (docs/performance.md, "hitopk on 2 hosts x 2 ranks").
constexpr double kDenseOnHostsFloor = 0.854;

TEST(ConvergenceHostsReference, DenseOnTwoHostsReachesItsFloor) {
  EXPECT_GE(denseOnTwoHosts().rank0.finalTestAccuracy, kDenseOnHostsFloor);
}

TEST(ConvergenceHosts, HiTopKEndsCloseToDenseOnTwoHosts) {
  const HostsRun& dense = denseOnTwoHosts();
  const HostsRun hitopk = trainOnTwoHosts("hitopk:0.01");
  // First the hierarchical path (torch_test's TrainerOnHosts checks it on the mlp in seconds):
  // the warm-up's hierarchical allreduce and then HiTopKComm's reduce-scatter and allgather
  // inside hosts each send 2/3 of a flat 4-rank ring's bytes inside hosts; run flat, hitopk would
  // send only its lists there (measured before the trainer passed the topology on: 0.066 of the
  // ring's). Across hosts: at most the warm-up's dense traffic, then lists of 1% (about 0.5% of
  // the ring's bytes).
  const double ringMB = hitopk.rank0.perStep.denseBytes / 1e6;
  ASSERT_GE(hitopk.insideMBPerStep, 0.6 * ringMB) << "hitopk ran flat";
  ASSERT_LE(hitopk.acrossMBPerStep, (static_cast<double>(kWarmup) / kSteps + 0.02) * ringMB);
  for (const GuardEvent& e : hitopk.rank0.guard) std::printf("  %s\n", e.reason.c_str());
  expectConverged("hitopk:0.01/2x2", hitopk.rank0.finalTestAccuracy, dense.rank0.finalTestAccuracy,
                  Bound{0.027, 0.846});
  EXPECT_TRUE(hitopk.rank0.guard.empty()) << "the guard acted";
}

}  // namespace
}  // namespace gradsync::testing
