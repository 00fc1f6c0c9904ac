// Every message stream gradsync opens on a transport, numbered in this one place: a new stream
// takes the next free number. All lie at or above kReservedTagBase (gradsync/collectives.h), so
// an application's own collectives (smaller tags, default 0) never meet them. Streams that may
// run at the same time need distinct tags; a collective uses its tag for all of its messages.
#pragma once

#include <cstdint>
#include <iterator>

#include "gradsync/collectives.h"
#include "gradsync/gradient_averager.h"

namespace gradsync::tags {

// Retired: the gradient engine's one stream before each unit had its own (kGradientUnits, below).
// The number stays taken so that no later stream reuses it.
inline constexpr uint64_t kGradients = kReservedTagBase + 0;
// DistributedModel on the training thread: broadcast and averaging of parameters and buffers.
inline constexpr uint64_t kModelState = kReservedTagBase + 1;
// The trainer's metrics (loss and accuracy sums, traces, checkpoint sums).
inline constexpr uint64_t kTrainer = kReservedTagBase + 2;
// p3: rank 0's picks of the next slice, sent to the others.
inline constexpr uint64_t kP3Decision = kReservedTagBase + 3;
// The engine's velocity gathered for checkpoints (sharded).
inline constexpr uint64_t kVelocity = kReservedTagBase + 4;
// Parameter servers: requests, their payloads, and state transfers.
inline constexpr uint64_t kPsRequest = kReservedTagBase + 5;
inline constexpr uint64_t kPsPayload = kReservedTagBase + 6;
inline constexpr uint64_t kPsState = kReservedTagBase + 7;
// A server's replies for unit u travel on kPsReplies + u (one stream per unit).
inline constexpr uint64_t kPsReplies = kReservedTagBase + (uint64_t{1} << 32);
// Startup agreement of every rank's settings (checkSameSettings).
inline constexpr uint64_t kAgreement = kReservedTagBase + 8;
// The public tensor API's own collectives (broadcastParameters, broadcastOptimizerState).
inline constexpr uint64_t kTorchApi = kReservedTagBase + 9;
// DistributedOptimizer's join: each step, how many ranks still have data.
inline constexpr uint64_t kJoin = kReservedTagBase + 10;
// Embedding servers (ps/embedding_protocol.h), on each server's own star transport: requests,
// their payloads, answers and theirs.
inline constexpr uint64_t kEmbRequest = kReservedTagBase + 11;
inline constexpr uint64_t kEmbPayload = kReservedTagBase + 12;
inline constexpr uint64_t kEmbReply = kReservedTagBase + 13;
inline constexpr uint64_t kEmbReplyPayload = kReservedTagBase + 14;
// The recommendation trainer's per-step agreement (which servers failed, whether to stop).
inline constexpr uint64_t kRecStatus = kReservedTagBase + 15;
// Pipeline stages (torch/pipeline/wire.h): activations forward, their gradients backward, and
// the activations of evaluation batches, each a header then the tensor's floats.
inline constexpr uint64_t kPipelineActivations = kReservedTagBase + 20;
inline constexpr uint64_t kPipelineGradients = kReservedTagBase + 21;
inline constexpr uint64_t kPipelineEval = kReservedTagBase + 22;
// The ring executor's collectives for unit u travel on kGradientUnits + u (one stream per unit),
// so that p3's committed slices can be in flight at once.
inline constexpr uint64_t kGradientUnits = kReservedTagBase + (uint64_t{2} << 32);
// sharded's fully-connected exchange (sync/fc_exchange.h): linear layer l's activations travel
// on kFcExchange + 2l, its output errors on kFcExchange + 2l + 1 (the training thread's).
inline constexpr uint64_t kFcExchange = kReservedTagBase + (uint64_t{3} << 32);
// GradientAverager's default stream. It is public (gradsync/gradient_averager.h, kAveragerTag)
// so that a user can pick another tag for a second averager; its number is given there and
// registered here.
inline constexpr uint64_t kAverager = kAveragerTag;
static_assert(kAverager == kReservedTagBase + 16);

// The compression guard's per-window agreement (compress/guard.h), on the training thread.
inline constexpr uint64_t kGuard = kReservedTagBase + 17;

// An elastic round's state bytes, rank 0's to a member that lacks them (torch/elastic/state.h):
// apart from kModelState so that the member can post its receive before the small collectives
// on kModelState that come first.
inline constexpr uint64_t kElasticState = kReservedTagBase + 18;

// localsgd's and diloco's outer step (torch/api/outer_optimizer.h): a stream of its own, since
// Streaming DiLoCo's delayed all-reduce runs on a thread of its own while the training thread's
// collectives (buffers averaged for an evaluation, an elastic round's checks) go on.
inline constexpr uint64_t kOuterStep = kReservedTagBase + 19;

// Wavelet's waves (torch/waves/wavelet_trainer.h): wave w's streams are every stream above shifted
// by (w + 1) * kWaveShift (transport/tag_shift_transport.h), above all per-unit ranges, so that two
// waves' engines on one transport never meet each other or the unshifted streams.
inline constexpr uint64_t kWaveShift = uint64_t{1} << 40;
static_assert(kFcExchange + (uint64_t{1} << 32) <= kReservedTagBase + kWaveShift);

// Every single stream above, once: a new stream is added here too, and the check below refuses a
// number taken twice. The per-unit ranges (kPsReplies + u, kGradientUnits + u, kFcExchange + u)
// each span 2^32 numbers from their bases, above all the others and apart from each other.
inline constexpr uint64_t kAll[] = {
    kGradients, kModelState,          kTrainer,           kP3Decision,   kVelocity,
    kPsRequest, kPsPayload,           kPsState,           kAgreement,    kTorchApi,
    kJoin,      kEmbRequest,          kEmbPayload,        kEmbReply,     kEmbReplyPayload,
    kRecStatus, kPipelineActivations, kPipelineGradients, kPipelineEval, kAverager,
    kGuard,     kElasticState,        kOuterStep};

constexpr bool allDistinct() {
  for (size_t i = 0; i < std::size(kAll); ++i) {
    for (size_t j = i + 1; j < std::size(kAll); ++j) {
      if (kAll[i] == kAll[j]) return false;
    }
    if (kAll[i] >= kPsReplies) return false;
  }
  return true;
}
static_assert(allDistinct(), "two gradsync streams share a tag: take the next free number");
static_assert(kGradientUnits - kPsReplies == (uint64_t{1} << 32) &&
              kFcExchange - kGradientUnits == (uint64_t{1} << 32));

}  // namespace gradsync::tags
