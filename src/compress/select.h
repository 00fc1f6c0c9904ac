// Exact top-k selection for the sparse compressors (topk, mstopk, and whoever else needs the k
// largest of a gradient) and the benchmark `gradsync bench compress`.
//
// The selector ranks elements by an unsigned integer key and keeps the k largest, breaking ties
// towards the lower index, so the result is a deterministic function of the input. It is a
// radix select: a histogram of the key's top bits finds the bucket that holds the k-th largest
// key (one pass), a second pass writes the indices above that bucket and collects the bucket's
// elements, and the bucket is refined by further histograms over those candidates only. Two
// passes over the input whatever k is, against several passes with random access for
// std::nth_element. When the bucket holds more than an eighth of the input (all values equal,
// all zero, or all within one eighth of an octave), its elements are not collected: each
// refinement level, and the final collection, reads the input again instead, so that the
// buffers stay O(k + n/8) whatever the input.
//
// From 2^18 keys, with k up to a sixteenth of them, a sample (256 evenly spaced runs of 64
// keys) first estimates the top-bits bucket above which about twice the k largest lie; one
// pass gathers every key at or above it, and the exact selection runs among those: one pass
// over the input instead of two, the same result (every key at or above the k-th is gathered,
// in index order). Where the sample misjudges (fewer than k gathered, or more than 8k), the
// two-pass path runs after it.
//
// Contract: indices are < 2^32 (units are smaller, as in sparse.h); the output is ascending.
// Instances are not thread-safe; they own scratch buffers that are reused across calls, so a
// compressor keeps one per unit and no call allocates once the buffers have grown.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace gradsync {

// k = max(1, round(density * elements)) for a non-empty unit, 0 for an empty one, at most
// `elements`. The same on every rank, so decoders know how many pairs to expect.
size_t selectionCount(size_t elements, double density);

// Produces the ranking key of elements [begin, begin + count) into keys[0, count). Keys are
// below 2^keyBits(). Called in chunks of a few thousand elements so the keys stay in L1 and the
// fill loop can be vectorised; called more than once per element (keys are recomputed, not
// stored).
class KeySource {
 public:
  virtual ~KeySource() = default;
  virtual size_t size() const = 0;
  virtual int keyBits() const = 0;  // 1..31
  virtual void fill(size_t begin, size_t count, uint32_t* keys) const = 0;
  // The sampled path's pass (TopKSelector): writes the index and key of every element of
  // [begin, begin + count) whose key is >= `lowest`, in index order, to indices[0, n) and
  // keys[0, n), and returns n. Both may be written up to `count` + 1 slots whatever n is;
  // `scratch` holds `count` keys. This one fills `scratch` and tests it; a source may compute and
  // test its keys in one (the same result: MagnitudeKeys on the AVX2 and AVX-512 paths).
  virtual size_t gatherAtLeast(size_t begin, size_t count, uint32_t lowest, uint32_t* scratch,
                               uint32_t* indices, uint32_t* keys) const;
};

// The key of |x|: the float's bits without the sign. Non-negative floats order like these
// integers, -0 and +0 tie, and NaN ranks above infinity (a NaN gradient is sent, not hidden).
class MagnitudeKeys final : public KeySource {
 public:
  explicit MagnitudeKeys(std::span<const float> x) : x_(x) {}
  size_t size() const override { return x_.size(); }
  int keyBits() const override { return 31; }
  void fill(size_t begin, size_t count, uint32_t* keys) const override;
  size_t gatherAtLeast(size_t begin, size_t count, uint32_t lowest, uint32_t* scratch,
                       uint32_t* indices, uint32_t* keys) const override;

 private:
  std::span<const float> x_;
};

class TopKSelector {
 public:
  // Replaces `indices` with the k (clamped to the size) elements of largest key, ties to the
  // lower index, in ascending order. Returns the k-th largest key (0 when k == 0).
  uint32_t select(const KeySource& keys, size_t k, std::vector<uint32_t>& indices);
  // Whether the last select() refined over the input rather than collected candidates.
  bool lastStreamed() const { return streamed_; }
  // Whether the last select() took the sampled path (select.cc: one pass gathering the keys a
  // sample says hold the k largest, on inputs of 2^18 keys or more and k up to a sixteenth).
  bool lastSampled() const { return sampled_; }
  // The sampled path's floor (select.h): the lowest key at or above which, judged from a sample
  // of `keys`, about twice the k largest lie; 0 where the sampled path does not apply (under
  // 2^18 keys, k above a sixteenth of them, or a floor that would keep everything). A caller
  // that gathers the keys at or above it itself may keep up to sampledLimit(n, k) of them.
  uint32_t sampledFloor(const KeySource& keys, size_t k);
  static size_t sampledLimit(size_t n, size_t k);
  // Exact top-k by magnitude.
  void selectByMagnitude(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) {
    select(MagnitudeKeys(x), k, indices);
  }

 private:
  std::optional<uint32_t> selectSampled(const KeySource& keys, size_t k, int shift,
                                        std::vector<uint32_t>& indices);
  uint32_t sampledBucket(const KeySource& keys, size_t k, int shift);
  bool gatherFrom(const KeySource& keys, int shift, uint32_t bucket, size_t limit);
  uint32_t topBucket(const KeySource& keys, size_t k, int shift, size_t& above);
  void partition(const KeySource& keys, int shift, uint32_t bucket);
  void chooseCandidates(uint32_t low, size_t needEqual, size_t above,
                        std::vector<uint32_t>& indices);
  void collect(const KeySource& keys, uint32_t kth, size_t needEqual,
               std::vector<uint32_t>& indices);
  template <class ForEachKey>
  uint32_t resolve(int lowBits, uint32_t prefix, size_t& need, const ForEachKey& forEachKey);

  std::vector<uint32_t> histogram_;
  std::vector<uint32_t> keyChunk_;
  std::vector<uint32_t> definite_;  // indices whose top bits exceed the bucket's
  std::vector<uint32_t> candidates_;
  std::vector<uint32_t> candidateKeys_;  // the candidates' keys below the top bits
  std::vector<uint32_t> chosen_;
  size_t definiteCount_ = 0;
  size_t candidateCount_ = 0;
  bool streamed_ = false;
  bool sampled_ = false;
};

// Exact top-k by magnitude with a temporary selector (allocates; for one-off use).
void selectTopK(std::span<const float> x, size_t k, std::vector<uint32_t>& indices);

// The reference: std::nth_element over all indices ordered by (|x| descending, index
// ascending), then a sort of the k winners. Same result as selectTopK; kept for tests and for
// the benchmark to time beside it.
void selectTopKBySort(std::span<const float> x, size_t k, std::vector<uint32_t>& indices);

}  // namespace gradsync
