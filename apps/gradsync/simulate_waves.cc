#include "simulate_waves.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "gradsync/error.h"
#include "sim/model_parallel_waves.h"
#include "sim/wave_memory.h"
#include "sim_flags.h"
#include "svg_chart.h"

namespace gradsync {
namespace {

constexpr double kFp32Bytes = 4;

// Flags of the data-parallel cluster simulator that --waves does not use.
constexpr const char* kClusterFlags[] = {"--workers",
                                         "--gpus-per-host",
                                         "--bandwidth",
                                         "--latency",
                                         "--local-bandwidth",
                                         "--local-latency",
                                         "--codec-ns-per-element",
                                         "--schedule",
                                         "--sync",
                                         "--ps",
                                         "--servers",
                                         "--compress",
                                         "--compress-override",
                                         "--compress-min-elements",
                                         "--sweep"};

void refuseGiven(const CLI::App& cmd, std::initializer_list<const char*> flags,
                 const std::string& why) {
  for (const char* flag : flags)
    if (cmd.count(flag) > 0) throw ConfigError(fmt::format("{} {}", flag, why));
}

double gigabytes(double bytes) {
  return bytes / 1e9;
}

// ---- data parallel: K waves of B on one device against one wave of K·B ----

nlohmann::json waveJson(const sim::WaveMemoryResult& r, int waves, int64_t batch) {
  return {{"waves", waves},
          {"batch_per_wave", batch},
          {"peak_bytes", r.peakBytes},
          {"static_bytes", r.staticBytes},
          {"iteration_ms", r.secondsPerIteration * 1e3},
          {"samples_per_s", r.samplesPerSecond}};
}

void printWaveRow(const char* label, int waves, int64_t batch, const sim::WaveMemoryResult& r) {
  const std::string samples =
      waves == 1 ? fmt::format("{}", batch) : fmt::format("{} x {}", waves, batch);
  std::printf("  %-26s %10s %11.3f %11.3f %11.2f %11.1f\n", label, samples.c_str(),
              gigabytes(r.peakBytes), gigabytes(r.peakBytes - r.staticBytes),
              r.secondsPerIteration * 1e3, r.samplesPerSecond);
}

// On a device of `capacity` bytes: the largest batch of one wave and of K waves, and their
// throughputs.
nlohmann::json capacityComparison(const ModelProfile& profile, sim::WaveMemoryOptions o,
                                  const std::string& memory) {
  const double capacity = static_cast<double>(parseBytes(memory, "--device-memory"));
  const int k = o.waves;
  nlohmann::json out = {{"device_memory_bytes", capacity}};
  std::printf("On a device of %s (%.3f GB):\n", memory.c_str(), gigabytes(capacity));
  double oneRate = 0;
  for (int waves : {1, k}) {
    o.waves = waves;
    o.batchPerWave = sim::largestFittingBatch(profile, o, capacity);
    const char* key = waves == 1 ? "one_wave" : "waves";
    if (o.batchPerWave == 0) {
      std::printf("  %s: not even one sample fits\n", waves == 1 ? "one wave" : "the waves");
      out[key] = nullptr;
      continue;
    }
    const sim::WaveMemoryResult r = sim::simulateWaveMemory(profile, o);
    printWaveRow(waves == 1 ? "one wave, largest batch" : "waves, largest batch", waves,
                 o.batchPerWave, r);
    out[key] = waveJson(r, waves, o.batchPerWave);
    if (waves == 1) oneRate = r.samplesPerSecond;
    if (waves == k && oneRate > 0)
      std::printf("  %d waves: %.2fx one wave's throughput at the same memory\n", k,
                  r.samplesPerSecond / oneRate);
  }
  return out;
}

// Device memory against time, one wave of K·B beside the K waves, over the one wave's first
// three iterations (the timelines are step functions, drawn at 400 instants).
void writeMemoryPlot(const ModelProfile& profile, const sim::WaveMemoryResult& one,
                     const sim::WaveMemoryResult& waves, int k, int64_t batch,
                     const std::string& path) {
  constexpr int kPoints = 400;
  const double window = 3 * one.secondsPerIteration;
  Chart chart;
  chart.title = fmt::format("gradsync simulate: {} ({}), device memory, predicted", profile.name,
                            profile.device);
  chart.xLabel = "seconds";
  chart.yLabel = "device memory (GB)";
  for (int i = 0; i < kPoints; ++i) chart.x.push_back(window * (i + 1) / kPoints);
  const auto sampled = [&](const sim::WaveMemoryResult& r, std::string label) {
    ChartSeries series{std::move(label), {}};
    size_t next = 0;
    double bytes = r.staticBytes;
    for (double t : chart.x) {
      while (next < r.timeline.size() && r.timeline[next].seconds <= t)
        bytes = r.timeline[next++].bytes;
      series.y.push_back(gigabytes(bytes));
    }
    return series;
  };
  chart.series = {sampled(one, fmt::format("one wave of {}", batch * k)),
                  sampled(waves, fmt::format("{} tick-tock waves of {}", k, batch))};
  writeTextFile(path, renderSvg(chart));
}

void runDataParallel(const ModelProfile& profile, const WaveSimFlags& f, int64_t steps,
                     const std::string& json, const std::string& plot) {
  sim::WaveMemoryOptions o{.waves = f.waves,
                           .batchPerWave = f.batch > 0 ? f.batch : profile.batchSize,
                           .optimizerSlots = f.optimizerSlots,
                           .saturationBatch = f.saturationBatch,
                           .steps = steps,
                           .minimumOffset = f.waveOffset};
  const int64_t b = o.batchPerWave;
  if (!f.deviceMemory.empty()) parseBytes(f.deviceMemory, "--device-memory");  // before printing
  const sim::WaveMemoryResult waves = sim::simulateWaveMemory(profile, o);
  sim::WaveMemoryOptions single = o;
  single.waves = 1;
  single.batchPerWave = b * f.waves;
  const sim::WaveMemoryResult one = sim::simulateWaveMemory(profile, single);
  std::printf(
      "gradsync simulate: %s (%s), data-parallel Wavelet on one device: %d tick-tock waves of %lld "
      "against one wave of %lld; static %.3f GB (weights, gradient, %d optimizer slot%s), "
      "saturation batch %lld, %lld steps (predicted)\n",
      profile.name.c_str(), profile.device.c_str(), f.waves, static_cast<long long>(b),
      static_cast<long long>(b * f.waves), gigabytes(one.staticBytes), f.optimizerSlots,
      f.optimizerSlots == 1 ? "" : "s", static_cast<long long>(f.saturationBatch),
      static_cast<long long>(steps));
  std::printf("  %-26s %10s %11s %11s %11s %11s\n", "", "samples", "peak GB", "activ. GB",
              "ms/iter", "samples/s");
  printWaveRow("one wave", 1, b * f.waves, one);
  printWaveRow("tick-tock waves", f.waves, b, waves);
  std::printf("  peak: the waves hold %.3fx one wave's (activations %.3fx)\n",
              waves.peakBytes / one.peakBytes,
              (waves.peakBytes - waves.staticBytes) / (one.peakBytes - one.staticBytes));
  nlohmann::json doc = {{"profile", profile.name},
                        {"device", profile.device},
                        {"mode", "data-parallel"},
                        {"optimizer_slots", f.optimizerSlots},
                        {"saturation_batch", f.saturationBatch},
                        {"steps", steps},
                        {"one_wave", waveJson(one, 1, b * f.waves)},
                        {"waves", waveJson(waves, f.waves, b)}};
  if (!f.deviceMemory.empty()) doc["capacity"] = capacityComparison(profile, o, f.deviceMemory);
  std::fflush(stdout);
  if (!plot.empty()) writeMemoryPlot(profile, one, waves, f.waves, b, plot);
  if (json.empty()) return;
  nlohmann::json timeline = nlohmann::json::array();
  for (const sim::MemoryEvent& e : waves.timeline)
    timeline.push_back({e.seconds, e.bytes, e.wave, profile.layers[e.layer].name,
                        e.forward ? "forward" : "backward"});
  doc["waves_timeline"] = timeline;  // [seconds, bytes, wave, layer, phase]
  writeTextFile(json, doc.dump(1) + "\n");
}

// ---- model parallel: naive against K waves, same and rotated placement ----

// The most parameters one device holds: each wave places every partition somewhere, and a
// device keeps one copy of each partition it runs.
double weightsPerDevice(const std::vector<int64_t>& partitionParameters, int waves,
                        sim::WavePlacement placement) {
  const int k = static_cast<int>(partitionParameters.size());
  double most = 0;
  for (int d = 0; d < k; ++d) {
    std::set<int> held;
    for (int w = 0; w < waves; ++w)
      for (int i = 0; i < k; ++i)
        if (sim::deviceOf(placement, k, w, i) == d) held.insert(i);
    double parameters = 0;
    for (int i : held) parameters += static_cast<double>(partitionParameters[i]);
    most = std::max(most, parameters);
  }
  return most;
}

std::vector<int64_t> partitionParameters(const ModelProfile& profile,
                                         const std::vector<int>& split) {
  std::vector<int64_t> out;
  size_t layer = 0;
  for (int count : split) {
    int64_t elements = 0;
    for (int i = 0; i < count; ++i, ++layer)
      for (const TensorShape& t : profile.layers[layer].tensors) elements += t.elements;
    out.push_back(elements);
  }
  return out;
}

void runModelParallel(const ModelProfile& profile, const WaveSimFlags& f,
                      const PipelineSimFlags& pipeline, const std::string& json) {
  const std::vector<int> split = balancedSplit(profile, pipeline.stages);
  sim::ModelParallelWaveOptions o{.partitions = stageCosts(profile, split),
                                  .hopSeconds = parseDurationSeconds(pipeline.hop, "--hop"),
                                  .sharedLink = f.sharedLink,
                                  .steps = pipeline.steps};
  const std::vector<int64_t> parameters = partitionParameters(profile, split);
  std::printf(
      "gradsync simulate: %s (%s), model-parallel Wavelet: %d partitions (layers %s) on %d "
      "devices, hop %s%s, %lld steps, batch %lld per wave (predicted)\n",
      profile.name.c_str(), profile.device.c_str(), pipeline.stages,
      fmt::format("{}", fmt::join(split, ",")).c_str(), pipeline.stages, pipeline.hop.c_str(),
      f.sharedLink ? " over one shared link" : " per device pair",
      static_cast<long long>(pipeline.steps), static_cast<long long>(profile.batchSize));
  std::printf("  %-28s %12s %11s %12s %9s %14s\n", "", "ms/mini-batch", "samples/s", "utilisation",
              "speed-up", "weights GB/dev");
  struct Row {
    const char* label;
    const char* key;
    int waves;
    sim::WavePlacement placement;
  };
  const Row rows[] = {{"naive (1 wave)", "naive", 1, sim::WavePlacement::kSame},
                      {"same placement", "same_placement", f.waves, sim::WavePlacement::kSame},
                      {"rotated placement", "rotated", f.waves, sim::WavePlacement::kRotated}};
  nlohmann::json doc = {
      {"profile", profile.name},     {"mode", "model-parallel"}, {"partitions", pipeline.stages},
      {"partition_layers", split},   {"waves", f.waves},         {"hop_s", o.hopSeconds},
      {"shared_link", f.sharedLink}, {"steps", pipeline.steps}};
  double naive = 0;
  for (const Row& row : rows) {
    o.waves = row.waves;
    o.placement = row.placement;
    const sim::ModelParallelWaveResult r = sim::simulateModelParallelWaves(o);
    if (naive == 0) naive = r.secondsPerMiniBatch;
    const double samplesPerSecond = static_cast<double>(profile.batchSize) / r.secondsPerMiniBatch;
    const double weights = weightsPerDevice(parameters, row.waves, row.placement) * kFp32Bytes;
    const std::string label =
        row.waves == 1 ? row.label : fmt::format("{}, {} waves", row.label, row.waves);
    std::printf("  %-28s %12.3f %11.1f %11.1f%% %8.2fx %14.3f\n", label.c_str(),
                r.secondsPerMiniBatch * 1e3, samplesPerSecond, 100 * r.utilisation,
                naive / r.secondsPerMiniBatch, gigabytes(weights));
    doc[row.key] = {{"waves", row.waves},
                    {"ms_per_mini_batch", r.secondsPerMiniBatch * 1e3},
                    {"samples_per_s", samplesPerSecond},
                    {"utilisation", r.utilisation},
                    {"speed_up", naive / r.secondsPerMiniBatch},
                    {"weight_bytes_per_device", weights}};
  }
  std::fflush(stdout);
  if (!json.empty()) writeTextFile(json, doc.dump(1) + "\n");
}

}  // namespace

void addWaveSimFlags(CLI::App* simulate, WaveSimFlags& f) {
  simulate->add_option("--waves", f.waves,
                       "Wavelet: K tick-tock waves on one device, or with --pipeline S, K "
                       "model-parallel waves in rotated placement");
  simulate->add_option("--batch", f.batch, "--waves: samples per wave (default: the profile's)");
  simulate->add_option("--device-memory", f.deviceMemory,
                       "--waves: a device's memory, e.g. 16GiB: the largest batch that fits");
  simulate
      ->add_option("--saturation-batch", f.saturationBatch,
                   "--waves: the batch that fills the device (0: any batch does)")
      ->capture_default_str();
  simulate
      ->add_option("--optimizer-slots", f.optimizerSlots,
                   "--waves: fp32 optimizer state per parameter (1 momentum, 2 Adam)")
      ->capture_default_str();
  simulate
      ->add_option("--wave-offset", f.waveOffset,
                   "--waves: least offset between the waves' forwards, as a fraction of one "
                   "wave's iteration (0: the gates alone)")
      ->capture_default_str();
  simulate->add_flag("--shared-link", f.sharedLink,
                     "--pipeline --waves: all hops share one link (default: one per pair)");
}

void checkWaveFlags(const CLI::App& cmd, const WaveSimFlags& f, int stages) {
  const auto waveFlags = {"--batch",           "--device-memory", "--saturation-batch",
                          "--optimizer-slots", "--wave-offset",   "--shared-link"};
  if (cmd.count("--waves") == 0) return refuseGiven(cmd, waveFlags, "needs --waves K");
  if (cmd.count("--batch") > 0 && f.batch < 1)
    throw ConfigError(fmt::format("--batch must be at least 1, not {}", f.batch));
  if (f.waves < 1)
    throw ConfigError(fmt::format("--waves must be at least 1, not {}", f.waves),
                      {.hint = "2 is Wavelet's tick-tock; with --pipeline S, up to S"});
  for (const char* flag : kClusterFlags)
    if (cmd.count(flag) > 0)
      throw ConfigError(fmt::format("{} is not used with --waves", flag),
                        {.hint = "--waves simulates one device, or with --pipeline S devices "
                                 "joined by --hop"});
  if (stages == 0) {
    if (f.waves < 2)
      throw ConfigError(fmt::format("--waves {}: one wave is nothing to compare", f.waves),
                        {.hint = "give 2 or more, or --pipeline S for model parallelism"});
    refuseGiven(
        cmd, {"--shared-link", "--hop", "--pipeline-steps", "--pipeline-mode", "--micro-batches"},
        "is the pipeline's (--pipeline S --waves K)");
    return;
  }
  if (f.waves > stages)
    throw ConfigError(
        fmt::format("--waves {} on {} partitions: at most one wave per device", f.waves, stages));
  refuseGiven(cmd, {"--pipeline-mode", "--micro-batches", "--plot"},
              "is not used with --pipeline --waves");
  refuseGiven(cmd,
              {"--batch", "--device-memory", "--saturation-batch", "--optimizer-slots",
               "--wave-offset", "--steps"},
              "is the data-parallel waves' (without --pipeline)");
}

void runWaveSimulation(const ModelProfile& profile, const WaveSimFlags& f,
                       const PipelineSimFlags& pipeline, int64_t steps, const std::string& json,
                       const std::string& plot) {
  if (pipeline.stages > 0) return runModelParallel(profile, f, pipeline, json);
  runDataParallel(profile, f, steps, json, plot);
}

}  // namespace gradsync
