// Wavelet's data-parallel waves: the threads, their data and their accounting. The gates are
// torch/waves/gates.h's, the weights torch/waves/master.h's.
#include "torch/waves/wavelet_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/elapsed.h"
#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "gradsync/torch/collectives.h"
#include "gradsync/torch/distributed_optimizer.h"
#include "torch/api/sync_setup.h"
#include "torch/loop/data_source.h"
#include "torch/loop/epoch_loop.h"
#include "torch/loop/evaluation.h"
#include "torch/loop/progress.h"
#include "torch/loop/training_model.h"
#include "torch/loop/training_optimizer.h"
#include "torch/models/models.h"
#include "torch/waves/gates.h"
#include "torch/waves/master.h"
#include "transport/tag_shift_transport.h"

namespace gradsync {
namespace {

using MonotonicClock = std::chrono::steady_clock;

// One wave of this worker: its replica, its engine and its share of the accounting.
struct Wave {
  int index = 0;
  std::unique_ptr<TagShiftTransport> transport;
  std::shared_ptr<Model> net;
  // Never steps (the master's optimizer does): DistributedOptimizer needs one over the replica.
  std::unique_ptr<torch::optim::SGD> optimizer;
  std::unique_ptr<DistributedOptimizer> distributed;
  std::vector<float> inputs;
  std::vector<int64_t> labels;
  std::vector<float> losses;  // the current epoch's, in order
  double computeSeconds = 0;  // forward + backward, gate waits excluded
  double waitSeconds = 0;     // for the averaged gradients and (accumulate) the round's update
};

class WaveletTrainer {
 public:
  WaveletTrainer(Transport& transport, const TrainOptions& options);
  TrainResult run();

 private:
  // The waves train rounds [first, end) of epoch `epoch` (round r: wave w takes batch
  // K * (r mod roundsPerEpoch) + w of the epoch), one thread each; rethrows the first failure.
  void runRounds(int epoch, int64_t first, int64_t end);
  void waveLoop(Wave& wave, int epoch, int64_t first, int64_t end);
  float waveStep(Wave& wave, int epoch, int64_t round);
  void abortAll(std::exception_ptr error);
  double evaluate();
  // The result's parameters, per-step profile and the waves' own records.
  void finish(TrainResult& result);

  Transport& transport_;
  const TrainOptions options_;
  const int waves_;
  std::unique_ptr<DataSource> data_;
  std::mutex dataMutex_;  // DataSource promises nothing about concurrent batch() calls
  std::unique_ptr<BatchSampler> sampler_;
  int64_t roundsPerEpoch_ = 0;
  int64_t warmupSteps_ = 0;  // each wave's dense steps (--compress-warmup, resolved)
  std::vector<Wave> wave_;
  std::unique_ptr<WaveMaster> master_;
  std::unique_ptr<WaveGates> gates_;
  std::vector<WaveInterval> intervals_;  // of the epochs done
};

WaveletTrainer::WaveletTrainer(Transport& transport, const TrainOptions& options)
    : transport_(transport),
      options_(options),
      waves_(options.waves),
      data_(openTrainingData(options)),
      sampler_(data_->makeSampler(transport.rank(), transport.size(), options.batchSize,
                                  options.seed, transport.size())) {
  roundsPerEpoch_ = static_cast<int64_t>(sampler_->stepsPerEpoch()) / waves_;
  if (roundsPerEpoch_ < 1) {
    throw ConfigError(
        fmt::format("an epoch of {} steps cannot feed {} waves", sampler_->stepsPerEpoch(), waves_),
        {.rank = transport.rank(), .hint = "a smaller --batch-size or fewer waves"});
  }
  // --compress-warmup auto: a tenth of each wave's own epoch (its engine counts its own steps).
  const TrainOptions resolved = withResolvedWarmup(options, static_cast<size_t>(roundsPerEpoch_));
  warmupSteps_ = resolved.compression.warmupSteps;
  std::shared_ptr<Model> net = makeTrainingModel(options, transport.rank());
  std::unique_ptr<FusedSGD> optimizer = makeFusedSgd(*net, options);
  broadcastParameters(*net, transport);
  std::vector<Model*> replicas;
  wave_.resize(static_cast<size_t>(waves_));
  for (int w = 0; w < waves_; ++w) {  // in order on every rank: the constructors are collective
    Wave& wave = wave_[w];
    wave.index = w;
    wave.transport = std::make_unique<TagShiftTransport>(
        transport, static_cast<uint64_t>(w + 1) * tags::kWaveShift);
    wave.net = makeTrainingModel(options, transport.rank());
    wave.optimizer = std::make_unique<torch::optim::SGD>(
        wave.net->parameters(), torch::optim::SGDOptions(options.lr).momentum(options.momentum));
    wave.distributed = std::make_unique<DistributedOptimizer>(
        *wave.optimizer, wave.net, *wave.transport, syncOptionsOf(resolved));
    wave.inputs.resize(options.batchSize * data_->sampleElements());
    wave.labels.resize(options.batchSize);
    replicas.push_back(wave.net.get());
  }
  master_ = std::make_unique<WaveMaster>(std::move(net), std::move(optimizer), replicas,
                                         parseWaveConsistency(options.waveConsistency),
                                         transport.options().timeout, transport.rank());
}

float WaveletTrainer::waveStep(Wave& wave, int epoch, int64_t round) {
  const auto batchIndex = static_cast<size_t>((round % roundsPerEpoch_) * waves_ + wave.index);
  const int64_t step = round;  // the wave's own step
  std::vector<size_t> indices = sampler_->batch(epoch, batchIndex);
  {
    std::lock_guard<std::mutex> lock(dataMutex_);
    data_->batch(true, indices, wave.inputs, wave.labels);
  }
  auto batch = static_cast<int64_t>(indices.size());
  torch::Tensor x = torch::from_blob(wave.inputs.data(), {batch, 1, 28, 28});
  torch::Tensor y = torch::from_blob(wave.labels.data(), {batch}, torch::kLong);
  torch::Tensor loss;
  {
    WaveGates::Pass pass(*gates_, WavePhase::kForward, wave.index, step);
    const auto start = MonotonicClock::now();
    master_->load(wave.index, round);  // accumulate: waits for the previous round's update
    const auto loaded = MonotonicClock::now();
    enterTrainingMode(*wave.net, options_.freezeBatchNorm);
    wave.distributed->zeroGrad();
    loss = torch::nn::functional::cross_entropy(wave.net->forward(x), y);
    wave.waitSeconds += std::chrono::duration<double>(loaded - start).count();
    wave.computeSeconds += secondsSince(loaded);
  }
  {
    WaveGates::Pass pass(*gates_, WavePhase::kBackward, wave.index, step);
    const auto start = MonotonicClock::now();
    loss.backward();
    wave.computeSeconds += secondsSince(start);
  }
  const auto start = MonotonicClock::now();
  wave.distributed->synchronize();  // the averaged gradients, in the replica's .grad
  wave.waitSeconds += secondsSince(start);
  master_->apply(wave.index, round);
  return loss.item<float>();
}

void WaveletTrainer::waveLoop(Wave& wave, int epoch, int64_t first, int64_t end) {
  yieldToCommunication();  // per thread: as the single-wave trainer's training thread
  for (int64_t round = first; round < end; ++round) {
    wave.losses.push_back(waveStep(wave, epoch, round));
  }
}

void WaveletTrainer::abortAll(std::exception_ptr error) {
  gates_->abort(error);
  master_->abort(error);
}

void WaveletTrainer::runRounds(int epoch, int64_t first, int64_t end) {
  gates_ = std::make_unique<WaveGates>(waves_, transport_.options().timeout, transport_.rank());
  std::vector<std::exception_ptr> failures(wave_.size());
  std::vector<std::thread> threads;
  for (Wave& wave : wave_) {
    wave.losses.clear();
    threads.emplace_back([&, w = wave.index] {
      try {
        waveLoop(wave_[w], epoch, first, end);
      } catch (...) {
        failures[w] = std::current_exception();
        abortAll(failures[w]);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  std::vector<WaveInterval> passes = gates_->intervals();
  intervals_.insert(intervals_.end(), passes.begin(), passes.end());
  // The first failure in time aborted the others: theirs only echo it, unless it was an abort
  // error of the gates or the master (those rethrow the original), so any one rethrown is it.
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

// On wave 0's replica holding the master's weights and the waves' mean BatchNorm statistics
// (each replica's running statistics saw only its own wave's batches), averaged across workers.
double WaveletTrainer::evaluate() {
  Model& eval = *wave_[0].net;
  master_->loadLatest(0);
  {
    torch::NoGradGuard noGrad;
    std::vector<torch::Tensor> buffers = eval.buffers();
    for (size_t w = 1; w < wave_.size(); ++w) {
      std::vector<torch::Tensor> theirs = wave_[w].net->buffers();
      for (size_t i = 0; i < buffers.size(); ++i) {
        if (buffers[i].is_floating_point()) buffers[i].add_(theirs[i]);
      }
    }
    for (torch::Tensor& b : buffers) {
      if (b.is_floating_point()) b.div_(static_cast<double>(wave_.size()));
    }
  }
  wave_[0].distributed->averageBuffers();
  return testAccuracy(eval, *data_, transport_);
}

// The shared epoch loop (torch/loop/epoch_loop.h) in wave steps: a round is one step of each
// wave, and a segment the rounds of one epoch.
TrainResult WaveletTrainer::run() {
  const int64_t totalRounds =
      options_.steps > 0 ? options_.steps / waves_ : roundsPerEpoch_ * options_.epochs;
  const LoopShape shape{.stepsPerEpoch = roundsPerEpoch_ * waves_,
                        .totalSteps = totalRounds * waves_,
                        .globalBatch = sampler_->globalBatch(),
                        .segmentSteps = roundsPerEpoch_ * waves_,
                        .show = transport_.rank() == 0 && !options_.quiet};
  if (shape.show) {
    std::printf("waves: %d per worker (%s), batch %zu each, %lld rounds\n", waves_,
                options_.waveConsistency.c_str(), options_.batchSize,
                static_cast<long long>(totalRounds));
  }
  const LoopHooks hooks{
      .train =
          [this](int64_t first, int64_t count, std::vector<float>& losses) {
            const int64_t firstRound = first / waves_;
            runRounds(static_cast<int>(firstRound / roundsPerEpoch_), firstRound,
                      firstRound + count / waves_);
            double sum = 0;
            for (size_t i = 0; i < wave_[0].losses.size(); ++i) {
              for (const Wave& wave : wave_) {
                losses.push_back(wave.losses[i]);
                sum += wave.losses[i];
              }
            }
            return sum;
          },
      .evaluate =
          [this](size_t) {
            return Quality{evaluate(), std::nan("")};
          },
      .globalMean = [this](double sum,
                           double count) { return meanOverRanks(transport_, sum, count); },
      .describe =
          [this](const EpochRecord& record, int epochs) {
            return fmt::format("{} ({} waves, {})", describeEpoch(record, epochs, 0), waves_,
                               options_.waveConsistency);
          }};
  TrainResult result = runEpochLoop(shape, {}, hooks).result;
  finish(result);
  return result;
}

void WaveletTrainer::finish(TrainResult& result) {
  const double perStep = 1.0 / static_cast<double>(std::max<int64_t>(result.steps, 1));
  result.parameters = flatParameters(master_->net());
  StepProfile& profile = result.perStep;
  for (const Wave& wave : wave_) {
    const SyncStats stats = wave.distributed->stats();
    profile.computeMs += wave.computeSeconds * 1e3 * perStep;
    profile.exposedCommMs += wave.waitSeconds * 1e3 * perStep;
    profile.commMs += stats.commSeconds * 1e3 * perStep;
    profile.bytesSent += static_cast<double>(stats.bytesSent) * perStep;
    profile.denseBytes += static_cast<double>(stats.denseBytes) * perStep;
    profile.encodeMs += stats.encodeSeconds * 1e3 * perStep;
    profile.decodeMs += stats.decodeSeconds * 1e3 * perStep;
    std::vector<GuardEvent> guard = wave.distributed->guardEvents();
    result.guard.insert(result.guard.end(), guard.begin(), guard.end());
  }
  profile.optimizerMs = master_->optimizerSeconds() * 1e3 * perStep;
  result.schedule = wave_[0].distributed->schedule();
  result.fusedUpdateSteps = master_->optimizer().fusedSteps();
  result.waveIntervals = intervals_;
  result.compressWarmupSteps = warmupSteps_;
}

}  // namespace

TrainResult runWaveletTraining(Transport& workers, const TrainOptions& options) {
  WaveletTrainer trainer(workers, options);
  return trainer.run();
}

}  // namespace gradsync

namespace gradsync {
namespace {

// The first option --waves cannot run with, as "FLAG: why"; empty if none.
std::string unsupportedWithWaves(const TrainOptions& o) {
  const SyncOptions sync = syncOptionsOf(o);
  if (o.sync != "ssgd" || o.strategy.ps || o.strategy.servers > 0)
    return "--sync " + o.sync + (o.strategy.ps ? " --ps" : "") +
           ": the waves hand ring-averaged gradients to one master per worker; other strategies "
           "and parameter servers keep their own weights";
  if (updatesInEngine(sync) || o.schedule.rfind("auto", 0) == 0)
    return "--schedule " + o.schedule +
           ": the waves need gradient mode (fifo, wfbp, fusion:MB); update-mode schedules apply "
           "the update in the engine and auto tunes one training thread's step time";
  if (!o.elastic.empty()) return "--elastic: the waves' workers are fixed";
  if (!o.dataUrl.empty()) return "--data-url: its prefetching sampler serves one training thread";
  if (emulatesCompute(o)) return "--compute " + o.compute + ": the waves compute for real";
  if (!o.checkpointDir.empty() || o.resume) return "--checkpoint-dir/--resume: not implemented";
  if (!o.tracePath.empty()) return "--trace: not implemented for waves";
  if (o.evalEvery > 0) return "--eval-every: the waves evaluate at each epoch's end only";
  if (!o.injectSlowRank.empty()) return "--inject-slow-rank: not implemented for waves";
  if (!o.recordSamples.empty()) return "--record-samples: records elastic runs";
  std::vector<bool> absorbs = DistributedOptimizer::absorbsMomentum(*makeModel(o.model), sync);
  if (std::find(absorbs.begin(), absorbs.end(), true) != absorbs.end())
    return "--compress " + o.compression.spec +
           ": it applies momentum itself, per replica, but the master's optimizer applies it";
  return "";
}

}  // namespace

void validateWaveOptions(const TrainOptions& options) {
  parseWaveConsistency(options.waveConsistency);
  // With --pipeline the waves are pipeline replicas on the stages' devices: planPipeline checks
  // them (torch/pipeline/pipeline.h), up to one per stage.
  const bool pipelined = options.pipeline.enabled();
  if (options.waves < 1 || (options.waves > 4 && !pipelined)) {
    throw ConfigError(fmt::format("--waves must be 1 to 4, not {}", options.waves),
                      {.hint = "Wavelet runs 2 (tick and tock)"});
  }
  if (options.waves == 1 || pipelined) return;
  const std::string reason = unsupportedWithWaves(options);
  if (!reason.empty()) {
    throw ConfigError(fmt::format("--waves {} does not support {}", options.waves, reason),
                      {.operation = "--waves", .hint = "drop that option or use --waves 1"});
  }
  if (options.steps % options.waves != 0) {
    throw ConfigError(
        fmt::format("--steps {} is not a multiple of --waves {}", options.steps, options.waves),
        {.operation = "--waves", .hint = "every wave runs the same number of steps"});
  }
}

}  // namespace gradsync
