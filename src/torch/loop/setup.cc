// The process-level setup of `gradsync train` (trainer.h): its options checked and turned into
// the public SyncOptions, and the compute threads' budget and priority.
#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/check.h"
#include "common/logging.h"
#include "gradsync/error.h"
#include "torch/models.h"
#include "torch/sync_setup.h"
#include "torch/trainer.h"
#include "torch/wavelet_trainer.h"

namespace gradsync {

SyncOptions syncOptionsOf(const TrainOptions& options) {
  return {.schedule = options.schedule,
          .compress = options.compression.spec,
          .compressOverrides = options.compression.overrides,
          .compressMinElements = options.compression.minElements,
          // kAutoWarmup counts only where a trainer resolved it with its epoch
          // (withResolvedWarmup); before that (validation, the servers) no step is dense.
          .compressWarmup = std::max<int64_t>(options.compression.warmupSteps, 0),
          .guard = options.compression.guard,
          .sync = options.sync,
          .parameterServers = options.strategy.ps,
          .servers = options.strategy.servers,
          .delayWarmup = options.strategy.warmup,
          .localLr = options.strategy.localLr,
          .localMomentum = options.strategy.localMomentum,
          .glu = options.strategy.glu,
          .cdThreshold = options.strategy.threshold,
          // --compensate is the pipeline stages' own under --pipeline (pipeline_setup.h), the
          // servers' otherwise.
          .compensate = options.pipeline.stages > 0 ? "none" : options.pipeline.compensate,
          .seed = options.seed,
          .localBatch = static_cast<int64_t>(options.batchSize)};
}

namespace {

constexpr const char* kEmulatePrefix = "emulate:";
// With emulated compute, the synthetic placeholder set holds this many global batches.
constexpr size_t kEmulatedStepsPerEpoch = 256;

}  // namespace

bool emulatesCompute(const TrainOptions& options) {
  if (options.compute == "real") return false;
  if (options.compute.starts_with(kEmulatePrefix) &&
      options.compute.size() > std::strlen(kEmulatePrefix)) {
    return true;
  }
  throw ConfigError(fmt::format("unknown --compute '{}'", options.compute),
                    {.hint = fmt::format("choose real or emulate:PROFILE (PROFILE: {}, or the "
                                         "JSON file of `gradsync profile`)",
                                         fmt::join(builtinProfileNames(), ", "))});
}

ModelProfile emulatedProfile(const TrainOptions& options) {
  GS_CHECK(emulatesCompute(options));
  ModelProfile profile = loadModelProfile(options.compute.substr(std::strlen(kEmulatePrefix)));
  scaleComputeTimes(profile, options.computeScale);
  if (profile.batchSize < 1) {
    throw ConfigError(fmt::format("profile {} has batch size {}", profile.name, profile.batchSize),
                      {.operation = "emulated compute", .hint = "a profile needs batch_size >= 1"});
  }
  return profile;
}

TrainOptions resolveCompute(TrainOptions options, int workers) {
  if (!emulatesCompute(options)) return options;
  options.batchSize = static_cast<size_t>(emulatedProfile(options).batchSize);
  options.dataset = "synthetic";
  const size_t perEpoch = options.batchSize * static_cast<size_t>(std::max(workers, 1));
  options.syntheticSamples = std::max(options.syntheticSamples, perEpoch * kEmulatedStepsPerEpoch);
  return options;
}

std::vector<TensorShape> describeTrainingModel(const TrainOptions& options) {
  if (emulatesCompute(options)) return emulatedProfile(options).tensors();
  return describeModel(options.model);
}

double injectedSlowdownMs(const std::string& spec, int rank) {
  if (spec.empty()) return 0;
  int slowRank = -1;
  double ms = -1;
  char colon = 0;
  std::istringstream in(spec);
  if (!(in >> slowRank >> colon >> ms) || colon != ':' || !in.eof() || slowRank < 0 || ms < 0) {
    throw ConfigError(fmt::format("--inject-slow-rank '{}' is not RANK:MS", spec),
                      {.hint = "e.g. 2:30 adds 30 ms to rank 2's compute every step"});
  }
  return slowRank == rank ? ms : 0;
}

namespace {

// --data-url and its companions (torch/remote_data_source.h).
void validateDataUrl(const TrainOptions& options) {
  if (options.dataUrl.empty()) return;
  if (!options.dataUrl.starts_with("http://") && !options.dataUrl.starts_with("https://")) {
    throw ConfigError(
        fmt::format("--data-url '{}' is not an http:// or https:// URL", options.dataUrl));
  }
  if (options.dataset != "fashion-mnist") {
    throw ConfigError(
        fmt::format("--data-url serves image shards: it replaces --dataset fashion-mnist, not {}",
                    options.dataset));
  }
  if (options.pipeline.stages > 1 || !options.elastic.empty()) {
    throw ConfigError("--data-url is not supported with --pipeline or --elastic",
                      {.hint = "they read the dataset from --data-dir"});
  }
  if (!(options.cacheMemoryMiB >= 0)) throw ConfigError("--cache-memory must be >= 0 MiB");
}

// Flags that only --pipeline reads are refused without it, rather than silently ignored.
void validatePipelineOnlyFlags(const TrainOptions& options) {
  const PipelineOptions& p = options.pipeline;
  if (p.lwpBackward && (!p.enabled() || p.compensate.find("lwp") == std::string::npos)) {
    throw ConfigError("--lwp-backward needs --pipeline with --compensate lwp or sc+lwp",
                      {.hint = "under asgd and ssp:S, lwp already runs the forward and the "
                               "backward on the predicted weights"});
  }
  if (p.enabled()) return;
  const std::pair<bool, const char*> pipelineOnly[] = {
      {p.weightStash, "--weight-stash"},
      {p.microBatches != 1, "--micro-batches"},
      {!p.stageLayers.empty(), "--stage-layers"},
      {!p.stageProfile.empty(), "--stage-profile"},
      {p.emulate, "--pipeline-emulate"},
      {p.referenceBatch > 0, "--reference-batch"},
      {p.mode != PipelineOptions{}.mode, "--pipeline-mode"},
      {p.pinDevices, "--pin-devices"},
      {p.wavePlacement != PipelineOptions{}.wavePlacement, "--wave-placement"}};
  for (const auto& [given, flag] : pipelineOnly) {
    if (given) throw ConfigError(fmt::format("{} applies to --pipeline S only", flag));
  }
}

}  // namespace

TrainOptions withResolvedWarmup(TrainOptions options, size_t stepsPerEpoch) {
  options.compression = resolveAutoWarmups(options.compression, stepsPerEpoch);
  return options;
}

void validateTrainOptions(const TrainOptions& options) {
  if (!emulatesCompute(options)) {
    makeModel(options.model);  // throws with the valid names
  } else if (!(options.computeScale > 0)) {
    throw ConfigError(
        fmt::format("--compute-scale must be positive, not {}", options.computeScale));
  }
  injectedSlowdownMs(options.injectSlowRank, -1);
  resolveWarmupSteps(options.compression, 0);  // throws for a negative count
  validateSync(syncOptionsOf(options), describeTrainingModel(options));
  if (options.dataset != "fashion-mnist" && options.dataset != "synthetic") {
    throw ConfigError(fmt::format("unknown dataset '{}'", options.dataset),
                      {.hint = "choose fashion-mnist or synthetic"});
  }
  validateDataUrl(options);
  validatePipelineOnlyFlags(options);
  if (options.batchSize == 0) throw ConfigError("--batch-size must be at least 1");
  if (options.epochs < 1 && options.steps <= 0) throw ConfigError("--epochs must be at least 1");
  if (options.threads < 1) throw ConfigError("--threads must be at least 1");
  if (options.evalEvery < 0) throw ConfigError("--eval-every must be >= 0");
  if (options.lr <= 0) throw ConfigError("--lr must be positive");
  if (options.momentum < 0 || options.momentum >= 1)
    throw ConfigError("--momentum must be in [0, 1)");
  if (options.lars < 0) throw ConfigError("--lars must be >= 0");
  if (options.lars > 0 && updatesInEngine(syncOptionsOf(options))) {
    throw ConfigError(
        fmt::format("--lars does not apply with --schedule {} --sync {}{}", options.schedule,
                    options.sync, options.strategy.ps ? " --ps" : ""),
        {.hint = "there the engine or the servers apply plain SGD; LARS needs the "
                 "optimizer to step: --schedule fifo|wfbp|fusion with ring ssgd "
                 "or localsgd"});
  }
  validateWaveOptions(options);
}

// --threads bounds every compute pool of the rank. torch::set_num_threads sets ATen's OpenMP
// pool but not OpenBLAS's own pthread pool (Debian's LibTorch calls BLAS through libblas.so.3,
// OpenBLAS with libopenblas0-pthread), which would otherwise run (and spin) one thread per core
// in every rank. Looked up at run time, so nothing depends on which BLAS is installed.
void limitComputeThreads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto setBlasThreads =
          reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    setBlasThreads(threads);
  }
}

// Communication overlapping compute must not wait for a core: on a host where the ranks' compute
// keeps every core busy (CPU training), a communication thread that wakes for its next segment
// otherwise queues behind compute and the link idles. The training thread alone (Linux nice is
// per thread) gives way; the engine's and the transport's threads, which sleep on I/O most of
// the time, keep the default priority. Idle cores (GPU training) make this a no-op.
void yieldToCommunication() {
  constexpr int kComputeNice = 10;
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kComputeNice) != 0) {
    GS_LOG(kDebug, "could not lower the training thread's priority: {}", std::strerror(errno));
  }
}

}  // namespace gradsync
