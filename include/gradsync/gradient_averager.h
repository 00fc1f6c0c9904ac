// GradientAverager: averages gradients across the ranks of a transport with gradsync's
// compressors, one bucket of tensors at a time, for training loops that run their own backward
// and bucketing: PyTorch DDP's communication hook (python/gradsync, gs.ddp_comm_hook) is one.
// Each tensor is compressed as DistributedOptimizer's engine compresses it under the wfbp
// schedule (the same method, options, per-tensor state and seeds), so both give the same
// averages; the tensors a bucket leaves dense travel together in one ring allreduce.
//
//   gradsync::GradientAverager averager(context.transport(), {{"fc.weight", {512, 784}},
//                                                             {"fc.bias", {512}}},
//                                       {.compress = "powersgd:4"});
//   averager.average({0, 1}, bucket, step);   // bucket: fc.weight's gradient, then fc.bias's
//
// Torch-free (plain float spans); part of gradsync::core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gradsync/collectives.h"
#include "gradsync/transport.h"

namespace gradsync {

// The message stream a GradientAverager uses unless told otherwise: one of gradsync's reserved
// tags, apart from the application's collectives and from a DistributedOptimizer's engine. Its
// number is registered with gradsync's other streams in src/common/tags.h, which checks at compile
// time that no two of them are equal.
inline constexpr uint64_t kAveragerTag = kReservedTagBase + 16;

// One tensor an averager may be asked to average: its name (compressOverrides match it; the
// stochastic compressors' seeds depend on it) and its shape (PowerSGD and GradiVeQ see a matrix).
struct GradientShape {
  std::string name;
  std::vector<int64_t> dims;
};

struct AveragerOptions {
  // The compression of SyncOptions (gradsync/sync_options.h), with the same meanings.
  std::string compress = "none";
  std::vector<std::string> compressOverrides;  // GLOB=SPEC by tensor name, first match wins
  size_t compressMinElements = 1024;           // smaller tensors go dense
  int64_t compressWarmup = 0;                  // dense steps before compressing
  uint64_t seed = 0;                           // the same on every rank
  // The momentum a compressor that applies it itself uses (dgc's momentum correction): the
  // optimizer's, which must then not apply momentum to those tensors.
  double momentum = 0;
  // Message stream; averagers running at the same time on one transport need distinct tags.
  uint64_t tag = kAveragerTag;
};

// What averaging has cost on this rank so far.
struct AveragerStats {
  uint64_t bytesSent = 0;   // what this rank sent for the gradients
  uint64_t denseBytes = 0;  // what dense ring allreduces of the same tensors would have sent
  double commSeconds = 0;   // time spent in average()
  double encodeSeconds = 0;
  double decodeSeconds = 0;
};

// Not thread-safe: one thread calls every method (a DDP hook's: any one thread at a time).
// Keeps `transport` by reference: it must outlive the averager.
class GradientAverager {
 public:
  // `tensors` are every tensor that average() may be given, by index (e.g. a model's parameters
  // in order). Throws ConfigError for a bad compression spec or override, naming it and listing
  // the choices, before any communication.
  GradientAverager(Transport& transport, std::vector<GradientShape> tensors,
                   AveragerOptions options = {});
  ~GradientAverager();
  GradientAverager(const GradientAverager&) = delete;
  GradientAverager& operator=(const GradientAverager&) = delete;

  // Averages, in place, the tensors `indices` laid out back to back in `bucket` (whose size
  // must be the sum of theirs: ConfigError otherwise). `step` is the global training step
  // (compression warm-up, seeds). Blocking and collective: every rank calls it with the same
  // indices and step, for the same buckets in the same order. Throws the transport's errors
  // (PeerLostError, TimeoutError naming the rank) and ProtocolError on a malformed encoding.
  void average(std::span<const int> indices, std::span<float> bucket, uint64_t step);

  // The method tensor `index` is compressed with ("none": dense).
  std::string method(int index) const;
  AveragerStats stats() const;

  // The compressors' state (error-feedback residuals, PowerSGD's Q, DGC's velocity, ...), this
  // rank's own, for checkpoints; loadState() restores it into an averager of the same tensors and
  // options before its first average() (DataError, saying what differs, otherwise), after which
  // the averages repeat the uninterrupted run's bitwise.
  std::vector<uint8_t> saveState() const;
  void loadState(std::span<const uint8_t> state);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
