// Shared by the peer baselines (Open MPI, Gloo) so that both measure allreduce with one method,
// the one `gradsync bench allreduce` uses: the same size sweep, inputs, check, row and JSON; and
// allgather (`options.collective`, for a peer that has one) as `gradsync bench allgather` does.
// Header-only and independent of gradsync_core on purpose: a baseline must measure the peer
// library alone, and must keep building while our own library changes.
//
// Method, per size: fill inputs, `warmup` allreduces, barrier, time `iters` allreduces; the
// figure is the max over ranks of each rank's mean time per iteration. The result is then
// checked on a freshly filled buffer (the timed loop reduces in place, so its values grow).
// CPU: each rank's process time (user + system, all its threads: getrusage) over the timed
// iterations, summed over ranks, per GB that all ranks sent (2(P-1)/P of the buffer each).
#pragma once

#include <sys/resource.h>

#include <fmt/core.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace gradsync::peers {

struct BenchOptions {
  std::string minBytesText = "1M";
  std::string maxBytesText = "64M";
  uint64_t minBytes = 0;  // Parsed from minBytesText by finishOptions.
  uint64_t maxBytes = 0;
  int iters = 20;
  int warmup = 5;
  std::string jsonPath;  // Empty: no JSON.
  // "allreduce", or "allgather" for a peer with allgather(data): rank r's block of `data` (as
  // gradsync's blockOf cuts it; the sweep's sizes divide evenly) to every rank, in place.
  std::string collective = "allreduce";
};

struct Row {
  uint64_t bytes = 0;
  uint64_t count = 0;
  double timeUs = 0;
  double algbwGbps = 0;
  double busbwGbps = 0;
  double cpuSeconds = 0;  // per iteration, every rank's process together
  double cpuSecondsPerGb = 0;
  int64_t wrong = 0;
};

// CPU time (user + system) of this whole process so far, in microseconds.
inline int64_t processCpuMicros() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto micros = [](const timeval& t) { return int64_t{t.tv_sec} * 1'000'000 + t.tv_usec; };
  return micros(usage.ru_utime) + micros(usage.ru_stime);
}

// What a peer library must offer to be measured. Every call is collective and blocking.
template <class P>
concept PeerCollectives = requires(P p, std::span<float> data, double seconds, int64_t wrong) {
  { p.rank() } -> std::convertible_to<int>;
  { p.size() } -> std::convertible_to<int>;
  p.allreduceSum(data);  // In place.
  p.barrier();
  { p.maxOverRanks(seconds) } -> std::convertible_to<double>;
  { p.sumOverRanks(wrong) } -> std::convertible_to<int64_t>;
};

// "4096", "64K", "16M", "1G", "2KiB", "2KB" -> bytes; suffixes are powers of 1024, as in gradsync.
inline uint64_t parseBytes(std::string_view text, std::string_view what) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  std::string suffix;
  for (char c : text.substr(digits)) suffix += static_cast<char>(std::toupper(c));
  uint64_t shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K" || suffix == "KB" || suffix == "KIB") {
    shift = 10;
  } else if (suffix == "M" || suffix == "MB" || suffix == "MIB") {
    shift = 20;
  } else if (suffix == "G" || suffix == "GB" || suffix == "GIB") {
    shift = 30;
  } else {
    digits = 0;  // Reject below.
  }
  if (digits == 0 || digits > 12) {
    throw std::invalid_argument(
        fmt::format("{}: '{}' is not a byte size (e.g. 4096, 64K, 16M, 1G)", what, text));
  }
  return std::stoull(std::string(text.substr(0, digits))) << shift;
}

inline void addCommonOptions(CLI::App& app, BenchOptions& options) {
  app.add_option("--min-bytes", options.minBytesText, "smallest message (K/M/G = 1024^n)")
      ->capture_default_str();
  app.add_option("--max-bytes", options.maxBytesText, "largest message; sizes double from min")
      ->capture_default_str();
  app.add_option("--iters", options.iters, "timed iterations per size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", options.warmup, "untimed iterations per size")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", options.jsonPath, "write the results here (rank 0)");
}

// Parses what CLI11 cannot check alone; throws std::invalid_argument.
inline void finishOptions(BenchOptions& options) {
  options.minBytes = parseBytes(options.minBytesText, "--min-bytes");
  options.maxBytes = parseBytes(options.maxBytesText, "--max-bytes");
  if (options.minBytes < sizeof(float) || options.minBytes % sizeof(float) != 0) {
    throw std::invalid_argument("--min-bytes must be a positive multiple of 4 (float32)");
  }
  if (options.maxBytes < options.minBytes) {
    throw std::invalid_argument("--max-bytes must be at least --min-bytes");
  }
}

inline std::vector<uint64_t> sizeSweep(uint64_t minBytes, uint64_t maxBytes) {
  std::vector<uint64_t> sizes;
  for (uint64_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) sizes.push_back(bytes);
  return sizes;
}

// Unique per rank and index so a misplaced or dropped element changes the sum; every value and
// partial sum is an integer below 2^24, so float addition is exact in any order.
inline float inputValue(uint64_t index, int rank) {
  return static_cast<float>(index % 97) + 101.0f * static_cast<float>(rank);
}

inline void fillInput(std::span<float> data, int rank) {
  for (uint64_t i = 0; i < data.size(); ++i) data[i] = inputValue(i, rank);
}

inline int64_t countWrong(std::span<const float> data, int workers) {
  const float rankTerm = 101.0f * static_cast<float>(workers) * (workers - 1) / 2;
  int64_t wrong = 0;
  for (uint64_t i = 0; i < data.size(); ++i) {
    const float expected = static_cast<float>(workers) * static_cast<float>(i % 97) + rankTerm;
    wrong += data[i] != expected;
  }
  return wrong;
}

// nccl-tests' bus factor: what each link carries in a ring, per byte of the buffer.
inline double busFactor(std::string_view collective, int workers) {
  const double shares = static_cast<double>(workers - 1) / workers;
  return collective == "allgather" ? shares : 2 * shares;
}

inline Row makeRow(uint64_t bytes, double seconds, int workers, int64_t wrong,
                   double cpuSeconds = 0, std::string_view collective = "allreduce") {
  Row row;
  row.bytes = bytes;
  row.count = bytes / sizeof(float);
  row.timeUs = seconds * 1e6;
  row.algbwGbps = static_cast<double>(bytes) / seconds / 1e9;
  // nccl-tests' bus bandwidth: comparable across worker counts.
  row.busbwGbps = row.algbwGbps * busFactor(collective, workers);
  row.cpuSeconds = cpuSeconds;
  const double movedGb =
      busFactor(collective, workers) * static_cast<double>(bytes) * workers / 1e9;
  row.cpuSecondsPerGb = movedGb > 0 ? cpuSeconds / movedGb : 0;
  row.wrong = wrong;
  return row;
}

inline void printHeader(std::string_view system, int workers, std::string_view transport,
                        const BenchOptions& options) {
  fmt::print("# {} {} float32{} in place: {} workers, {} iters, {} warmup\n", system,
             options.collective, options.collective == "allreduce" ? " sum" : "", workers,
             options.iters, options.warmup);
  fmt::print("# transport: {}\n", transport);
  fmt::print("# {:>12} {:>13} {:>12} {:>10} {:>10} {:>10} {:>7}\n", "size", "count", "time",
             "algbw", "busbw", "cpu", "#wrong");
  fmt::print("# {:>12} {:>13} {:>12} {:>10} {:>10} {:>10} {:>7}\n", "(B)", "(elements)", "(us)",
             "(GB/s)", "(GB/s)", "(s/GB)", "");
  std::fflush(stdout);
}

inline void printRow(const Row& row) {
  fmt::print("  {:>12} {:>13} {:>12.1f} {:>10.3f} {:>10.3f} {:>10.3f} {:>7}\n", row.bytes,
             row.count, row.timeUs, row.algbwGbps, row.busbwGbps, row.cpuSecondsPerGb, row.wrong);
  std::fflush(stdout);  // Rows appear as they are measured, also through pipes.
}

inline void writeJson(const std::string& path, std::string_view system, int workers,
                      std::string_view transport, const BenchOptions& options,
                      const std::vector<Row>& rows) {
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const Row& row : rows) {
    results.push_back({{"bytes", row.bytes},
                       {"count", row.count},
                       {"time_us", row.timeUs},
                       {"algbw_gbps", row.algbwGbps},
                       {"busbw_gbps", row.busbwGbps},
                       {"cpu_s", row.cpuSeconds},
                       {"cpu_s_per_gb", row.cpuSecondsPerGb},
                       {"wrong", row.wrong}});
  }
  nlohmann::ordered_json doc = {{"system", system},
                                {"collective", options.collective},
                                {"workers", workers},
                                {"transport", transport},
                                {"iters", options.iters},
                                {"warmup", options.warmup},
                                {"results", std::move(results)}};
  std::ofstream out(path);
  out << doc.dump(2) << '\n';
  if (!out) throw std::runtime_error(fmt::format("cannot write {}", path));
}

// Allgather's input: rank `rank` fills its block (gradsync's blockOf), the rest -1.
inline void fillBlock(std::span<float> data, int rank, int workers) {
  std::fill(data.begin(), data.end(), -1.0f);
  const uint64_t begin = data.size() * rank / workers, end = data.size() * (rank + 1) / workers;
  for (uint64_t i = begin; i < end; ++i) data[i] = inputValue(i, rank);
}

inline int64_t countWrongGathered(std::span<const float> data, int workers) {
  int64_t wrong = 0;
  for (int r = 0; r < workers; ++r) {
    const uint64_t begin = data.size() * r / workers, end = data.size() * (r + 1) / workers;
    for (uint64_t i = begin; i < end; ++i) wrong += data[i] != inputValue(i, r);
  }
  return wrong;
}

template <PeerCollectives Peer>
Row measureSize(Peer& peer, uint64_t bytes, const BenchOptions& options) {
  std::vector<float> buffer(bytes / sizeof(float));
  const bool gather = options.collective == "allgather";
  auto run = [&] {
    if constexpr (requires { peer.allgather(std::span<float>(buffer)); }) {
      if (gather) return peer.allgather(std::span<float>(buffer));
    }
    if (gather) throw std::invalid_argument("this peer has no allgather");
    peer.allreduceSum(buffer);
  };
  auto fill = [&] {
    if (gather) return fillBlock(buffer, peer.rank(), peer.size());
    fillInput(buffer, peer.rank());
  };
  fill();
  for (int i = 0; i < options.warmup; ++i) run();
  peer.barrier();
  const int64_t cpuStart = processCpuMicros();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.iters; ++i) run();
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  const int64_t cpuMicros = peer.sumOverRanks(processCpuMicros() - cpuStart);
  const double seconds = peer.maxOverRanks(elapsed.count() / options.iters);

  fill();
  run();
  const int64_t wrong = peer.sumOverRanks(gather ? countWrongGathered(buffer, peer.size())
                                                 : countWrong(buffer, peer.size()));
  return makeRow(bytes, seconds, peer.size(), wrong, 1e-6 * cpuMicros / options.iters,
                 options.collective);
}

// Runs the whole sweep; rank 0 prints each row as it is measured and writes the JSON.
// Returns the number of wrong elements over all sizes and ranks.
template <PeerCollectives Peer>
int64_t runSweep(Peer& peer, std::string_view system, std::string_view transport,
                 const BenchOptions& options) {
  const bool leader = peer.rank() == 0;
  if (leader) printHeader(system, peer.size(), transport, options);
  std::vector<Row> rows;
  int64_t wrong = 0;
  for (uint64_t bytes : sizeSweep(options.minBytes, options.maxBytes)) {
    rows.push_back(measureSize(peer, bytes, options));
    wrong += rows.back().wrong;
    if (leader) printRow(rows.back());
  }
  if (leader && !options.jsonPath.empty()) {
    writeJson(options.jsonPath, system, peer.size(), transport, options, rows);
  }
  return wrong;
}

}  // namespace gradsync::peers
