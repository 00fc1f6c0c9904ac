// How a worker uses the parameter servers for a strategy (ps/worker_client.h): the options,
// and what each step's pushes do. Shared by the worker client and the simulator (sim/), so both
// push and pull on the same steps.
#pragma once

#include <cstdint>

#include "ps/parameter_server.h"
#include "ps/protocol.h"

namespace gradsync {

struct PsOptions {
  enum class Delay { kNone, kOneStep, kSeveralSteps, kCompressed };  // -, odsgd, ssdsgd, cdsgd
  PsPlacement placement;
  ServerOptions server;  // consistency and momentum
  Delay delay = Delay::kNone;
  int delaySteps = 5;        // ssdsgd: pull every K steps; cdsgd: full precision every K steps
  int64_t warmupSteps = 0;   // plain ssgd steps before the delay starts
  double localLr = 0;        // the local step's learning rate
  double localMomentum = 0;  // the local step's momentum
  double glu = 0.5;          // ssdsgd: weight of the global direction
  float threshold = 0.5f;    // cdsgd: the 2-bit quantizer's threshold
  // asgd, ssp (`--compensate lwp`): the worker trains on weights predicted over each unit's
  // staleness (ps/weight_prediction.h), not on the replies as they are.
  bool predictWeights = false;
};

// What a unit's push of one step does: the same for every unit of the step.
struct PushPlan {
  bool delayed = false;    // after a delayed strategy's warm-up: a local step, no waiting
  bool quantized = false;  // cdsgd's 2-bit codes
  bool wantReply = false;  // a pull (every step but ssdsgd's between its pulls)
};
PushPlan planPush(const PsOptions& options, uint64_t step);

}  // namespace gradsync
