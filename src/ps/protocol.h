// The parameter server's wire protocol and placement (docs/algorithms.md, "Parameter server").
//
// Workers are ranks [0, workers) of the transport. Servers are either threads inside the first
// `servers` worker processes (co-located: server s is rank s) or ranks [workers,
// workers + servers) of their own (separate `gradsync train --servers K` processes). A model's
// communication units (schedule/: tensors, fusion buckets or P3 slices) are spread over the
// servers round-robin by unit index, as P3 spreads its slices.
//
// Every request a worker sends a server is a PsHeader on tags::kPsRequest followed, when
// payloadBytes > 0, by its payload on tags::kPsPayload; one worker's requests are handled in the
// order it sent them. A push that wants a reply is answered with the unit's updated parameters on
// psReplyTag(unit): push and pull fused, as in P3. kGetState is answered on tags::kPsState.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tags.h"

namespace gradsync {

struct PsPlacement {
  int workers = 1;
  int servers = 1;
  bool colocated = true;  // servers <= workers then

  int serverRank(int server) const { return colocated ? server : workers + server; }
  int serverOf(size_t unit) const { return static_cast<int>(unit % static_cast<size_t>(servers)); }
  int worldSize() const { return colocated ? workers : workers + servers; }
};

enum class PsRequest : uint32_t {
  kPush = 1,      // payload: the unit's gradient (dense floats, kQuantized or kEncoded codes)
  kSetState = 2,  // payload: the unit's parameters, then its velocity (2 x elements floats)
  kGetState = 3,  // answered with the unit's parameters, then its velocity, on tags::kPsState
  kStop = 4,      // this worker sends nothing more
};

enum PsFlags : uint32_t {
  kWantReply = 1,  // kPush: answer with the updated parameters
  kQuantized = 2,  // kPush: payload is 2-bit codes of {0, +threshold, -threshold}
  kEncoded = 4,    // kPush: payload is the unit's PushCodec encoding (compress/push_codec.h)
};

struct PsHeader {
  PsRequest request = PsRequest::kPush;
  uint32_t unit = 0;
  uint64_t step = 0;    // the worker's step (kPush)
  float lr = 0;         // the learning rate of this step (kPush)
  float threshold = 0;  // kQuantized
  uint32_t flags = 0;   // PsFlags
  uint32_t payloadBytes = 0;
  uint64_t seed = 0;  // kEncoded: the seed the push was encoded with
};

// Follows each reply to a push under the asynchronous and stale-synchronous modes (asgd, ssp),
// on the same reply tag.
struct PsStaleness {
  // Updates other workers' pushes applied to the unit between the worker's last reply of it
  // (the parameters its gradient was computed on) and this push's own update.
  uint64_t staleness = 0;
  // Updates applied to the unit in the parameters this reply carries (the server's count since
  // it started): the difference between two replies to one worker is the number of updates
  // between them, which a worker's weight prediction divides by (ps/weight_prediction.h).
  uint64_t updates = 0;
};

inline uint64_t psReplyTag(size_t unit) {
  return tags::kPsReplies + unit;
}

}  // namespace gradsync
