#include "sim/wave_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

constexpr double kFp32Bytes = 4;

void validate(const ModelProfile& profile, const WaveMemoryOptions& o) {
  const auto kept = [](const LayerProfile& l) { return l.activationBytesPerSample > 0; };
  if (std::none_of(profile.layers.begin(), profile.layers.end(), kept))
    throw ConfigError(
        fmt::format("memory timeline: profile {} gives no activation sizes", profile.name),
        {.operation = "simulate --waves",
         .hint = "add \"activation_bytes\" (per sample) to its layers, or use a built-in profile"});
  if (o.waves < 1) throw ConfigError(fmt::format("--waves must be at least 1, not {}", o.waves));
  if (o.batchPerWave < 1)
    throw ConfigError(fmt::format("memory timeline: a batch of {} (at least 1)", o.batchPerWave));
  if (o.optimizerSlots < 0)
    throw ConfigError(fmt::format("--optimizer-slots must be >= 0, not {}", o.optimizerSlots));
  if (o.saturationBatch < 0)
    throw ConfigError(fmt::format("--saturation-batch must be >= 0, not {}", o.saturationBatch));
  if (o.steps < 1) throw ConfigError(fmt::format("--steps must be at least 1, not {}", o.steps));
  if (!(o.minimumOffset >= 0 && o.minimumOffset <= 1))
    throw ConfigError(fmt::format("--wave-offset must be within [0, 1] of an iteration, not {}",
                                  o.minimumOffset));
}

// One wave's position in its sequence of operations: per iteration the forwards of layers 0 ..
// L−1, the backwards of L−1 .. 0, then the update (index 2L).
struct Wave {
  int64_t iteration = 0;
  int op = 0;
  bool running = false;
  double remaining = 0;  // work left, in seconds of the whole device
  double share = 1;      // of the device it would use alone
};

class TickTock {
 public:
  TickTock(const ModelProfile& profile, const WaveMemoryOptions& o)
      : profile_(profile),
        o_(o),
        layers_(static_cast<int>(profile.layers.size())),
        waves_(o.waves),
        iterationEnds_(o.waves) {
    const double b = static_cast<double>(o.batchPerWave);
    batchScale_ = b / static_cast<double>(profile.batchSize);
    share_ = o.saturationBatch > 0 ? std::min(1.0, b / static_cast<double>(o.saturationBatch)) : 1;
    result_.staticBytes =
        static_cast<double>(profile.parameterCount()) * kFp32Bytes * (2.0 + o.optimizerSlots);
    const double alone =
        (profile.forwardSeconds() + profile.backwardSeconds()) * batchScale_ / share_ +
        profile.updateSeconds;
    offsetSeconds_ = o.minimumOffset * alone;
    bytes_ = result_.peakBytes = result_.staticBytes;
  }

  WaveMemoryResult run() {
    while (true) {
      startWhatCan();
      if (!advance()) break;
    }
    measureThroughput();
    return std::move(result_);
  }

 private:
  bool isForward(int op) const { return op < layers_; }
  int layerOf(int op) const { return isForward(op) ? op : 2 * layers_ - 1 - op; }

  void startWhatCan() {
    for (int w = 0; w < o_.waves; ++w) {
      Wave& wave = waves_[w];
      if (wave.running || wave.iteration >= o_.steps) continue;
      // A phase starts only in its turn: forwards go round the waves, and so do backwards.
      if (wave.op == 0 && (forwardTurn_ != w || now_ < nextForwardAt_)) continue;
      if (wave.op == layers_ && backwardTurn_ != w) continue;
      start(w);
    }
  }

  void start(int w) {
    Wave& wave = waves_[w];
    const bool update = wave.op == 2 * layers_;
    const LayerProfile* layer = update ? nullptr : &profile_.layers[layerOf(wave.op)];
    const double work = update               ? profile_.updateSeconds
                        : isForward(wave.op) ? layer->forwardSeconds * batchScale_
                                             : layer->backwardSeconds * batchScale_;
    wave.running = true;
    wave.remaining = work;
    if (wave.op == 0) nextForwardAt_ = now_ + offsetSeconds_;
    wave.share = update ? 1.0 : share_;
    if (!update && isForward(wave.op))
      change(w, layerOf(wave.op), +layer->activationBytesPerSample, true);
  }

  void change(int w, int layer, double bytesPerSample, bool forward) {
    bytes_ += bytesPerSample * static_cast<double>(o_.batchPerWave);
    result_.peakBytes = std::max(result_.peakBytes, bytes_);
    result_.timeline.push_back({now_, bytes_, w, layer, forward});
  }

  // Whether the wave whose forward turn it is waits only for the minimum offset.
  bool waitsForTheOffset() const {
    const Wave& next = waves_[forwardTurn_];
    return !next.running && next.op == 0 && next.iteration < o_.steps && now_ < nextForwardAt_;
  }

  // Runs the device until the next operation ends or the offset lets the next forward start;
  // false when nothing is left.
  bool advance() {
    double demand = 0;
    for (const Wave& wave : waves_)
      if (wave.running) demand += wave.share;
    const bool waiting = waitsForTheOffset();
    if (demand == 0 && !waiting) return false;
    const double scale = demand > 1 ? 1 / demand : 1;  // processor sharing, up to all of it
    double dt = std::numeric_limits<double>::infinity();
    for (const Wave& wave : waves_)
      if (wave.running) dt = std::min(dt, wave.remaining / (wave.share * scale));
    if (waiting && nextForwardAt_ - now_ < dt) {
      dt = nextForwardAt_ - now_;
      now_ = nextForwardAt_;  // exactly, so that the forward may start
    } else {
      now_ += dt;
    }
    for (int w = 0; w < o_.waves; ++w) {
      Wave& wave = waves_[w];
      if (!wave.running) continue;
      const double rate = wave.share * scale;
      if (wave.remaining / rate <= dt * (1 + 1e-12)) {
        finish(w);
      } else {
        wave.remaining -= rate * dt;
      }
    }
    return true;
  }

  void finish(int w) {
    Wave& wave = waves_[w];
    wave.running = false;
    if (wave.op == layers_ - 1) forwardTurn_ = (w + 1) % o_.waves;
    if (wave.op >= layers_ && wave.op < 2 * layers_) {
      const int layer = layerOf(wave.op);
      change(w, layer, -profile_.layers[layer].activationBytesPerSample, false);
    }
    if (wave.op == 2 * layers_) {
      backwardTurn_ = (w + 1) % o_.waves;
      iterationEnds_[w].push_back(now_);
      wave.op = 0;
      ++wave.iteration;
      return;
    }
    ++wave.op;
  }

  // The steady state from the first wave's iterations, away from both ends of the run (the
  // last wave's last iteration runs alone, faster).
  void measureThroughput() {
    const std::vector<double>& ends = iterationEnds_[0];
    const int64_t margin = (o_.steps - 1) / 4;
    const int64_t first = margin, last = o_.steps - 1 - margin;
    result_.secondsPerIteration =
        last > first ? (ends[last] - ends[first]) / static_cast<double>(last - first) : now_;
    if (result_.secondsPerIteration > 0)
      result_.samplesPerSecond =
          static_cast<double>(o_.waves * o_.batchPerWave) / result_.secondsPerIteration;
  }

  const ModelProfile& profile_;
  const WaveMemoryOptions& o_;
  const int layers_;
  std::vector<Wave> waves_;
  std::vector<std::vector<double>> iterationEnds_;  // per wave
  double batchScale_ = 1;
  double share_ = 1;
  double now_ = 0;
  double bytes_ = 0;
  double offsetSeconds_ = 0;  // between consecutive forward phases' starts, at least
  double nextForwardAt_ = 0;
  int forwardTurn_ = 0;
  int backwardTurn_ = 0;
  WaveMemoryResult result_;
};

}  // namespace

WaveMemoryResult simulateWaveMemory(const ModelProfile& profile, const WaveMemoryOptions& o) {
  validate(profile, o);
  return TickTock(profile, o).run();
}

int64_t largestFittingBatch(const ModelProfile& profile, WaveMemoryOptions o,
                            double capacityBytes) {
  const auto fits = [&](int64_t batch) {
    o.batchPerWave = batch;
    return simulateWaveMemory(profile, o).peakBytes <= capacityBytes;
  };
  if (!fits(1)) return 0;
  int64_t low = 1, high = 2;  // fits(low); high is probed
  constexpr int64_t kLimit = int64_t{1} << 40;
  while (high < kLimit && fits(high)) {
    low = high;
    high *= 2;
  }
  if (high >= kLimit) return low;
  while (high - low > 1) {  // fits(low), !fits(high)
    const int64_t mid = low + (high - low) / 2;
    (fits(mid) ? low : high) = mid;
  }
  return low;
}

}  // namespace gradsync::sim
