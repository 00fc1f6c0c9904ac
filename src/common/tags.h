// Every message stream gradsync opens on a transport, numbered in this one place: a new stream
// takes the next free number. All lie at or above kReservedTagBase (gradsync/collectives.h), so
// an application's own collectives (smaller tags, default 0) never meet them. Streams that may
// run at the same time need distinct tags; a collective uses its tag for all of its messages.
#pragma once

#include <cstdint>

#include "gradsync/collectives.h"
#include "gradsync/gradient_averager.h"

namespace gradsync::tags {

// The gradient engine's communication thread: allreduce, reduce-scatter and allgather of the
// gradient units, and every compressor's exchange.
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
// GradientAverager's default stream (public as kAveragerTag: a user picks another for a second
// averager running at the same time).
inline constexpr uint64_t kAverager = kAveragerTag;
static_assert(kAverager == kReservedTagBase + 11);

}  // namespace gradsync::tags
