// gtopk:R (global top-k; Shi et al., ICDCS'19, after hclhkbu/gtopkssgd): each rank selects its
// local top-k by magnitude (k = max(1, round(R*n))), then the lists are merged pairwise up a
// binomial tree in ceil(log2 P) rounds (in round j, a rank r with bit j set and lower bits clear
// sends its list to r - 2^j and drops out; the receiver sums the common indices and keeps the
// top-k of the union), and rank 0 sends the final k pairs back down the same tree.
//
// Contract: every rank ends with grad = (global top-k pairs) / P, zero elsewhere, bitwise
// identical on all ranks (only rank 0's merge result reaches them). `sent` holds this rank's own
// input at the indices of its local top-k that are in the global top-k, as the reference code
// puts the rest back into the residual; error feedback wraps this method by default. Each rank
// sends at most one list up and receives one down (4 + 8k bytes each) plus one per child.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "collectives/guard.h"
#include "common/check.h"
#include "compress/impl/methods.h"
#include "compress/select.h"
#include "compress/sparse.h"
#include "gradsync/error.h"

namespace gradsync::methods {
namespace {

// (index, value) pairs in strictly increasing index order, so merges are linear.
struct SparseList {
  std::vector<uint32_t> indices;
  std::vector<float> values;
  void resize(size_t count) {
    indices.resize(count);
    values.resize(count);
  }
};

class GTopK final : public Compressor {
 public:
  explicit GTopK(double density) : density_(density) {}

  Aggregation aggregation() const override { return Aggregation::kTree; }
  // One list of k pairs per message, whichever round it travels in.
  size_t encodedBytes(size_t elements) const override { return sparseBytes(countFor(elements)); }
  void exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                ExchangeStats& stats) override;

 private:
  size_t countFor(size_t n) const { return selectionCount(n, density_); }
  void reduceToRoot(Transport& transport, uint64_t tag, size_t n, size_t k, const Clock& clock,
                    double& seconds);
  void broadcastFromRoot(Transport& transport, uint64_t tag, size_t n, size_t k);
  void receiveList(Transport& transport, int peer, uint64_t tag, size_t n, size_t k,
                   SparseList& into);
  void mergeIn(const SparseList& partner, size_t k);
  void writeOutputs(std::span<float> grad, std::span<float> sent, int ranks) const;

  const double density_;
  SparseList local_;    // this rank's own top-k, kept to compute `sent`
  SparseList merged_;   // the running merge, then the global top-k
  SparseList partner_;  // the list just received
  SparseList union_;    // merged_ + partner_ before the top-k cut
  std::vector<uint32_t> chosen_;
  std::vector<uint8_t> sendBytes_, recvBytes_;
  TopKSelector selector_;
};

void GTopK::exchange(ExchangeContext& context, std::span<float> grad, std::span<float> sent,
                     ExchangeStats& stats) {
  GS_CHECK_EQ(grad.size(), sent.size());
  const size_t n = grad.size();
  const size_t k = countFor(n);
  if (k == 0) return;  // an empty unit: every rank knows it, nothing to exchange
  Nanos start = context.clock->now();
  selector_.selectByMagnitude(grad, k, chosen_);
  local_.resize(k);
  for (size_t j = 0; j < k; ++j) {
    local_.indices[j] = chosen_[j];
    local_.values[j] = grad[chosen_[j]];
  }
  merged_ = local_;
  stats.encodeSeconds += secondsSince(*context.clock, start);

  Transport& transport = context.transport;
  const uint64_t tag = context.collective.tag;
  double mergeSeconds = 0;
  detail::runCollective("gtopk", transport, [&] {
    reduceToRoot(transport, tag, n, k, *context.clock, mergeSeconds);
    broadcastFromRoot(transport, tag, n, k);
  });
  start = context.clock->now();
  writeOutputs(grad, sent, transport.size());
  stats.decodeSeconds += mergeSeconds + secondsSince(*context.clock, start);
}

// Round j (distance d = 2^j): the ranks still active are the multiples of d. Those with bit j
// set leave after sending; the others absorb r + d if it exists. This is the recursive halving of
// the reference code for P a power of two, and for other P the ranks without a partner in a
// round simply wait for the next one, so no folding step is needed.
void GTopK::reduceToRoot(Transport& transport, uint64_t tag, size_t n, size_t k, const Clock& clock,
                         double& seconds) {
  const int rank = transport.rank();
  const int size = transport.size();
  for (int d = 1; d < size; d <<= 1) {
    if (rank & d) {
      encodeSparse(merged_.indices, merged_.values, sendBytes_);
      transport.send(rank - d, tag, sendBytes_.data(), sendBytes_.size())->wait();
      return;
    }
    if (rank + d < size) {
      receiveList(transport, rank + d, tag, n, k, partner_);
      Nanos start = clock.now();
      mergeIn(partner_, k);
      seconds += secondsSince(clock, start);
    }
  }
}

// The reduction tree run backwards: a rank receives from the rank it sent to (r minus its
// lowest set bit) and forwards the bytes unchanged to r + d for each smaller power of two d.
void GTopK::broadcastFromRoot(Transport& transport, uint64_t tag, size_t n, size_t k) {
  const int rank = transport.rank();
  const int size = transport.size();
  int d = 0;
  const std::vector<uint8_t>* bytes = &sendBytes_;
  if (rank == 0) {
    d = static_cast<int>(std::bit_floor(static_cast<unsigned>(size - 1)));
    if (d > 0) encodeSparse(merged_.indices, merged_.values, sendBytes_);
  } else {
    const int lowest = rank & -rank;
    receiveList(transport, rank - lowest, tag, n, k, merged_);
    bytes = &recvBytes_;
    d = lowest >> 1;
  }
  std::vector<WorkPtr> sends;
  for (; d > 0; d >>= 1) {
    if (rank + d < size)
      sends.push_back(transport.send(rank + d, tag, bytes->data(), bytes->size()));
  }
  for (WorkPtr& work : sends) work->wait();
}

// Validates a peer's list: the size and index range (viewSparse), then the strictly increasing
// order the merge relies on. The bytes stay in recvBytes_ for forwarding.
void GTopK::receiveList(Transport& transport, int peer, uint64_t tag, size_t n, size_t k,
                        SparseList& into) {
  recvBytes_.resize(sparseBytes(k));
  transport.recv(peer, tag, recvBytes_.data(), recvBytes_.size())->wait();
  const ErrorContext where{.rank = transport.rank(), .peer = peer};
  SparseView view;
  try {
    view = viewSparse(recvBytes_, n);
  } catch (const ProtocolError& e) {
    throw ProtocolError(fmt::format("gtopk list from rank {}: {}", peer, e.detail()), where);
  }
  into.resize(k);
  std::memcpy(into.indices.data(), view.indexBytes, 4 * k);
  std::memcpy(into.values.data(), view.valueBytes, 4 * k);
  for (size_t j = 1; j < k; ++j) {
    if (into.indices[j] <= into.indices[j - 1]) {
      throw ProtocolError(
          fmt::format("gtopk list from rank {} is not in increasing index order at pair {} ({} "
                      "after {})",
                      peer, j, into.indices[j], into.indices[j - 1]),
          where);
    }
  }
}

// merged_ = top-k of (merged_ + partner), both sorted by index; the union stays sorted, and the
// selection returns positions in increasing order, so the result is sorted too.
void GTopK::mergeIn(const SparseList& partner, size_t k) {
  union_.resize(2 * k);
  size_t i = 0, j = 0, u = 0;
  while (i < k && j < k) {
    const uint32_t a = merged_.indices[i];
    const uint32_t b = partner.indices[j];
    union_.indices[u] = std::min(a, b);
    if (a == b) {
      union_.values[u] = merged_.values[i++] + partner.values[j++];
    } else {
      union_.values[u] = a < b ? merged_.values[i++] : partner.values[j++];
    }
    ++u;
  }
  for (; i < k; ++i, ++u) {
    union_.indices[u] = merged_.indices[i];
    union_.values[u] = merged_.values[i];
  }
  for (; j < k; ++j, ++u) {
    union_.indices[u] = partner.indices[j];
    union_.values[u] = partner.values[j];
  }
  selector_.selectByMagnitude(std::span<const float>(union_.values.data(), u), k, chosen_);
  for (size_t c = 0; c < k; ++c) {
    merged_.indices[c] = union_.indices[chosen_[c]];
    merged_.values[c] = union_.values[chosen_[c]];
  }
}

void GTopK::writeOutputs(std::span<float> grad, std::span<float> sent, int ranks) const {
  const float inverse = 1.0f / static_cast<float>(ranks);  // as CodecCompressor averages
  std::fill(grad.begin(), grad.end(), 0.0f);
  for (size_t j = 0; j < merged_.indices.size(); ++j) {
    grad[merged_.indices[j]] = merged_.values[j] * inverse;
  }
  std::fill(sent.begin(), sent.end(), 0.0f);
  size_t i = 0, j = 0;
  while (i < local_.indices.size() && j < merged_.indices.size()) {
    if (local_.indices[i] < merged_.indices[j]) {
      ++i;
    } else if (local_.indices[i] > merged_.indices[j]) {
      ++j;
    } else {
      sent[local_.indices[i]] = local_.values[i];
      ++i;
      ++j;
    }
  }
}

}  // namespace

std::unique_ptr<Compressor> makeGTopK(const MethodArgs& args, std::span<const TensorShape> unit) {
  if (!(args.value > 0 && args.value <= 1)) {
    throw ConfigError(fmt::format("gtopk:R needs 0 < R <= 1, got {}", args.value));
  }
  size_t elements = 0;
  for (const TensorShape& t : unit) elements += t.elements;
  if (elements > UINT32_MAX) {
    throw ConfigError(fmt::format(
        "gtopk: a unit of {} elements is beyond the 2^32 - 1 that sparse indices address",
        elements));
  }
  return std::make_unique<GTopK>(args.value);
}

}  // namespace gradsync::methods
