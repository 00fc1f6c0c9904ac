// The process-level setup every trainer shares (torch/loop/options.h): the options turned into
// the public SyncOptions, emulated compute, and the compute threads' budget and priority.
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
#include "sync/strategy.h"
#include "torch/api/sync_setup.h"
#include "torch/loop/options.h"
#include "torch/models/gpt_config.h"
#include "torch/models/models.h"

namespace gradsync {

SyncOptions syncOptionsOf(const TrainOptions& options) {
  return {.schedule = options.schedule,
          .compress = options.compression.spec,
          .compressOverrides = options.compression.overrides,
          .compressMinElements = options.compression.minElements,
          // kAutoWarmup counts only where a trainer resolved it with its epoch
          // (withResolvedWarmup); before that (validation, the servers) no step is dense.
          .compressWarmup = std::max<int64_t>(options.compression.warmupSteps, 0),
          .compressWarmupCodec = options.compression.warmupCodec,
          .compressMomentum = options.compression.momentum,
          .guard = options.compression.guard,
          .sync = options.sync,
          .parameterServers = options.strategy.ps,
          .servers = options.strategy.servers,
          .delayWarmup = options.strategy.warmup,
          .localLr = options.strategy.localLr,
          .localMomentum = options.strategy.localMomentum,
          .glu = options.strategy.glu,
          .cdThreshold = options.strategy.threshold,
          // --compensate is the pipeline stages' own under --pipeline (torch/pipeline/setup.h), the
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

void rethrowNamingServer(const PeerLostError& lost, const TrainOptions& options, int worldSize) {
  // A worker that lost the server first relays it: its peers' errors name it as the origin.
  const int peer = failureOrigin(lost);
  if (peer < 0 || !isServerRank(options, peer, worldSize)) throw lost;
  const int server = peer - (worldSize - options.strategy.servers);
  const std::string name = fmt::format("parameter server {} (rank {})", server, peer);
  if (lost.detail().find(name) != std::string::npos) throw lost;  // the servers' client said it
  throw PeerLostError(fmt::format("lost {}: {}", name, lost.detail()), lost.context());
}

TrainOptions withModelDefaults(TrainOptions options,
                               const std::function<bool(const std::string& flag)>& given) {
  if (gptContextOf(options.model) == 0) return options;
  if (!given("--dataset")) options.dataset = "text";
  if (!given("--optimizer")) options.optimizer = "adamw";
  if (!given("--lr")) options.lr = 0.003;
  if (!given("--warmup-steps")) options.warmupSteps = 50;
  if (!given("--lr-schedule")) options.lrSchedule = "cosine";
  if (!given("--clip-grad-norm")) options.clipGradNorm = 1;
  return options;
}

TrainOptions withResolvedWarmup(TrainOptions options, size_t stepsPerEpoch) {
  options.compression = resolveAutoWarmups(options.compression, stepsPerEpoch);
  // diloco compresses pseudo-gradients from the first outer step: no dense warm-up to report.
  if (SyncStrategy::parse(options.sync).kind == SyncStrategy::Kind::kLocalSgd) {
    options.compression.warmupSteps = 0;
  }
  return options;
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
