// What `gradsync simulate` and `gradsync tune` charge for compression (sim::SimOptions::
// codecCost): --codec-ns-per-element when given (encode + decode per element, whatever the
// method); else, when the profile's codecs run on the CPU (a `gradsync profile` of CPU
// training), each spec measured on this machine the first time a run uses it (bench
// compress's exchange on a world of one, 1M elements: a few milliseconds per spec); else
// nothing (an accelerator's codec kernels overlap).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "sim/model_profile.h"
#include "sim/simulator.h"
#include "sim_flags.h"

namespace gradsync {

struct CodecCostSource {
  sim::CodecCostFn cost;  // for SimOptions::codecCost; shares the measurements (single thread)
  // Where the costs came from, and each measured spec's, for the run's output.
  std::string describe() const;

  std::string origin;  // "--codec-ns-per-element 2", "measured here (...)" or "free (...)"
  std::shared_ptr<std::map<std::string, sim::CodecCost>> measured;
};

// Throws ConfigError for a malformed --codec-ns-per-element.
CodecCostSource codecCostSource(const SimModelFlags& flags, const ModelProfile& profile);

}  // namespace gradsync
