#include "bench_collectives.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/topology.h"

namespace gradsync {
namespace {

// Inputs unique per rank and index, small integers so that every sum is exact in float.
float input(int rank, size_t i) {
  return static_cast<float>(i % 97 + 101 * rank);
}

// One collective under test: how to fill the buffer, run it, check it, and its bus factor
// (the ratio of bytes a rank's link must carry to the buffer size; nccl-tests' definition).
struct Collective {
  double (*busFactor)(int n);
  void (*init)(std::span<float> data, int rank, int n);
  void (*run)(Transport& t, std::span<float> data, const CollectiveOptions& o);
  float (*expected)(size_t i, size_t count, int n);
};

const Collective kAllreduce{[](int n) { return 2.0 * (n - 1) / n; },
                            [](std::span<float> d, int rank, int) {
                              for (size_t i = 0; i < d.size(); ++i) d[i] = input(rank, i);
                            },
                            [](Transport& t, std::span<float> d, const CollectiveOptions& o) {
                              allreduce(t, d, ReduceOp::kSum, o);
                            },
                            [](size_t i, size_t, int n) {
                              float sum = 0;
                              for (int r = 0; r < n; ++r) sum += input(r, i);
                              return sum;
                            }};

int ownerOf(size_t i, size_t count, int n) {
  int owner = static_cast<int>(static_cast<unsigned __int128>(i) * n / std::max<size_t>(count, 1));
  while (blockOf(count, n, owner).end <= i) ++owner;
  while (blockOf(count, n, owner).begin > i) --owner;
  return owner;
}

const Collective kAllgather{
    [](int n) { return static_cast<double>(n - 1) / n; },
    [](std::span<float> d, int rank, int n) {
      std::fill(d.begin(), d.end(), -1.0f);
      Block own = blockOf(d.size(), n, rank);
      for (size_t i = own.begin; i < own.end; ++i) d[i] = input(rank, i);
    },
    [](Transport& t, std::span<float> d, const CollectiveOptions& o) { allgather(t, d, o); },
    [](size_t i, size_t count, int n) { return input(ownerOf(i, count, n), i); }};

const Collective kBroadcast{
    [](int) { return 1.0; },
    [](std::span<float> d, int rank, int) {
      for (size_t i = 0; i < d.size(); ++i) d[i] = rank == 0 ? input(0, i) : 0.0f;
    },
    [](Transport& t, std::span<float> d, const CollectiveOptions& o) { broadcast(t, d, 0, o); },
    [](size_t i, size_t, int) { return input(0, i); }};

const Collective& collectiveNamed(const std::string& name) {
  if (name == "allreduce") return kAllreduce;
  if (name == "allgather") return kAllgather;
  if (name == "broadcast") return kBroadcast;
  throw ConfigError(fmt::format("unknown collective '{}'", name),
                    {.hint = "choose allreduce, allgather or broadcast"});
}

struct Row {
  uint64_t bytes;
  size_t count;
  double seconds;  // mean per iteration, slowest rank
  uint64_t wrong;
  double cpuSeconds;  // per iteration, every rank's process together (user + system)
};

// CPU time (user + system) of this whole process so far: every thread, the transport's included.
double processCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// The CPU seconds of the job's processes per iteration, from each rank's `cpuSeconds` over its
// timed iterations: summed over processes; ranks that are threads of one process (loopback) all
// measured that process, so it counts once (its largest measurement).
double jobCpuSeconds(Transport& t, double cpuSeconds) {
  std::vector<float> pids(t.size(), 0.0f);
  std::vector<float> cpu(t.size(), 0.0f);
  pids[t.rank()] = static_cast<float>(::getpid());
  cpu[t.rank()] = static_cast<float>(cpuSeconds);
  allgather(t, pids, {.tag = 4});
  allgather(t, cpu, {.tag = 5});
  std::vector<std::pair<float, float>> byProcess;
  for (int r = 0; r < t.size(); ++r) {
    auto same = std::find_if(byProcess.begin(), byProcess.end(),
                             [&](const auto& p) { return p.first == pids[r]; });
    if (same == byProcess.end()) {
      byProcess.emplace_back(pids[r], cpu[r]);
    } else {
      same->second = std::max(same->second, cpu[r]);
    }
  }
  double total = 0;
  for (const auto& p : byProcess) total += p.second;
  return total;
}

AllreduceAlgorithm algorithmNamed(const std::string& name) {
  if (name == "ring") return AllreduceAlgorithm::kRing;
  if (name == "hierarchical") return AllreduceAlgorithm::kHierarchical;
  if (name == "doubling") return AllreduceAlgorithm::kRecursiveDoubling;
  if (name == "halving") return AllreduceAlgorithm::kHalvingDoubling;
  return AllreduceAlgorithm::kAuto;
}

// "tcp, 2 hosts x 2 ranks" where the transport knows its hosts.
std::string describeTransport(const Transport& t, const BenchOptions& options) {
  const Topology* topology = t.topology();
  return topology ? fmt::format("{}, {}", options.transportName, topology->describe())
                  : options.transportName;
}

// Times one size: `iters` iterations, each on freshly initialised data (untimed) after a barrier
// (untimed), so every iteration measures the collective alone. Verifies the last result.
Row measure(Transport& t, const Collective& c, const BenchOptions& options, uint64_t bytes) {
  int n = t.size();
  size_t count = bytes / sizeof(float);
  std::vector<float> data(count);
  CollectiveOptions collective{.tag = 0,
                               .segmentBytes = options.segmentBytes,
                               .algorithm = algorithmNamed(options.algorithm)};
  double total = 0;
  double cpu = 0;
  for (int iter = -options.warmup; iter < options.iters; ++iter) {
    c.init(data, t.rank(), n);
    barrier(t, {.tag = 1});
    const double cpuStart = processCpuSeconds();
    auto start = std::chrono::steady_clock::now();
    c.run(t, data, collective);
    if (iter < 0) continue;
    total += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    cpu += processCpuSeconds() - cpuStart;
  }
  uint64_t wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += data[i] != c.expected(i, count, n) ? 1 : 0;
  // Slowest rank's mean time, and everyone's errors.
  std::vector<float> times(n, 0.0f);
  times[t.rank()] = static_cast<float>(total / std::max(options.iters, 1));
  allgather(t, times, {.tag = 2});
  std::vector<float> wrongs = {static_cast<float>(wrong)};
  allreduce(t, wrongs, ReduceOp::kSum, {.tag = 3});
  const double iters = std::max(options.iters, 1);
  return {bytes, count, *std::max_element(times.begin(), times.end()),
          static_cast<uint64_t>(wrongs[0]), jobCpuSeconds(t, cpu) / iters};
}

}  // namespace

void validateBench(const BenchOptions& options) {
  collectiveNamed(options.collective);
  if (options.minBytes < sizeof(float) || options.minBytes > options.maxBytes) {
    throw ConfigError(fmt::format("--min-bytes {} and --max-bytes {} make an empty sweep",
                                  options.minBytes, options.maxBytes),
                      {.hint = "need 4 <= --min-bytes <= --max-bytes"});
  }
  const std::string& a = options.algorithm;
  if (options.collective == "allgather" && (a == "halving" || a == "hierarchical")) {
    throw ConfigError("bench allgather runs the ring or doubling (Bruck's), or picks one",
                      {.hint = "--algorithm auto, ring or doubling"});
  }
  if (options.collective == "broadcast" && a != "auto") {
    throw ConfigError("bench broadcast has one algorithm (the pipelined chain)",
                      {.hint = "drop --algorithm"});
  }
  if (options.factor < 2) throw ConfigError("--factor must be at least 2");
  if (options.iters < 1 || options.warmup < 0) {
    throw ConfigError("--iters must be at least 1 and --warmup at least 0");
  }
}

uint64_t runBench(Transport& t, const BenchOptions& options) {
  const Collective& c = collectiveNamed(options.collective);
  int n = t.size();
  bool report = t.rank() == 0;
  if (report) {
    std::printf(
        "# gradsync bench %s: %d ranks, transport %s, %d iterations (+%d warm-up), "
        "segment %s, algorithm %s\n",
        options.collective.c_str(), n, describeTransport(t, options).c_str(), options.iters,
        options.warmup, formatBytes(options.segmentBytes).c_str(), options.algorithm.c_str());
    std::printf("#%13s %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)",
                "algbw(GB/s)", "busbw(GB/s)", "cpu(s/GB)", "#wrong");
    std::fflush(stdout);
  }
  nlohmann::json results = nlohmann::json::array();
  uint64_t wrong = 0;
  for (uint64_t bytes = options.minBytes; bytes <= options.maxBytes; bytes *= options.factor) {
    Row row = measure(t, c, options, bytes / sizeof(float) * sizeof(float));
    double algbw = row.seconds > 0 ? static_cast<double>(row.bytes) / row.seconds / 1e9 : 0;
    double busbw = algbw * c.busFactor(n);
    // CPU seconds of all ranks per GB that all ranks sent (busFactor x size each, per iteration).
    const double movedGb = c.busFactor(n) * static_cast<double>(row.bytes) * n / 1e9;
    const double cpuPerGb = movedGb > 0 ? row.cpuSeconds / movedGb : 0;
    wrong += row.wrong;
    if (report) {
      std::printf(" %13llu %12zu %12.1f %12.3f %12.3f %12.3f %8llu\n",
                  static_cast<unsigned long long>(row.bytes), row.count, row.seconds * 1e6, algbw,
                  busbw, cpuPerGb, static_cast<unsigned long long>(row.wrong));
      std::fflush(stdout);
    }
    results.push_back({{"bytes", row.bytes},
                       {"count", row.count},
                       {"time_us", row.seconds * 1e6},
                       {"algbw_gbps", algbw},
                       {"busbw_gbps", busbw},
                       {"cpu_s", row.cpuSeconds},
                       {"cpu_s_per_gb", cpuPerGb},
                       {"wrong", row.wrong}});
  }
  if (report && !options.jsonPath.empty()) {
    const TransportOptions& link = t.options();
    nlohmann::json doc = {{"system", "gradsync"},
                          {"collective", options.collective},
                          {"workers", n},
                          {"transport", describeTransport(t, options)},
                          {"algorithm", options.algorithm},
                          {"bandwidth_bytes_per_s", link.bandwidthBytesPerSec},
                          {"latency_us", link.latency.count()},
                          {"iters", options.iters},
                          {"warmup", options.warmup},
                          {"segment_bytes", options.segmentBytes},
                          {"results", results}};
    std::ofstream out(options.jsonPath);
    if (!out) throw ConfigError(fmt::format("cannot write --json file '{}'", options.jsonPath));
    out << doc.dump(2) << "\n";
  }
  if (report && wrong > 0)
    std::printf("# %llu WRONG elements\n", static_cast<unsigned long long>(wrong));
  return wrong;
}

}  // namespace gradsync
