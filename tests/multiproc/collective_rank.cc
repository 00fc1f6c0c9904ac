// One rank of a multi-process test, started with the rendezvous environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, GRADSYNC_JOB_TOKEN). Modes:
//   verify [N]  run every collective at counts 0, 1, non-divisible and large (N elements, by
//               default 4 Mi); exit 3 on a wrong element
//   loop FILE [N]  allreduce N floats (1 Mi: the ring; 256: recursive doubling) forever,
//               touching FILE.<rank> after the first iteration (the kill test waits for it);
//               exits 1 with the error when a peer is lost
#include <cstdio>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "gradsync/collectives.h"
#include "gradsync/context.h"
#include "support/sanitized.h"

namespace gradsync {
namespace {

float input(int rank, size_t i) {
  return static_cast<float>(i % 97 + 101 * rank);
}

bool verifyCount(Transport& t, size_t count) {
  int n = t.size();
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = input(t.rank(), i);
  allreduce(t, data);
  for (size_t i = 0; i < count; ++i) {
    float sum = 0;
    for (int r = 0; r < n; ++r) sum += input(r, i);
    if (data[i] != sum) return false;
  }
  for (size_t i = 0; i < count; ++i) data[i] = input(t.rank(), i);
  reduceScatter(t, data);
  Block own = blockOf(count, n, t.rank());
  for (size_t i = own.begin; i < own.end; ++i) {
    float sum = 0;
    for (int r = 0; r < n; ++r) sum += input(r, i);
    if (data[i] != sum) return false;
  }
  std::vector<float> gathered(count, -1.0f);
  for (size_t i = own.begin; i < own.end; ++i) gathered[i] = input(t.rank(), i);
  allgather(t, gathered);
  for (int r = 0; r < n; ++r) {
    Block b = blockOf(count, n, r);
    for (size_t i = b.begin; i < b.end; ++i) {
      if (gathered[i] != input(r, i)) return false;
    }
  }
  std::vector<float> root(count);
  for (size_t i = 0; i < count; ++i) root[i] = t.rank() == n - 1 ? input(n - 1, i) : 0.0f;
  broadcast(t, root, n - 1);
  for (size_t i = 0; i < count; ++i) {
    if (root[i] != input(n - 1, i)) return false;
  }
  barrier(t);
  return true;
}

int verify(Transport& t, size_t large) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{1003}, large}) {
    if (!verifyCount(t, count)) {
      std::fprintf(stderr, "rank %d: wrong result at count %zu\n", t.rank(), count);
      return 3;
    }
  }
  return 0;
}

int loop(Transport& t, const std::string& marker, size_t count) {
  std::vector<float> data(count, 1.0f);
  for (long iteration = 0;; ++iteration) {
    allreduce(t, data, ReduceOp::kAverage);
    if (iteration == 0) std::ofstream(marker + "." + std::to_string(t.rank())) << "ready\n";
  }
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  using namespace gradsync;
  std::string mode = argc > 1 ? argv[1] : "verify";
  try {
    Context context = init();
    if (mode == "loop") {
      return loop(context.transport(), argc > 2 ? argv[2] : "/tmp/gs-ready",
                  argc > 3 ? std::stoul(argv[3]) : size_t{1} << 20);
    }
    // Large: 4 Mi elements; 64 Ki under a sanitizer (tests/support/sanitized.h).
    const size_t large =
        argc > 2 ? std::stoul(argv[2]) : testing::sanitizedSize((1 << 22) + 3, (1 << 16) + 3);
    return verify(context.transport(), large);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_rank: %s\n", e.what());
    return 1;
  }
}
