// Which gradients are communicated together, and when (a pure policy: no threads, no I/O).
//
//   fifo       one unit per tensor, started only once backward is over (no overlap: baseline)
//   wfbp       one unit per tensor, started as soon as its gradient is ready (wait-free backprop)
//   fusion:MB  tensors fused into buckets of at least MB mebibytes, each started when all of its
//              tensors are ready (Horovod / PyTorch DDP style)
//   p3         P3 (Jayarajan et al.): every tensor cut into slices of about `slice` elements,
//              sent by priority (the input layer's slices first) from a queue that lets a
//              later, more urgent slice overtake queued ones; at most `window` slices are
//              committed to the wire ahead of completion (priority_scheduler.h)
//
// Units are contiguous spans of the flat gradient buffer. Tensors are laid out in reverse
// registration order, the order in which backward produces their gradients, so units complete
// roughly in index order. fifo, wfbp and fusion communicate units in index order, on every rank
// alike, because collectives must be called in the same order everywhere; p3 communicates them
// in the order its scheduler picks on rank 0, which every rank follows.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "common/tensor_shape.h"

namespace gradsync {

struct ScheduleSpec {
  enum class Kind { kFifo, kWfbp, kFusion, kP3 };
  Kind kind = Kind::kWfbp;
  size_t fusionBytes = 25u << 20;  // for kFusion
  size_t sliceElements = 40'000;   // for kP3: P3's default slice bound
  bool sliceGiven = false;         // for kP3: slice= was stated (else a known link may set it)
  size_t window = 2;               // for kP3: slices committed ahead of completion
  // For kP3 over the ring: the committed slices' collectives run at once, each on its own stream
  // (true), or one after the other (false: concurrent=0).
  bool concurrent = true;

  // Parses "fifo", "wfbp", "fusion" (25 MB), "fusion:MB", "p3" or
  // "p3:slice=N,window=W,concurrent=0|1" (any of the keys, in any order); throws ConfigError
  // listing the valid forms.
  static ScheduleSpec parse(const std::string& text);
  std::string toString() const;
  bool overlapsBackward() const { return kind != Kind::kFifo; }
  bool prioritized() const { return kind == Kind::kP3; }
};

// p3's slice for a ring of `ranks` over links of `latencySeconds` per message and
// `bytesPerSecond`: the smallest slice whose all-reduce spends at most 2% of its time on
// message latency (2(P-1) messages against 2(P-1)/P x 4 bytes per element on the wire: s >=
// 49 latency bandwidth P / 4), and never below the 40,000 elements P3 chose on its 4 workers.
// 2%, not 10% or 5%: on the H200 profiles at 16 ranks those left p3 up to 8% and 2% behind
// wfbp (docs/performance.md, "Measured on a real accelerator").
size_t p3SliceForLink(int ranks, double latencySeconds, double bytesPerSecond);

// A span of the flat gradient buffer: whole tensors, or (p3) one slice of one tensor.
struct CommUnit {
  size_t offset = 0;  // elements
  size_t elements = 0;
  std::vector<int> tensors;  // registration indices
  // Lower is more urgent: the registration index of the unit's first tensor in forward order,
  // so the input layer's units come first (P3's priority = -layer index).
  int priority = 0;
  size_t tensorOffset = 0;  // elements of tensors[0] before this unit (non-zero for slices only)
};

struct GradientLayout {
  std::vector<size_t> offsetOf;  // by registration index, in elements
  size_t totalElements = 0;
  std::vector<CommUnit> units;  // in communication order
  std::vector<int> unitOf;      // by registration index (p3: the tensor's first slice)
  std::vector<int> unitCount;   // by registration index: 1, or (p3) the tensor's slice count
};

// Lays out tensors of the given element counts (registration order) and groups them into units.
// Tensors of different `groups` (by registration index; empty = all alike) never share a unit:
// a unit is compressed as a whole, so its tensors must want the same compression. Fusion keeps
// a bucket open per group, so a group's tensors fuse across the other groups' tensors between
// them; the buffer then follows the units (a unit's tensors are consecutive), not strictly
// backward's order. p3 cuts a
// tensor only between rows of `rowElements[t]` elements (the product of its trailing
// dimensions; empty = 1), so a slice of a matrix is a matrix (for PowerSGD and GradiVeQ): a
// slice holds the most whole rows within `sliceElements`, and at least one row.
GradientLayout planLayout(const std::vector<size_t>& tensorElements, const ScheduleSpec& spec,
                          const std::vector<int>& groups = {},
                          const std::vector<size_t>& rowElements = {});
// Each unit's priority, by unit (what PriorityScheduler takes).
std::vector<int> prioritiesOf(const GradientLayout& layout);

// Elements per row of a tensor: the product of all dimensions but the first (1 for a vector).
size_t rowElements(const TensorShape& tensor);
// The same for named tensors: their element counts, and rows of rowElements.
GradientLayout planLayout(const std::vector<TensorShape>& tensors, const ScheduleSpec& spec,
                          const std::vector<int>& groups = {});

// The shapes a unit's compressor sees: its tensors' shapes, or (a p3 slice) the slice's rows of
// its one tensor, named "tensor[begin:end]".
std::vector<TensorShape> unitShapes(const GradientLayout& layout, size_t unit,
                                    const std::vector<TensorShape>& tensors);

// Between a flat buffer in `layout` order and the tensors' values concatenated in registration
// order (how checkpoints hold per-parameter state such as the SGD velocity).
std::vector<float> layoutToTensors(const GradientLayout& layout,
                                   const std::vector<TensorShape>& tensors,
                                   std::span<const float> flat);
std::vector<float> tensorsToLayout(const GradientLayout& layout,
                                   const std::vector<TensorShape>& tensors,
                                   std::span<const float> byTensor);

}  // namespace gradsync
