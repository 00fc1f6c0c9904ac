// Tensors between neighbouring pipeline stages: each message is a 64-byte header (the
// micro-batch, the number of dimensions, up to 6 sizes; little-endian int64) on the stream's tag,
// then, on the same tag, the tensor's float32 elements (row-major). The receiver checks that the
// micro-batch is the one it expects (ProtocolError otherwise: the stages disagree on the
// schedule). Includes torch headers: internal to src/torch. Not thread-safe (one stage thread).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <deque>

#include "gradsync/transport.h"

namespace gradsync {

class StageLinks {
 public:
  explicit StageLinks(Transport& transport) : transport_(transport) {}
  // Waits for the sends still on the wire (bounded by the transport's timeout).
  ~StageLinks();
  // Starts sending `tensor` (float32, at most 6 dimensions) as micro-batch `micro`; keeps it
  // alive until the send completes. Returns at once.
  void send(int peer, uint64_t tag, int64_t micro, const torch::Tensor& tensor);
  // The next tensor from `peer` on `tag`, which must be micro-batch `micro`. Blocks (bounded by
  // the transport's timeout); throws the transport's errors, ProtocolError for a malformed
  // header or another micro-batch. Adds the seconds it waited to `waited`.
  torch::Tensor receive(int peer, uint64_t tag, int64_t micro, double& waited);
  // Waits for every send to complete.
  void flush();

 private:
  struct Header {
    int64_t micro = 0;
    int64_t dims = 0;
    int64_t sizes[6] = {};
  };
  static_assert(sizeof(Header) == 64);
  struct InFlight {
    std::unique_ptr<Header> header;
    torch::Tensor tensor;
    WorkPtr headerWork, payloadWork;
  };
  void reap();

  Transport& transport_;
  std::deque<InFlight> sends_;
};

}  // namespace gradsync
