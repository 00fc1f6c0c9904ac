#include "train_on_threads.h"

#include <mutex>

namespace gradsync::testing {

TrainResult train(int workers, TrainOptions options, TransportKind kind) {
  TrainResult rank0;
  std::mutex mutex;
  runWithTransports(kind, workers, [&](Transport& t) {
    TrainResult result = runTraining(t, options);
    if (t.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      rank0 = std::move(result);
    }
  });
  return rank0;
}

}  // namespace gradsync::testing
