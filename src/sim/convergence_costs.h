// Convergence cost per method: how many more steps than dense ring SSGD a method needs to reach
// dense's accuracy, from gradsync's own convergence runs (docs/performance.md), kept as data with
// its provenance (docs/simulator.md, "Convergence costs"). `gradsync tune` multiplies a
// candidate's predicted step time by it. No factor is invented: a method without a measurement
// says so, and a method whose runs ended more than 1.5 points below dense without reaching
// dense's accuracy is marked as not reaching it.
#pragma once

#include <string>
#include <vector>

namespace gradsync::sim {

enum class Convergence {
  kMeasured,      // factor = steps to dense's accuracy / dense's steps (>= 1)
  kAtLeast,       // not reached within the measured run: factor = run's steps / dense's (a bound)
  kDoesNotReach,  // ended > 1.5 points below dense and never reached its accuracy
  kNotMeasured,   // no steps-to-accuracy measurement: no factor
};

const char* toString(Convergence status);

// What a row was measured on: the vision workload (cnn on Fashion-MNIST: steps to 85% test
// accuracy), the language model (gpt on fortunes: steps to data-parallel AdamW's final held-out
// loss), or any workload (dense itself, and strategies that apply dense's very update).
enum class Workload { kAny, kVision, kLanguage };
const char* toString(Workload workload);
// A profile's workload by its name: kLanguage for the language-model profiles
// (scripts/lm_profile.py: "gpt...", "llama..."), kVision for every other.
Workload workloadOf(const std::string& profileName);

// One row of the table: a method exactly as `train --compress` or `train --sync` spells it.
struct ConvergenceCost {
  std::string method;  // "mstopk:0.01", "sync:localsgd:4"
  Convergence status = Convergence::kNotMeasured;
  double factor = 0;       // for kMeasured and kAtLeast; 0 otherwise
  std::string derivation;  // how the factor follows from the measurements
  std::string source;      // docs/performance.md section, command and date
  Workload workload = Workload::kVision;
};

// The whole table (compressors first, then "sync:" strategies), immutable. Thread-safe.
const std::vector<ConvergenceCost>& convergenceCosts();

// The cost of training with compressor `compress` under strategy `sync` ("ssgd", "sharded",
// "localsgd:4", "diloco:50", ...; `servers`: through parameter servers, co-located or not) on
// `workload`. Schedules do not change the update (docs/simulator.md), so they have no cost of
// their own. A compressor's factor was measured under ring SSGD only; under any other strategy
// it is kNotMeasured, as is a row measured on another workload only.
struct CandidateCost {
  Convergence status = Convergence::kNotMeasured;
  double factor = 0;
  std::string reason;  // why there is no factor, or which rows it came from
};
CandidateCost convergenceCostOf(const std::string& compress, const std::string& sync, bool servers,
                                Workload workload = Workload::kVision);

}  // namespace gradsync::sim
