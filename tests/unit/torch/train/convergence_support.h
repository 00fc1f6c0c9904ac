// What the convergence suites (convergence_test.cc, convergence_hosts_test.cc; one binary) share:
// the seed every run takes, the machine-readable line scripts/convergence_spread.py collects, and
// the Bound rule each run is checked against.
#pragma once

#include <cstdint>
#include <string>

#include "torch/train/trainer.h"

namespace gradsync::testing {

// GRADSYNC_TEST_SEED (default 0) reseeds every run, initialisation and data order alike:
// scripts/convergence_spread.py measures the cases' spread over seeds and OpenBLAS kernel
// families with it. The bounds hold for seed 0 on any kernel family.
uint64_t testSeed();

// One machine-readable line per run, which scripts/convergence_spread.py collects.
void report(const std::string& name, double accuracy, double reference);

// The compression cases' run: one epoch of cnn at global batch 128 (kSteps), the first kWarmup
// steps (10%) dense, as the papers warm up.
constexpr int64_t kSteps = 468;
constexpr int64_t kWarmup = 47;

// What one run must reach, as accuracy fractions. docs/performance.md, "Convergence across
// machines and seeds", has the spread each bound rests on (seeds x OpenBLAS kernel families,
// scripts/convergence_spread.py, and the figures other machines gave) and the rule: a method
// meets its target when its mean gap over that spread is within it (misses are listed there);
// one run, on any machine and seed, must end within the target or within mean + 3 sd of the
// gap, whichever is wider (one-epoch runs scatter by about half a point), and above an absolute
// floor (mean - 3 sd of its accuracy), so a training that broke everywhere fails even when the
// relative check passes.
struct Bound {
  double maxGap;  // the most it may end below its reference
  double floor;   // the least accuracy it may end with
};

// Prints the run's figures (and its CONVERGENCE line) and checks them against `bound` (gtest
// expectations, so the caller goes on).
void expectConverged(const std::string& name, double accuracy, double reference, Bound bound);

}  // namespace gradsync::testing
