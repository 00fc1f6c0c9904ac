// Which gradients are communicated together, and when (a pure policy: no threads, no I/O).
//
//   fifo       one unit per tensor, started only once backward is over (no overlap: baseline)
//   wfbp       one unit per tensor, started as soon as its gradient is ready (wait-free backprop)
//   fusion:MB  tensors fused into buckets of at least MB mebibytes, each started when all of its
//              tensors are ready (Horovod / PyTorch DDP style)
//
// Units are contiguous spans of the flat gradient buffer. Tensors are laid out in reverse
// registration order, the order in which backward produces their gradients, so units complete
// roughly in index order; they are always communicated in index order, on every rank alike,
// because collectives must be called in the same order everywhere.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace gradsync {

struct ScheduleSpec {
  enum class Kind { kFifo, kWfbp, kFusion };
  Kind kind = Kind::kWfbp;
  size_t fusionBytes = 25u << 20;  // for kFusion

  // Parses "fifo", "wfbp", "fusion" (25 MB) or "fusion:MB"; throws ConfigError listing the
  // valid forms.
  static ScheduleSpec parse(const std::string& text);
  std::string toString() const;
  bool overlapsBackward() const { return kind != Kind::kFifo; }
};

// A span of the flat gradient buffer holding whole tensors.
struct CommUnit {
  size_t offset = 0;  // elements
  size_t elements = 0;
  std::vector<int> tensors;  // registration indices
};

struct GradientLayout {
  std::vector<size_t> offsetOf;  // by registration index, in elements
  size_t totalElements = 0;
  std::vector<CommUnit> units;  // in communication order
  std::vector<int> unitOf;      // by registration index
};

// Lays out tensors of the given element counts (registration order) and groups them into units.
// Tensors of different `groups` (by registration index; empty = all alike) never share a unit:
// a unit is compressed as a whole, so its tensors must want the same compression.
GradientLayout planLayout(const std::vector<size_t>& tensorElements, const ScheduleSpec& spec,
                          const std::vector<int>& groups = {});

}  // namespace gradsync
