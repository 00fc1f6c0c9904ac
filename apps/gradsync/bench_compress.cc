#include "bench_compress.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/random.h"
#include "common/simd.h"
#include "common/units.h"
#include "compress/registry.h"
#include "compress/select.h"
#include "compress/spec.h"
#include "gradsync/error.h"
#include "gradsync/loopback.h"

namespace gradsync {
namespace {

using MonotonicClock = std::chrono::steady_clock;

struct CodecRow {
  std::string method;
  size_t elements = 0;
  double encodeGBps = 0;  // of float32 input
  double decodeGBps = 0;
  double ratio = 0;                               // input bytes / encoded bytes
  std::string path = simd::name(simd::active());  // the instruction set it ran on
};

// Gradient-like input: Gaussian values scaled by a per-block factor, so magnitudes vary across
// the tensor as they do across a layer's gradient (a portable generator: same data everywhere).
std::vector<float> gradientLike(size_t n) {
  std::vector<float> x(n);
  std::mt19937_64 engine(12345);
  for (size_t i = 0; i < n; i += 2) {
    double u1 = std::max(1e-12, static_cast<double>(rng::unitFloat(engine())));
    double u2 = rng::unitFloat(engine());
    double radius = std::sqrt(-2 * std::log(u1));
    x[i] = static_cast<float>(radius * std::cos(2 * M_PI * u2));
    if (i + 1 < n) x[i + 1] = static_cast<float>(radius * std::sin(2 * M_PI * u2));
  }
  for (size_t i = 0; i < n; ++i) x[i] *= 1.0f + static_cast<float>((i >> 12) % 7);
  return x;
}

// A near-square matrix view for methods that need one (PowerSGD).
TensorShape benchShape(size_t n) {
  auto rows = static_cast<int64_t>(1) << static_cast<int>(std::log2(std::sqrt(double(n))));
  if (static_cast<size_t>(rows) == 0 || n % static_cast<size_t>(rows) != 0) return {"x", {}, n};
  return tensorShape("x", {rows, static_cast<int64_t>(n) / rows});
}

double gbps(size_t n, double seconds) {
  return seconds > 0 ? static_cast<double>(n) * sizeof(float) / seconds / 1e9 : 0;
}

// Times `body` (best of iters after one warm-up).
double bestSeconds(int iters, const std::function<void()>& body) {
  body();
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    auto start = MonotonicClock::now();
    body();
    best = std::min(best, std::chrono::duration<double>(MonotonicClock::now() - start).count());
  }
  return best;
}

// One method through its real exchange on a world of one: all of the compression work, none of
// the network. Each exchange is fed a fresh copy of the input (error feedback adds its residual).
// The best encode and decode times of `iters` exchanges after one warm-up.
ExchangeStats timeExchanges(const CompressSpec& spec, const std::vector<float>& input, int iters,
                            size_t& encodedBytes) {
  size_t n = input.size();
  TensorShape shape = benchShape(n);
  auto compressor = makeCompressor(spec, {&shape, 1});
  LoopbackFabric fabric(1);
  auto transport = fabric.connect(0);
  std::vector<float> grad(n), sent(n);
  ExchangeStats best{1e30, 1e30};
  for (int i = 0; i <= iters; ++i) {
    std::copy(input.begin(), input.end(), grad.begin());
    ExchangeStats stats;
    ExchangeContext context{*transport, {}, 1000 + static_cast<uint64_t>(i), 1};
    compressor->exchange(context, grad, sent, stats);
    if (i == 0) continue;  // warm-up: first-touch of buffers
    best.encodeSeconds = std::min(best.encodeSeconds, stats.encodeSeconds);
    best.decodeSeconds = std::min(best.decodeSeconds, stats.decodeSeconds);
  }
  encodedBytes = compressor->encodedBytes(n);
  return best;
}

CodecRow benchMethod(const std::string& text, const std::vector<float>& input, int iters) {
  const CompressSpec spec = CompressSpec::parse(text, "bench compress");
  const size_t n = input.size();
  size_t encodedBytes = 0;
  const ExchangeStats best = timeExchanges(spec, input, iters, encodedBytes);
  return {spec.toString(), n, gbps(n, best.encodeSeconds), gbps(n, best.decodeSeconds),
          static_cast<double>(n * sizeof(float)) / static_cast<double>(encodedBytes)};
}

// The naive references and the selection kernels alone (encode column = the kernel's speed).
std::vector<CodecRow> benchKernels(const std::vector<float>& input, int iters) {
  size_t n = input.size();
  size_t k = std::max<size_t>(1, n / 100);
  std::vector<float> copy(n);
  std::vector<uint32_t> indices;
  std::vector<CodecRow> rows;
  auto add = [&](const char* name, const std::function<void()>& body) {
    rows.push_back({name, n, gbps(n, bestSeconds(iters, body)), 0, 0});
  };
  add("reference: copy (float32)",
      [&] { std::memcpy(copy.data(), input.data(), n * sizeof(float)); });
  add("reference: top-1% by nth_element", [&] { selectTopKBySort(input, k, indices); });
  add("select: exact top-1%", [&] { selectTopK(input, k, indices); });
  return rows;
}

void printRow(const CodecRow& row) {
  std::printf("%-7s %-34s %12zu %12.3f %12.3f %10.1f\n", row.path.c_str(), row.method.c_str(),
              row.elements, row.encodeGBps, row.decodeGBps, row.ratio);
  std::fflush(stdout);
}

void writeJson(const std::string& path, const std::vector<CodecRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const CodecRow& r : rows) {
    out.push_back({{"simd", r.path},
                   {"method", r.method},
                   {"elements", r.elements},
                   {"encode_gbps", r.encodeGBps},
                   {"decode_gbps", r.decodeGBps},
                   {"ratio", r.ratio}});
  }
  std::ofstream file(path);
  if (!file) throw ConfigError(fmt::format("cannot write '{}'", path));
  file << out.dump(2) << "\n";
}

}  // namespace

CodecTiming measureCodec(const std::string& spec, int iters) {
  static const std::vector<float> input = gradientLike(kCodecTimingElements);
  size_t encodedBytes = 0;
  const ExchangeStats best =
      timeExchanges(CompressSpec::parse(spec, "codec cost"), input, iters, encodedBytes);
  const auto n = static_cast<double>(input.size());
  return {best.encodeSeconds / n, best.decodeSeconds / n};
}

namespace {

// The instruction sets named by options.simd, checked against the CPU.
std::vector<simd::Path> pathsToMeasure(const std::string& text) {
  if (text.empty()) return {simd::active()};
  std::vector<simd::Path> paths;
  for (simd::Path path : {simd::Path::kScalar, simd::Path::kAvx2, simd::Path::kAvx512}) {
    const bool wanted = text == "all" || text == simd::name(path);
    if (wanted && static_cast<int>(path) <= static_cast<int>(simd::supported())) {
      paths.push_back(path);
    } else if (wanted && text != "all") {
      throw ConfigError(fmt::format("--simd {}: this CPU supports {} at most", text,
                                    simd::name(simd::supported())));
    }
  }
  return paths;
}

}  // namespace

int runCompressBench(const CompressBenchOptions& options) {
  std::vector<std::string> methods = options.methods;
  if (methods.empty()) {
    for (const MethodInfo& m : compressionMethods()) methods.push_back(m.name);
    // GradiVeQ's first 100 exchanges are dense (it learns its basis): measure the compressed
    // path, which is what runs in steady state.
    std::replace(methods.begin(), methods.end(), std::string("gradiveq"),
                 std::string("gradiveq:4,train=1"));
  }
  for (const std::string& m : methods) CompressSpec::parse(m, "bench compress");  // fail early
  const std::vector<simd::Path> paths = pathsToMeasure(options.simd);
  std::printf("# one thread; GB/s of float32 input (best of %d); ratio = input / encoded bytes\n",
              options.iters);
  std::printf("%-7s %-34s %12s %12s %12s %10s\n", "simd", "method", "elements", "encode GB/s",
              "decode GB/s", "ratio");
  std::vector<CodecRow> rows;
  for (simd::Path path : paths) {
    simd::ScopedPath forced(path);
    for (size_t n : options.sizes) {
      std::vector<float> input = gradientLike(n);
      for (CodecRow& row : benchKernels(input, options.iters)) {
        rows.push_back(row);
        printRow(rows.back());
      }
      for (const std::string& m : methods) {
        rows.push_back(benchMethod(m, input, options.iters));
        printRow(rows.back());
      }
    }
  }
  if (!options.jsonPath.empty()) writeJson(options.jsonPath, rows);
  return 0;
}

}  // namespace gradsync
