// Radix top-k selection (select.h). The loops write branch-free: every element is stored at the
// current end of each output and the end advances only when the element belongs there, so the
// cost does not depend on how predictable the data is. The output buffers therefore carry a
// chunk of slack, and the counts are checked after every chunk, so a key source that returned
// different keys on its second call could not make a write land outside them.
#include "compress/select.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "common/check.h"
#include "common/simd.h"
#include "compress/select_gather.h"

namespace gradsync {
namespace {

constexpr size_t kChunk = 2048;  // keys per fill: 8 KB, stays in L1 beside the histograms
constexpr int kTopBits = 11;     // first histogram: 2048 buckets (|x|: exponent + 3 bits)
constexpr int kRefineBits = 10;  // later histograms, over the candidates only
// The first histogram is split in four interleaved copies: gradients put most elements in a
// handful of exponent buckets, and consecutive increments of one counter would wait on each
// other's store.
constexpr size_t kCopies = 4;
constexpr size_t kGroup = 16;  // keys tested at once in the partition pass
// The sampled path (selectSampled): from inputs of kSampledMin keys, k up to a sixteenth of
// them; kSampleChunks runs of kSampleRun keys (16,384 keys) estimate where the k-th lies.
constexpr size_t kSampledMin = size_t{1} << 18;
constexpr size_t kSampleChunks = 256;
constexpr size_t kSampleRun = 64;

// A bit per key of the kGroup keys at `keys`, set iff the key is >= lowest. The sign of
// (lowest - 1 - key) is set iff key >= lowest, as keys are below 2^31; GCC's vector extension
// keeps the subtraction four lanes wide, where the compiler would leave a plain loop scalar.
uint32_t atLeastMask(const uint32_t* keys, uint32_t lowest) {
  using Lanes = int32_t __attribute__((vector_size(16)));
  const int32_t limit = static_cast<int32_t>(lowest - 1);
  const Lanes limits = {limit, limit, limit, limit};
  uint32_t mask = 0;
  for (size_t g = 0; g < kGroup; g += 4) {
    Lanes v;
    std::memcpy(&v, keys + g, sizeof v);
    const Lanes d = limits - v;
#if defined(__SSE2__)
    const auto signs = static_cast<uint32_t>(
        __builtin_ia32_movmskps(reinterpret_cast<float __attribute__((vector_size(16)))>(d)));
#else
    uint32_t signs = 0;
    for (int l = 0; l < 4; ++l) signs |= (static_cast<uint32_t>(d[l]) >> 31) << l;
#endif
    mask |= signs << g;
  }
  return mask;
}

// Calls place(index, key) for the keys of one chunk (the input's [base, base + count)) that
// are at or above `lowest`, and possibly others (the chunk's tail); `place` decides branch-free.
// Most groups of kGroup hold none when k is a small fraction: a vectorised test skips them, and
// in the others only the keys it marked are placed (a gradient's top 2% put one in about every
// fourth group: placing all 16 of such a group cost more than the test).
template <class Place>
void placeNear(const uint32_t* chunk, size_t base, size_t count, uint32_t lowest, Place& place) {
  size_t j = 0;
  for (; j + kGroup <= count; j += kGroup) {
    for (uint32_t mask = atLeastMask(chunk + j, lowest); mask != 0; mask &= mask - 1) {
      const auto g = static_cast<size_t>(std::countr_zero(mask));
      place(base + j + g, chunk[j + g]);
    }
  }
  for (; j < count; ++j) place(base + j, chunk[j]);
}

void ensureSize(std::vector<uint32_t>& buffer, size_t size) {
  if (buffer.size() < size) buffer.resize(size);
}

// The bucket (counting from the top) where the running count of `histogram` reaches `need`;
// `need` becomes what remains to take from that bucket.
uint32_t bucketReaching(const uint32_t* histogram, size_t buckets, size_t& need) {
  size_t above = 0;
  for (size_t b = buckets; b-- > 0;) {
    if (above + histogram[b] >= need) {
      need -= above;
      return static_cast<uint32_t>(b);
    }
    above += histogram[b];
  }
  detail::checkFailed(__FILE__, __LINE__, "the histogram holds fewer elements than asked for");
}

}  // namespace

size_t selectionCount(size_t elements, double density) {
  if (elements == 0) return 0;
  double rounded = std::round(density * static_cast<double>(elements));
  size_t k = rounded < 1 ? 1 : static_cast<size_t>(rounded);
  return std::min(k, elements);
}

void MagnitudeKeys::fill(size_t begin, size_t count, uint32_t* keys) const {
  const float* x = x_.data() + begin;
  for (size_t j = 0; j < count; ++j) keys[j] = std::bit_cast<uint32_t>(x[j]) & 0x7fffffffu;
}

size_t KeySource::gatherAtLeast(size_t begin, size_t count, uint32_t lowest, uint32_t* scratch,
                                uint32_t* indices, uint32_t* keys) const {
  fill(begin, count, scratch);
  size_t n = 0;
  auto place = [&](size_t index, uint32_t key) {
    indices[n] = static_cast<uint32_t>(index);
    keys[n] = key;
    n += key >= lowest;
  };
  placeNear(scratch, begin, count, lowest, place);
  return n;
}

size_t MagnitudeKeys::gatherAtLeast(size_t begin, size_t count, uint32_t lowest, uint32_t* scratch,
                                    uint32_t* indices, uint32_t* keys) const {
  const simd::Path path = simd::active();
  if (path == simd::Path::kScalar) {
    return KeySource::gatherAtLeast(begin, count, lowest, scratch, indices, keys);
  }
  const size_t wide = count / gather::kLanes * gather::kLanes;
  const float* x = x_.data() + begin;
  const size_t found = path == simd::Path::kAvx512
                           ? gather::magnitudesAvx512(x, wide, begin, lowest, indices, keys)
                           : gather::magnitudesAvx2(x, wide, begin, lowest, indices, keys);
  return found + KeySource::gatherAtLeast(begin + wide, count - wide, lowest, scratch,
                                          indices + found, keys + found);
}

// Pass 1: histogram of the top bits; returns the bucket holding the k-th largest key and sets
// `above` to the number of elements in higher buckets.
uint32_t TopKSelector::topBucket(const KeySource& keys, size_t k, int shift, size_t& above) {
  const size_t n = keys.size();
  const size_t buckets = size_t{1} << (keys.keyBits() - shift);
  histogram_.assign(kCopies * buckets, 0);
  keyChunk_.resize(kChunk);
  uint32_t* h = histogram_.data();
  const uint32_t* chunk = keyChunk_.data();
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t count = std::min(kChunk, n - base);
    keys.fill(base, count, keyChunk_.data());
    size_t j = 0;
    for (; j + kCopies <= count; j += kCopies) {
      for (size_t c = 0; c < kCopies; ++c) ++h[c * buckets + (chunk[j + c] >> shift)];
    }
    for (; j < count; ++j) ++h[chunk[j] >> shift];
  }
  for (size_t c = 1; c < kCopies; ++c) {
    for (size_t b = 0; b < buckets; ++b) h[b] += h[c * buckets + b];
  }
  size_t need = k;
  uint32_t bucket = bucketReaching(h, buckets, need);
  above = k - need;
  definiteCount_ = above;
  candidateCount_ = h[bucket];
  return bucket;
}

// Pass 2: the indices above `bucket` go to definite_, those in it (with their low key bits) to
// the candidates. Both lists come out ascending.
void TopKSelector::partition(const KeySource& keys, int shift, uint32_t bucket) {
  const size_t n = keys.size();
  ensureSize(definite_, definiteCount_ + kChunk + 1);
  ensureSize(candidates_, candidateCount_ + kChunk + 1);
  ensureSize(candidateKeys_, candidateCount_ + kChunk + 1);
  uint32_t* definite = definite_.data();
  uint32_t* candidates = candidates_.data();
  uint32_t* candidateKeys = candidateKeys_.data();
  const uint32_t* chunk = keyChunk_.data();
  const uint32_t lowMask = (uint32_t{1} << shift) - 1;
  const uint32_t lowest = bucket << shift;  // the smallest key that goes anywhere
  size_t nd = 0, nc = 0;
  auto place = [&](size_t index, uint32_t key) {
    const uint32_t top = key >> shift;
    definite[nd] = static_cast<uint32_t>(index);
    nd += top > bucket;
    candidates[nc] = static_cast<uint32_t>(index);
    candidateKeys[nc] = key & lowMask;
    nc += top == bucket;
  };
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t count = std::min(kChunk, n - base);
    keys.fill(base, count, keyChunk_.data());
    placeNear(chunk, base, count, lowest, place);
    GS_CHECK(nd <= definiteCount_ && nc <= candidateCount_);
  }
  GS_CHECK(nd == definiteCount_ && nc == candidateCount_);
}

// Resolves `lowBits` more bits below `prefix`, kRefineBits at a time, from histograms of the
// keys that `forEachKey` visits and whose higher bits equal the prefix. Returns the prefix
// extended by them and leaves in `need` how many of the keys equal to it to take.
template <class ForEachKey>
uint32_t TopKSelector::resolve(int lowBits, uint32_t prefix, size_t& need,
                               const ForEachKey& forEachKey) {
  for (int done = 0; done < lowBits;) {
    const int width = std::min(kRefineBits, lowBits - done);
    const int shift = lowBits - done - width;
    const uint32_t mask = (uint32_t{1} << width) - 1;
    histogram_.assign(size_t{mask} + 1, 0);
    uint32_t* h = histogram_.data();
    // Keys outside the prefix add 0 to their bucket rather than 1 to a shared overflow
    // counter, which would serialise the increments.
    forEachKey(
        [&](uint32_t key) { h[(key >> shift) & mask] += (key >> (shift + width)) == prefix; });
    prefix = (prefix << width) | bucketReaching(h, size_t{mask} + 1, need);
    done += width;
  }
  return prefix;
}

// The candidates above the low bits of the k-th key and the first `needEqual` equal to them,
// merged with the definite indices.
void TopKSelector::chooseCandidates(uint32_t low, size_t needEqual, size_t above,
                                    std::vector<uint32_t>& indices) {
  const size_t fromCandidates = indices.size() - above;
  ensureSize(chosen_, fromCandidates + 1);
  uint32_t* chosen = chosen_.data();
  const uint32_t* candidates = candidates_.data();
  const uint32_t* candidateKeys = candidateKeys_.data();
  size_t taken = 0, equal = 0;
  for (size_t j = 0; j < candidateCount_; ++j) {
    const uint32_t key = candidateKeys[j];
    const bool take = (key > low) | ((key == low) & (equal < needEqual));
    equal += key == low;
    chosen[taken] = candidates[j];
    taken += take;
  }
  GS_CHECK_EQ(taken, fromCandidates);
  std::merge(definite_.begin(), definite_.begin() + static_cast<ptrdiff_t>(above), chosen_.begin(),
             chosen_.begin() + static_cast<ptrdiff_t>(fromCandidates), indices.begin());
}

// One pass over the input: every key above the k-th, and the first `needEqual` equal to it.
void TopKSelector::collect(const KeySource& keys, uint32_t kth, size_t needEqual,
                           std::vector<uint32_t>& indices) {
  const size_t n = keys.size(), k = indices.size();
  indices.resize(k + 1);
  uint32_t* out = indices.data();
  const uint32_t* chunk = keyChunk_.data();
  size_t taken = 0, equal = 0;
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t count = std::min(kChunk, n - base);
    keys.fill(base, count, keyChunk_.data());
    for (size_t j = 0; j < count; ++j) {
      const uint32_t key = chunk[j];
      const bool take = (key > kth) | ((key == kth) & (equal < needEqual));
      equal += key == kth;
      out[std::min(taken, k)] = static_cast<uint32_t>(base + j);  // in bounds whatever the keys
      taken += take;
    }
  }
  GS_CHECK_EQ(taken, k);
  indices.resize(k);
}

// The lowest top-bits bucket that, judged from kSampleChunks evenly spaced runs of the input,
// holds about twice the expected share of the k largest keys at or above it; 0 when that is the
// whole range (filtering would keep everything).
uint32_t TopKSelector::sampledBucket(const KeySource& keys, size_t k, int shift) {
  const size_t n = keys.size();
  const size_t buckets = size_t{1} << (keys.keyBits() - shift);
  histogram_.assign(buckets, 0);
  keyChunk_.resize(kChunk);
  const size_t samples = kSampleChunks * kSampleRun;
  for (size_t c = 0; c < kSampleChunks; ++c) {
    const size_t base = c * (n - kSampleRun) / (kSampleChunks - 1);
    keys.fill(base, kSampleRun, keyChunk_.data());
    for (size_t j = 0; j < kSampleRun; ++j) ++histogram_[keyChunk_[j] >> shift];
  }
  const double expected = static_cast<double>(k) * static_cast<double>(samples) / n;
  size_t want = static_cast<size_t>(2 * expected) + 32;
  if (want >= samples) return 0;
  return bucketReaching(histogram_.data(), buckets, want);
}

uint32_t TopKSelector::sampledFloor(const KeySource& keys, size_t k) {
  const size_t n = keys.size();
  if (k == 0 || n < kSampledMin || k > n / 16) return 0;
  const int bits = keys.keyBits();
  const int shift = bits - std::min(bits, kTopBits);
  return sampledBucket(keys, k, shift) << shift;
}

size_t TopKSelector::sampledLimit(size_t n, size_t k) {
  return std::min(n / 8, 8 * k + kChunk);
}

// Every key at or above `bucket` (with its index) into the candidates, in one pass; false when
// they would be more than `limit`.
bool TopKSelector::gatherFrom(const KeySource& keys, int shift, uint32_t bucket, size_t limit) {
  const size_t n = keys.size();
  const uint32_t lowest = bucket << shift;
  size_t nc = 0;
  for (size_t base = 0; base < n; base += kChunk) {
    // Grown as they fill (a reused selector keeps them), not sized for the limit up front:
    // fresh pages for millions of slots would cost more than the pass.
    ensureSize(candidates_, nc + kChunk + 1);
    ensureSize(candidateKeys_, nc + kChunk + 1);
    const size_t count = std::min(kChunk, n - base);
    const size_t found = keys.gatherAtLeast(base, count, lowest, keyChunk_.data(),
                                            candidates_.data() + nc, candidateKeys_.data() + nc);
    GS_CHECK_LE(found, count);
    nc += found;
    if (nc > limit) return false;
  }
  candidateCount_ = nc;
  return true;
}

// Top-k from a sample's estimate: one pass gathers every key in the buckets that should hold the
// k largest, and the exact selection runs among those. The same result as the full path (every
// key at or above the k-th is gathered, in index order); nullopt when the sample misjudged
// (fewer than k gathered, or too many), and the caller takes the full path.
std::optional<uint32_t> TopKSelector::selectSampled(const KeySource& keys, size_t k, int shift,
                                                    std::vector<uint32_t>& indices) {
  const uint32_t bucket = sampledBucket(keys, k, shift);
  if (bucket == 0) return std::nullopt;
  const size_t limit = sampledLimit(keys.size(), k);
  if (!gatherFrom(keys, shift, bucket, limit) || candidateCount_ < k) return std::nullopt;
  size_t need = k;
  const uint32_t* candidateKeys = candidateKeys_.data();
  const uint32_t kth = resolve(keys.keyBits(), 0, need, [&](const auto& visit) {
    for (size_t j = 0; j < candidateCount_; ++j) visit(candidateKeys[j]);
  });
  chooseCandidates(kth, need, 0, indices);
  return kth;
}

uint32_t TopKSelector::select(const KeySource& keys, size_t k, std::vector<uint32_t>& indices) {
  const size_t n = keys.size();
  GS_CHECK_LE(n, size_t{UINT32_MAX});
  k = std::min(k, n);
  indices.resize(k);
  streamed_ = false;
  sampled_ = false;
  if (k == 0) return 0;
  const int bits = keys.keyBits();
  GS_CHECK(bits >= 1 && bits <= 31);
  const int shift = bits - std::min(bits, kTopBits);
  if (n >= kSampledMin && k <= n / 16) {
    if (std::optional<uint32_t> kth = selectSampled(keys, k, shift, indices)) {
      sampled_ = true;
      return *kth;
    }
  }
  size_t above = 0;
  const uint32_t bucket = topBucket(keys, k, shift, above);
  size_t need = k - above;
  streamed_ = candidateCount_ > n / 8 + kChunk;
  if (!streamed_) {
    partition(keys, shift, bucket);
    const uint32_t* candidateKeys = candidateKeys_.data();
    const uint32_t low = resolve(shift, 0, need, [&](const auto& visit) {
      for (size_t j = 0; j < candidateCount_; ++j) visit(candidateKeys[j]);
    });
    chooseCandidates(low, need, above, indices);
    return (bucket << shift) | low;
  }
  const uint32_t* chunk = keyChunk_.data();
  const uint32_t kth = resolve(shift, bucket, need, [&](const auto& visit) {
    for (size_t base = 0; base < n; base += kChunk) {
      const size_t count = std::min(kChunk, n - base);
      keys.fill(base, count, keyChunk_.data());
      for (size_t j = 0; j < count; ++j) visit(chunk[j]);
    }
  });
  collect(keys, kth, need, indices);
  return kth;
}

void selectTopK(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) {
  TopKSelector selector;
  selector.selectByMagnitude(x, k, indices);
}

void selectTopKBySort(std::span<const float> x, size_t k, std::vector<uint32_t>& indices) {
  GS_CHECK_LE(x.size(), size_t{UINT32_MAX});
  k = std::min(k, x.size());
  indices.resize(x.size());
  std::iota(indices.begin(), indices.end(), uint32_t{0});
  auto key = [&](uint32_t i) { return std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu; };
  auto before = [&](uint32_t a, uint32_t b) {
    const uint32_t ka = key(a), kb = key(b);
    return ka != kb ? ka > kb : a < b;
  };
  std::nth_element(indices.begin(), indices.begin() + static_cast<ptrdiff_t>(k), indices.end(),
                   before);
  indices.resize(k);
  std::sort(indices.begin(), indices.end());
}

}  // namespace gradsync
