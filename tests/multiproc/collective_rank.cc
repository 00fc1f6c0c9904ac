// One rank of a multi-process test, started with the rendezvous environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, GRADSYNC_JOB_TOKEN). Modes:
//   verify [N]  run every collective at counts 0, 1, non-divisible and large (N elements, by
//               default 4 Mi); exit 3 on a wrong element
//   loop FILE [N]  allreduce N floats (1 Mi: the ring; 256: recursive doubling) forever,
//               touching FILE.<rank> after the first iteration (the kill test waits for it);
//               exits 1 with the error, and "the failure began at rank R" (failureOrigin),
//               when a peer is lost
//   shrink FILE  allreduces as loop does until a peer is lost, then shrinks to the survivors
//               (gradsync::shrink) and writes "shrunk: rank R of S, sum X" (X: the survivors'
//               old ranks + 1, summed by an allreduce of the new group); exits 0
//   chaos FILE SEED  a random sequence of collectives (every kind and allreduce algorithm, sizes
//               0 to 1 Mi), the same on every rank (seeded alike), forever; FILE as for loop
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "gradsync/collectives.h"
#include "gradsync/context.h"
#include "gradsync/error.h"
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

void touch(const std::string& marker, int rank) {
  std::ofstream(marker + "." + std::to_string(rank)) << "ready\n";
}

int loop(Transport& t, const std::string& marker, size_t count) {
  std::vector<float> data(count, 1.0f);
  for (long iteration = 0;; ++iteration) {
    allreduce(t, data, ReduceOp::kAverage);
    if (iteration == 0) touch(marker, t.rank());
  }
}

int shrinkAfterLoss(Context& context, const std::string& marker) {
  const int oldRank = context.rank();
  try {
    loop(context.transport(), marker, 1 << 16);
  } catch (const PeerLostError& e) {
    std::fprintf(stderr, "collective_rank: %s\n", e.what());
  }
  context = shrink(std::move(context));
  std::vector<float> sum{static_cast<float>(oldRank + 1)};
  allreduce(context.transport(), sum);
  std::fprintf(stderr, "shrunk: rank %d of %d, sum %g\n", context.rank(), context.size(), sum[0]);
  barrier(context.transport());  // rank 0 serves the store: it leaves last
  return 0;
}

// One collective picked by `random` (which every rank draws from alike): the kill may land in
// any of them, at any point of its messages.
void randomCollective(Transport& t, std::mt19937_64& random) {
  const size_t sizes[] = {0, 1, 1003, 65537, size_t{1} << 20};
  const size_t count = sizes[random() % std::size(sizes)];
  std::vector<float> data(count, 1.0f);
  CollectiveOptions options;
  switch (random() % 9) {
    case 0:
      options.algorithm = AllreduceAlgorithm::kRing;
      return allreduce(t, data, ReduceOp::kSum, options);
    case 1:
      options.algorithm = AllreduceAlgorithm::kRecursiveDoubling;
      return allreduce(t, data, ReduceOp::kSum, options);
    case 2:
      return allreduce(t, data, ReduceOp::kAverage);  // kAuto: hierarchical across mixed links
    case 3:
      return allreduceInt8(t, data);
    case 4:
      return reduceScatter(t, data);
    case 5:  // the ring or Bruck's, forced: kAuto would take one per transport and size
      options.algorithm =
          random() % 2 ? AllreduceAlgorithm::kRing : AllreduceAlgorithm::kRecursiveDoubling;
      return allgather(t, data, options);
    case 6: {
      std::vector<float> send(count / t.size() * t.size(), 1.0f), recv(send.size());
      return alltoall(t, send, recv);
    }
    case 7:
      options.algorithm = AllreduceAlgorithm::kHalvingDoubling;
      return allreduce(t, data, ReduceOp::kSum, options);
    default:
      broadcast(t, data, static_cast<int>(random() % t.size()));
      return barrier(t);
  }
}

int chaos(Transport& t, const std::string& marker, uint64_t seed) {
  std::mt19937_64 random(seed);
  for (long iteration = 0;; ++iteration) {
    randomCollective(t, random);
    if (iteration == 0) touch(marker, t.rank());
  }
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  using namespace gradsync;
  std::string mode = argc > 1 ? argv[1] : "verify";
  try {
    Context context = init();
    if (mode == "shrink") return shrinkAfterLoss(context, argv[2]);
    if (mode == "chaos") {
      return chaos(context.transport(), argv[2], std::stoull(argv[3]));
    }
    if (mode == "loop") {
      return loop(context.transport(), argc > 2 ? argv[2] : "/tmp/gs-ready",
                  argc > 3 ? std::stoul(argv[3]) : size_t{1} << 20);
    }
    // Large: 4 Mi elements; 64 Ki under a sanitizer (tests/support/sanitized.h).
    const size_t large =
        argc > 2 ? std::stoul(argv[2]) : testing::sanitizedSize((1 << 22) + 3, (1 << 16) + 3);
    return verify(context.transport(), large);
  } catch (const Error& e) {
    std::fprintf(stderr, "collective_rank: %s\ncollective_rank: the failure began at rank %d\n",
                 e.what(), failureOrigin(e));
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_rank: %s\n", e.what());
    return 1;
  }
}
