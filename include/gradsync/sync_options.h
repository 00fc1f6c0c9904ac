// SyncOptions: how a DistributedOptimizer synchronizes, in the spec strings of `gradsync
// train`'s flags (docs/cli.md gives every method and option). Torch-free: plain values, parsed
// and validated when a DistributedOptimizer is built (ConfigError naming the bad spec).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gradsync {

// How gradients are synchronized: the spec strings of `gradsync train`'s flags (docs/cli.md).
struct SyncOptions {
  // fifo | wfbp | fusion[:MB] | p3[:slice=N,window=W] (--schedule), or auto[:tune=p3|fusion,
  // steps=N]: p3's slice and window (or fusion's bucket) tuned from the first steps' times, then
  // fixed (DistributedOptimizer::schedule() says the choice); dense ring runs with SGD in the
  // engine only (ConfigError else).
  std::string schedule = "wfbp";
  // none | fp16 | int8 | topk:D | mstopk:D | hitopk:D | gtopk:D | dgc:D | randomk:D | qsgd:L |
  // rtn:B | sparseloco:D | terngrad | twobit:T | onebit | signsgd | powersgd:R | gradiveq:R, each
  // with ,ef=on|off and ,ef_decay=β where error feedback applies (--compress).
  std::string compress = "none";
  std::vector<std::string> compressOverrides;  // GLOB=SPEC by parameter name, first match wins
  size_t compressMinElements = 1024;           // smaller tensors go dense
  int64_t compressWarmup = 0;                  // dense steps before compressing
  // How those steps send what is compressed after them (--compress-warmup-codec): "none"
  // (float32), or the near-lossless "fp16" or "int8" ring all-reduces. ConfigError otherwise.
  std::string compressWarmupCodec = "none";
  // 1-bit Adam (--compress-momentum; docs/algorithms.md, "Compression under Adam"): with an Adam
  // or AdamW optimizer, the dense warm-up (compressWarmup >= 1 steps) is plain Adam; from then on
  // the second moment is frozen and what the engine compresses (with its error feedback) and
  // averages is each rank's momentum, which step() applies over the frozen second moment (in
  // gradient mode) or the engine applies slice by slice (p3). ConfigError without compression,
  // with another optimizer, with localsgd or diloco, sharded or parameter servers.
  bool compressMomentum = false;
  // The compression guardrail (--guard on|off; docs/algorithms.md): a compressed unit whose
  // error-feedback residual or sent bursts grow past documented thresholds goes dense for the
  // rest of the run, logged and listed in DistributedOptimizer::guardEvents(). Over the ring;
  // costs one small allgather every 10 steps when something is compressed, nothing otherwise.
  bool guard = true;
  // ssgd (averaged gradients) | sharded[:fc=reduce|exchange|auto] (Lee et al.: reduce-scatter,
  // update 1/P, allgather; fc=: their exchange of fully-connected layers' activations and errors,
  // for gradsync's own models) | localsgd:H (local steps, models averaged every H) |
  // diloco:H[,outer_lr=X,outer_momentum=M,nesterov=on|off,quantize=int8|none,fragments=P,
  // delay=T,alpha=A,eager=on|off,group=rank|host] (H local steps of any optimizer, then an outer
  // Nesterov step on the averaged pseudo-gradient; fragments, delay and alpha: Streaming DiLoCo;
  // eager: the outer step one turn late, overlapping its all-reduce; group=host: a
  // host's ranks, by the transport's topology, are one worker, averaging their gradients every
  // step; docs/algorithms.md) | asgd |
  // ssp:S | odsgd | ssdsgd:K | cdsgd:K (through parameter servers; docs/algorithms.md) (--sync).
  std::string sync = "ssgd";
  // ssgd through parameter servers co-located with the workers (server s is a thread of rank s)
  // instead of the ring (--ps); asgd, ssp and the delayed strategies always use them.
  bool parameterServers = false;
  // Separate parameter-server ranks instead (--servers K): the last K ranks of the transport
  // serve (DistributedOptimizer::serve) and the others train. 0: servers are co-located.
  int servers = 0;
  // The delayed strategies' knobs, as gradsync train's flags of the same names.
  int64_t delayWarmup = -1;   // --delay-warmup: plain ssgd steps first (-1: the paper's)
  double localLr = 0;         // --local-lr: their local step's learning rate (0: the optimizer's)
  double localMomentum = -1;  // --local-momentum: its momentum (-1: the optimizer's)
  double glu = 0.5;           // --glu: ssdsgd's weight of the global direction
  double cdThreshold = 0.5;   // --cd-threshold: cdsgd's 2-bit quantization threshold
  // asgd, ssp: none | sc | lwp | sc+lwp. sc: each push's update is Spike Compensation's SC_D,
  // D the push's staleness as its server measures it; lwp: each worker trains on the weights
  // predicted over its units' staleness (docs/algorithms.md; --compensate).
  std::string compensate = "none";
  // The same on every rank: stochastic compressors draw from it.
  uint64_t seed = 0;
  // Rows of a fully-connected layer's input per rank and step (the batch per rank): what
  // sharded:fc=auto weighs against the layer's size. 0: unknown (fc=auto refuses to guess).
  int64_t localBatch = 0;
  // Gradient accumulation (Horovod's backward_passes_per_step): each step runs this many
  // backward passes; each parameter's gradients are summed locally and communicated once, as its
  // last pass produces it (or at step() for one a pass skipped). The average over the ranks of
  // those sums is what step() applies, as one process accumulating in .grad would.
  int backwardPassesPerStep = 1;
  // Ranks may run out of data at different steps (DistributedOptimizer::join). Costs one small
  // allreduce per step (how many ranks still have data); ring ssgd in gradient mode only.
  bool join = false;
};

}  // namespace gradsync
