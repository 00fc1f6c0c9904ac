// Example 1: averaging a vector across the processes of a job, over TCP on this machine.
//
//   ./01_allreduce                          one process: a job of one
//   gradsync launch -n 3 -- ./01_allreduce  three processes (or torchrun, or mpirun)
//
// Every rank contributes rank + 1 in each element; the average is (size + 1) / 2 everywhere.
#include <gradsync/collectives.h>
#include <gradsync/context.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

int main() try {
  gradsync::Context context = gradsync::init();  // rank, size and the job from the environment
  std::vector<float> values(1'000'003, static_cast<float>(context.rank() + 1));
  gradsync::allreduce(context.transport(), values, gradsync::ReduceOp::kAverage);

  const float expected = (context.size() + 1) / 2.0f;
  for (float v : values) {
    if (std::fabs(v - expected) > 1e-6f * expected) {
      std::fprintf(stderr, "rank %d: got %g, expected %g\n", context.rank(), v, expected);
      return 1;
    }
  }
  std::printf("rank %d of %d (local %d of %d): average %g over %zu elements\n", context.rank(),
              context.size(), context.localRank(), context.localSize(), values[0], values.size());
  gradsync::barrier(context.transport());  // rank 0 serves the store: everyone finishes first
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "01_allreduce: %s\n", e.what());
  return 1;
}
