#include <atomic>
#include <vector>

#include <fmt/format.h>

#include "common/check.h"
#include "gradsync/error.h"
#include "gradsync/loopback.h"
#include "transport/checks.h"
#include "transport/mailbox.h"

namespace gradsync {

struct LoopbackFabric::State {
  int size;
  TransportOptions options;
  std::vector<std::unique_ptr<Mailbox>> mailboxes;
};

namespace {

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(std::shared_ptr<LoopbackFabric::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}

  ~LoopbackTransport() override {
    auto gone = std::make_exception_ptr(PeerLostError(fmt::format("rank {} has shut down", rank_),
                                                      {.peer = rank_, .operation = "recv"}));
    for (int r = 0; r < state_->size; ++r) {
      if (r != rank_) state_->mailboxes[r]->closePeer(rank_, gone);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }
  const TransportOptions& options() const override { return state_->options; }

  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    checkPeerRank(rank_, state_->size, peer);
    if (peer != rank_) bytesSent_.fetch_add(bytes, std::memory_order_relaxed);
    state_->mailboxes[peer]->deliver(rank_, tag, data, bytes);
    auto work =
        std::make_shared<Work>(Work::Kind::kSend, rank_, peer, tag, bytes, state_->options.timeout);
    work->complete();
    return work;
  }

  // Sends complete synchronously, so only this rank's posted receives hold caller buffers.
  void abort(std::exception_ptr error) override { state_->mailboxes[rank_]->failAll(error); }

  uint64_t bytesSent() const override { return bytesSent_.load(std::memory_order_relaxed); }

  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    checkPeerRank(rank_, state_->size, peer);
    return state_->mailboxes[rank_]->postRecv(peer, tag, data, bytes);
  }

 private:
  std::shared_ptr<LoopbackFabric::State> state_;
  const int rank_;
  std::atomic<uint64_t> bytesSent_{0};
};

}  // namespace

LoopbackFabric::LoopbackFabric(int size, TransportOptions options)
    : state_(std::make_shared<State>()) {
  if (size < 1) throw ConfigError(fmt::format("world size must be at least 1, not {}", size));
  state_->size = size;
  state_->options = options;
  for (int r = 0; r < size; ++r) {
    state_->mailboxes.push_back(std::make_unique<Mailbox>(r, options.timeout));
  }
}

LoopbackFabric::~LoopbackFabric() = default;

std::unique_ptr<Transport> LoopbackFabric::connect(int rank) {
  GS_CHECK(rank >= 0 && rank < state_->size);
  return std::make_unique<LoopbackTransport>(state_, rank);
}

}  // namespace gradsync
