// Training on ranks grouped into hosts takes the topology's paths: the trainer's views of the
// transport (the workers' prefix, each operation's byte counter) pass the topology through to
// the exchanges. Without it hitopk runs flat and dense allreduce never goes hierarchical, which
// gives the right numbers and the wrong traffic, so the test looks at the traffic: every byte
// sent, split by whether its peer shares the sender's host (train_on_threads.h).
#include <gtest/gtest.h>

#include <cstdio>

#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

// A few steps of the mlp on 2 hosts x 2 ranks (threads over loopback with the topology).
struct PerStep {
  double inside = 0, across = 0, dense = 0;  // bytes per rank and step; dense: a flat ring's
};

PerStep trainOnTwoHosts(const std::string& compress) {
  TrainOptions o = quickOptions();
  o.compression.spec = compress;
  HostTraffic traffic;
  TrainResult result = train(4, o, TransportKind::kLoopbackHosts, traffic);
  const double rankSteps = 4.0 * static_cast<double>(result.steps);
  PerStep s{static_cast<double>(traffic.inside) / rankSteps,
            static_cast<double>(traffic.across) / rankSteps, result.perStep.denseBytes};
  std::printf("%s: %.0f bytes/step inside hosts, %.0f across (a flat ring: %.0f)\n",
              compress.c_str(), s.inside, s.across, s.dense);
  return s;
}

// HiTopKComm reduces each unit densely inside the host (reduce-scatter and allgather over 2
// ranks: 2 x 1/2 x 4 bytes per element, 2/3 of a 4-rank ring's 2 x 3/4 x 4) and sends only the
// shards' lists of 1% across (about 0.03 bytes per element); run flat, it would send the lists
// alone, nothing dense inside a host.
TEST(TrainerOnHosts, HiTopKReducesInsideHostsAndSendsOnlyListsAcross) {
  const PerStep s = trainOnTwoHosts("hitopk:0.01");
  EXPECT_GE(s.inside, 0.6 * s.dense) << "hitopk ran flat";
  EXPECT_LE(s.across, 0.05 * s.dense);
}

// Dense allreduce on hosts: for units of this size, the cost model (collectives/hierarchical.cc,
// the transport's default links) picks the hierarchical algorithm. At 2 hosts x 2 ranks it sends
// as many bytes as a flat ring, but 1/3 of them across hosts (the inter-host allreduce of each
// rank's half) where the ring sends 1/2 (every other link of 0 -> 1 -> 2 -> 3 -> 0 crosses).
TEST(TrainerOnHosts, DenseGoesHierarchical) {
  const PerStep s = trainOnTwoHosts("none");
  EXPECT_LE(s.across, 0.4 * (s.inside + s.across)) << "a flat ring";
}

// diloco's group=host through the trainer (which synchronizes a host's gradients before its own
// optimizer step): every step's dense exchange stays inside the hosts, and only the outer steps,
// every H = 5, cross between them. Measured: 3.35 MB a step inside hosts and 335 KB across,
// against ssgd's 2.90 MB and 1.45 MB (its all-reduces hierarchical): 0.23 of its crossing bytes,
// the outer step's one hierarchical all-reduce every 5 steps and the final one.
TEST(TrainerOnHosts, DilocoAcrossHostsAveragesInsideEveryStepAndCrossesEveryH) {
  TrainOptions o = quickOptions();
  auto perStep = [&](const std::string& sync, double& inside, double& across) {
    o.sync = sync;
    HostTraffic traffic;
    TrainResult result = train(4, o, TransportKind::kLoopbackHosts, traffic);
    const double rankSteps = 4.0 * static_cast<double>(result.steps);
    inside = static_cast<double>(traffic.inside) / rankSteps;
    across = static_cast<double>(traffic.across) / rankSteps;
    std::printf("%s: %.0f bytes/step inside hosts, %.0f across\n", sync.c_str(), inside, across);
  };
  double inside = 0, across = 0, ssgdInside = 0, ssgdAcross = 0;
  perStep("diloco:5,group=host", inside, across);
  perStep("ssgd", ssgdInside, ssgdAcross);
  EXPECT_GE(inside, ssgdInside) << "the hosts' ranks did not average every step";
  EXPECT_LE(across, 0.3 * ssgdAcross);
  EXPECT_GE(across, 0.2 * ssgdAcross) << "fewer outer steps crossed than every 5 steps";
}

}  // namespace
}  // namespace gradsync::testing
