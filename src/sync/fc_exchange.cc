#include "sync/fc_exchange.h"

#include <algorithm>

#include "collectives/alltoall.h"
#include "common/check.h"
#include "common/elapsed.h"

namespace gradsync {
namespace {

using Wall = std::chrono::steady_clock;

}  // namespace

uint64_t fcReduceBytes(const FcShape& s, int ranks) {
  const auto p = static_cast<uint64_t>(ranks);
  return (p - 1) * s.out * s.in / p * sizeof(float);
}

uint64_t fcExchangeBytes(const FcShape& s, int ranks) {
  const auto p = static_cast<uint64_t>(ranks);
  return ((p - 1) * s.rows * s.in / p + (p - 1) * s.rows * s.out) * sizeof(float);
}

bool fcUsesExchange(FcMode mode, const FcShape& shape, int ranks) {
  if (mode == FcMode::kAuto) return fcExchangeBytes(shape, ranks) < fcReduceBytes(shape, ranks);
  return mode == FcMode::kExchange;
}

std::vector<int> isolateExchanged(std::vector<int> groups,
                                  const std::vector<ExchangedTensor>& exchanged, size_t tensors) {
  if (exchanged.empty()) return groups;
  groups.resize(tensors, 0);
  int next = groups.empty() ? 0 : *std::max_element(groups.begin(), groups.end()) + 1;
  for (const ExchangedTensor& e : exchanged) groups[e.tensor] = next++;
  return groups;
}

FcExchange::FcExchange(Transport& transport, uint64_t tag, size_t in, size_t out)
    : counting_(transport),
      tag_(tag),
      in_(in),
      out_(out),
      own_(blockOf(in, transport.size(), transport.rank())) {}

// A transfer still in flight (an exception between forward and backward) must end before its
// buffers go; the transport bounds the wait.
FcExchange::~FcExchange() {
  for (const WorkPtr& work : pending_) {
    try {
      work->wait();
    } catch (...) {  // already reported where it mattered
    }
  }
}

void FcExchange::startActivations(std::span<const float> x, size_t rows) {
  GS_CHECK(x.size() == rows * in_);
  if (!pending_.empty()) ownActivations();  // a forward that no backward followed: let it land
  const int ranks = counting_.size();
  rows_ = rows;
  packed_.resize(rows * in_);
  std::vector<size_t> sendCounts(ranks);
  std::vector<size_t> recvCounts(ranks, rows * own_.size());
  float* out = packed_.data();
  for (int r = 0; r < ranks; ++r) {
    const Block columns = blockOf(in_, ranks, r);
    sendCounts[r] = rows * columns.size();
    for (size_t row = 0; row < rows; ++row) {
      out = std::copy_n(x.data() + row * in_ + columns.begin, columns.size(), out);
    }
  }
  activations_.resize(static_cast<size_t>(ranks) * rows * own_.size());
  pending_ = detail::startAlltoallv(counting_, packed_, sendCounts, activations_, recvCounts,
                                    {.tag = tag_});
}

std::span<const float> FcExchange::ownActivations() {
  const auto start = Wall::now();
  std::vector<WorkPtr> pending = std::move(pending_);
  pending_.clear();
  detail::finishAlltoall(counting_, pending);
  waitSeconds_ += secondsSince(start);
  return activations_;
}

std::span<const float> FcExchange::gatherErrors(std::span<const float> delta) {
  GS_CHECK(delta.size() == rows_ * out_);
  const auto start = Wall::now();
  const int ranks = counting_.size();
  errors_.resize(static_cast<size_t>(ranks) * delta.size());
  std::copy(delta.begin(), delta.end(),
            errors_.begin() + static_cast<std::ptrdiff_t>(counting_.rank() * delta.size()));
  // Blocks of rows x out each: allgather's blocks are blockOf(P * rows * out), equal here.
  allgather(counting_, errors_, {.tag = tag_ + 1});
  waitSeconds_ += secondsSince(start);
  return errors_;
}

}  // namespace gradsync
