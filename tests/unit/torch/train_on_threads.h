// Runs training on rank threads of one process, the way the torch tests need it.
#pragma once

#include "support/transports.h"
#include "torch/trainer.h"

namespace gradsync::testing {

// Trains on `workers` rank threads; returns rank 0's result. Rethrows any rank's failure.
TrainResult train(int workers, TrainOptions options, TransportKind kind = TransportKind::kLoopback);

}  // namespace gradsync::testing
