#include "collectives/ring.h"

#include <algorithm>

#include "collectives/reduce.h"
#include "common/check.h"

namespace gradsync::ring {

std::vector<Span> layout(const std::vector<size_t>& blockBytes) {
  std::vector<Span> spans;
  spans.reserve(blockBytes.size());
  size_t offset = 0;
  for (size_t bytes : blockBytes) {
    spans.push_back({offset, bytes});
    offset += bytes;
  }
  return spans;
}

void appendPass(std::vector<Step>& steps, const std::vector<Span>& blocks, int rank, int shift,
                bool reduce) {
  int n = static_cast<int>(blocks.size());
  auto block = [&](int index) { return blocks[((index % n) + n) % n]; };
  for (int s = 0; s < n - 1; ++s) {
    steps.push_back({block(rank - shift - s), block(rank - shift - s - 1), reduce});
  }
}

namespace {

// Staging memory for reduced receives, kept per thread across calls. Freshly allocated buffers
// of tens of MiB would be returned to the kernel and page-faulted back on every call (about 10 ms
// per 32 MiB here: the slowdown Open MPI shows at >= 32 MiB on this machine). Per thread, so
// concurrent collectives on different threads never share it; it only grows.
uint8_t* stagingMemory(size_t bytes) {
  thread_local std::vector<uint8_t> memory;
  if (memory.size() < bytes) {
    memory.clear();
    memory.shrink_to_fit();
    memory.resize(bytes);
  }
  return memory.data();
}

// Per-run state: the segmentation and the two staging buffers for reduced receives.
class Pipeline {
 public:
  Pipeline(Transport& transport, uint8_t* data, const std::vector<Step>& steps,
           const CollectiveOptions& options, const Reduction& reduction)
      : transport_(transport),
        data_(data),
        steps_(steps),
        tag_(options.tag),
        reduction_(reduction),
        segment_(std::max<size_t>(
            reduction.elementBytes,
            options.segmentBytes / reduction.elementBytes * reduction.elementBytes)),
        right_((transport.rank() + 1) % transport.size()),
        left_((transport.rank() + transport.size() - 1) % transport.size()) {
    size_t staging = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      if (!steps[s].reduce) continue;
      staging = std::max(staging, steps[s].recv.bytes);
      lastReduce_ = s;
    }
    uint8_t* memory = stagingMemory(2 * staging);
    staging_[0] = memory;
    staging_[1] = memory + staging;
  }

  void run() {
    std::vector<WorkPtr> sends = postSends(0, segments(steps_[0].send.bytes));
    std::vector<WorkPtr> recvs = postRecvs(0);
    for (size_t s = 0; s < steps_.size(); ++s) {
      std::vector<WorkPtr> nextRecvs =
          s + 1 < steps_.size() ? postRecvs(s + 1) : std::vector<WorkPtr>{};
      std::vector<WorkPtr> nextSends;
      for (size_t k = 0; k < recvs.size(); ++k) {
        recvs[k]->wait();
        if (steps_[s].reduce) reduceSegment(s, k);
        if (s + 1 < steps_.size()) {
          GS_CHECK_EQ(steps_[s + 1].send.offset, steps_[s].recv.offset);
          nextSends.push_back(sendSegment(s + 1, k));
        }
      }
      for (auto& work : sends) work->wait();
      sends = std::move(nextSends);
      recvs = std::move(nextRecvs);
    }
    for (auto& work : sends) work->wait();
  }

 private:
  size_t segments(size_t bytes) const { return (bytes + segment_ - 1) / segment_; }
  size_t segmentBytes(size_t total, size_t k) const {
    return std::min(segment_, total - k * segment_);
  }

  WorkPtr sendSegment(size_t s, size_t k) {
    const Span& span = steps_[s].send;
    return transport_.send(right_, tag_, data_ + span.offset + k * segment_,
                           segmentBytes(span.bytes, k));
  }

  std::vector<WorkPtr> postSends(size_t s, size_t count) {
    std::vector<WorkPtr> works;
    for (size_t k = 0; k < count; ++k) works.push_back(sendSegment(s, k));
    return works;
  }

  std::vector<WorkPtr> postRecvs(size_t s) {
    const Step& step = steps_[s];
    uint8_t* base = step.reduce ? staging_[s % 2] : data_ + step.recv.offset;
    std::vector<WorkPtr> works;
    for (size_t k = 0; k < segments(step.recv.bytes); ++k) {
      works.push_back(
          transport_.recv(left_, tag_, base + k * segment_, segmentBytes(step.recv.bytes, k)));
    }
    return works;
  }

  void reduceSegment(size_t s, size_t k) {
    const Span& span = steps_[s].recv;
    size_t bytes = segmentBytes(span.bytes, k);
    uint8_t* dst = data_ + span.offset + k * segment_;
    const uint8_t* src = staging_[s % 2] + k * segment_;
    if (reduction_.add != nullptr) {
      reduction_.add(dst, src, bytes);
    } else if (s == lastReduce_ && reduction_.finalFactor != 1.0f) {
      addIntoScaled(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src),
                    bytes / sizeof(float), reduction_.finalFactor);
    } else {
      addInto(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src),
              bytes / sizeof(float));
    }
  }

  Transport& transport_;
  uint8_t* data_;
  const std::vector<Step>& steps_;
  const uint64_t tag_;
  const Reduction reduction_;
  const size_t segment_;
  const int right_;
  const int left_;
  uint8_t* staging_[2];           // two halves of stagingMemory(): even and odd steps
  size_t lastReduce_ = SIZE_MAX;  // the last reducing step (where finalFactor applies)
};

}  // namespace

void run(Transport& transport, uint8_t* data, const std::vector<Step>& steps,
         const CollectiveOptions& options, const Reduction& reduction) {
  if (steps.empty()) return;
  Pipeline(transport, data, steps, options, reduction).run();
}

}  // namespace gradsync::ring
