// --sync: how the workers' gradients become their next parameters (docs/cli.md, "--sync").
//   ssgd        synchronous SGD: ring allreduce among the workers, or through parameter servers
//               (--ps: co-located with the workers; --servers K: K processes of their own)
//   sharded     Lee et al.: reduce-scatter, SGD on the owned block, allgather (no servers);
//               sharded:fc=exchange|auto also exchanges fully-connected layers' activations
//               and errors instead of reducing their weight gradients (fc_exchange.h);
//               sharded:concurrent=N runs up to N units' collectives at once (default 4;
//               options joined by commas: sharded:fc=auto,concurrent=2)
//   asgd        asynchronous SGD through parameter servers
//   ssp:S       stale-synchronous: no worker more than S steps ahead of the slowest
//   odsgd       OD-SGD; ssdsgd:K  SSD-SGD (pull every K steps); cdsgd:K  CD-SGD (2-bit pushes,
//               full precision every K-th step) — all through parameter servers
//   localsgd:H  local SGD, averaging the models every H steps (no servers)
//   diloco:H[,outer_lr=X,outer_momentum=M,nesterov=on|off,quantize=int8|none,fragments=P,
//            delay=T,alpha=A]  DiLoCo (Douillard et al. 2023):
//               H local steps of any optimizer, then an outer step on the averaged
//               pseudo-gradient (global - local) with Nesterov SGD, lr 0.7, momentum 0.9 by
//               default; localsgd:H is its case outer_lr=1, outer_momentum=0; fragments, delay
//               and alpha make it Streaming DiLoCo (torch/api/outer_optimizer.h)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "compress/policy.h"
#include "ps/push_plan.h"

namespace gradsync {

// sharded's fully-connected layers (sync/fc_exchange.h): their weight gradients reduce-scattered
// like every other tensor (reduce), computed from exchanged activations and errors (exchange), or
// whichever sends fewer bytes, layer by layer (auto).
enum class FcMode { kReduce, kExchange, kAuto };
const char* toString(FcMode mode);

// The outer step of localsgd and diloco, every H local steps (torch/api/outer_optimizer.h).
struct OuterOptions {
  double lr = 1;
  double momentum = 0;
  bool nesterov = false;
  // diloco's quantize=int8: the pseudo-gradients travel the int8 ring (allreduceInt8).
  bool int8 = false;
  // Streaming DiLoCo: fragments=P strided fragments synced in turn, one every H/P steps;
  // delay=τ local steps overlapping a fragment's all-reduce (τ < H/P); alpha=α, the local
  // fragment's share after its merge (default 0.5 with a delay, else 0: adopt the global one).
  int fragments = 1;
  int delay = 0;
  double alpha = 0;
  // eager=on: a fragment's all-reduce overlaps every step until the next fragment's turn (delay
  // = H/P: with P = 1, the whole next round), and its merge keeps the steps trained meanwhile
  // whole: the local fragment becomes θ_global + (θ_local − θ_local at the launch).
  bool eager = false;
  // group=host: the ranks of a host (the transport's topology) are one DiLoCo worker: they
  // average their gradients every step (dense, inside the host) and the outer step runs across
  // hosts; group=rank (false): every rank is a worker.
  bool perHost = false;
  // lr 1 without momentum: the outer step sets the global model to the workers' average.
  bool averagesModels() const { return lr == 1 && momentum == 0; }
  bool streams() const { return fragments > 1 || delay > 0 || eager; }
  // Whether a rank's parameters may differ from θ_global right after an outer update (fragments
  // not merged then, or the merge's mixing), not only between outer steps.
  bool keepsOwnAtMerges() const { return streams() || alpha != 0; }
};

struct SyncStrategy {
  enum class Kind { kSsgd, kSharded, kAsgd, kSsp, kOdsgd, kSsdsgd, kCdsgd, kLocalSgd };
  Kind kind = Kind::kSsgd;
  int parameter = 0;            // ssp's S, ssdsgd's and cdsgd's K, localsgd's and diloco's H
  FcMode fc = FcMode::kReduce;  // sharded:fc=reduce|exchange|auto
  int concurrent = 1;           // sharded:concurrent=N: operations in flight at once (4)
  // kLocalSgd (local steps, then an outer step every `parameter` steps): localsgd's average of
  // the models, or diloco's outer optimizer.
  OuterOptions outer;
  bool diloco = false;  // --sync diloco:H (its messages say diloco)

  // Throws ConfigError listing the valid forms.
  static SyncStrategy parse(const std::string& text);
  // asgd, ssp, odsgd, ssdsgd, cdsgd: only parameter servers can run them.
  bool needsServers() const { return kind >= Kind::kAsgd && kind <= Kind::kCdsgd; }
  bool delayed() const { return kind >= Kind::kOdsgd && kind <= Kind::kCdsgd; }
};

// The companions of --sync (each a flag of `gradsync train`).
struct StrategyKnobs {
  bool ps = false;            // --ps: ssgd through parameter servers co-located with the workers
  int servers = 0;            // --servers K: K separate server processes (ranks after the workers)
  int64_t warmup = -1;        // --delay-warmup: plain ssgd steps first (-1: the paper's)
  double localLr = 0;         // --local-lr: the delayed strategies' local step (0: --lr)
  double localMomentum = -1;  // --local-momentum: their local momentum (-1: --momentum)
  double glu = 0.5;           // --glu: ssdsgd's weight of the global direction
  double threshold = 0.5;     // --cd-threshold: cdsgd's 2-bit quantization threshold
  std::string compensate = "none";  // --compensate: asgd's and ssp's sc, lwp or sc+lwp
};

// The papers' warm-up lengths: OD-SGD 200, SSD-SGD 500, CD-SGD 1000 steps of plain SSGD.
int64_t paperWarmup(SyncStrategy::Kind kind);

// The parameter-server options for `workers` workers, or none when the strategy runs without
// servers. Throws ConfigError for a combination that cannot run (servers for localsgd or
// sharded, a negative knob, a compensation without asgd or ssp).
// Throws ConfigError when `compression` asks for compression that `strategy` cannot apply:
// localsgd exchanges whole models, cdsgd its own 2-bit codes (through parameter servers, which
// methods can push is planPushes's check), and a warm-up codec with nothing compressed.
// `syncText` is the --sync value as given, for the message.
void checkCompressionApplies(const SyncStrategy& strategy, const CompressionConfig& compression,
                             const std::string& syncText);

std::optional<PsOptions> psOptionsFor(const SyncStrategy& strategy, const StrategyKnobs& knobs,
                                      int workers, double lr, double momentum);

}  // namespace gradsync
