#include "torch/waves/master.h"

#include <fmt/format.h>

#include <numeric>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {

WaveConsistency parseWaveConsistency(const std::string& name) {
  if (name == "shared") return WaveConsistency::kShared;
  if (name == "accumulate") return WaveConsistency::kAccumulate;
  throw ConfigError(fmt::format("unknown --wave-consistency '{}'", name),
                    {.hint = "choose shared or accumulate"});
}

WaveMaster::WaveMaster(std::shared_ptr<Model> net, std::unique_ptr<FusedSGD> optimizer,
                       std::vector<Model*> replicas, WaveConsistency consistency,
                       std::chrono::milliseconds timeout, int rank)
    : net_(std::move(net)),
      optimizer_(std::move(optimizer)),
      replicas_(std::move(replicas)),
      consistency_(consistency),
      timeout_(timeout),
      rank_(rank) {
  GS_CHECK(!replicas_.empty());
  for (int wave = 0; wave < waves(); ++wave) copyMasterTo(wave);  // round 0's weights
}

void WaveMaster::copyMasterTo(int wave) {
  torch::NoGradGuard noGrad;
  const std::vector<torch::Tensor> from = net_->parameters();
  std::vector<torch::Tensor> to = replicas_[wave]->parameters();
  for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
}

void WaveMaster::waitUntil(std::unique_lock<std::mutex>& lock, int wave, int64_t updates) {
  const bool ready =
      updated_.wait_for(lock, timeout_, [&] { return error_ || applied_ >= updates; });
  if (error_) std::rethrow_exception(error_);
  if (!ready) {
    throw TimeoutError(
        fmt::format("wave {} waited {} ms for update {} of the master", wave, timeout_.count(),
                    updates),
        {.rank = rank_, .operation = "wave update", .hint = "see the other wave's error"});
  }
}

void WaveMaster::load(int wave, int64_t round) {
  // kShared: the replica already holds its weights, taken when the wave's own previous update
  // was applied (apply), or the initial ones in round 0.
  if (consistency_ == WaveConsistency::kShared) return;
  std::unique_lock<std::mutex> lock(mutex_);
  waitUntil(lock, wave, round);  // the updates of every earlier round
  copyMasterTo(wave);
}

void WaveMaster::loadLatest(int wave) {
  std::lock_guard<std::mutex> lock(mutex_);
  copyMasterTo(wave);
}

// The master's .grad = the mean of the waves' .grad (in the order given).
void WaveMaster::copyGradients(const std::vector<int>& waves) {
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> params = net_->parameters();
  std::vector<std::vector<torch::Tensor>> grads;
  for (int w : waves) grads.push_back(replicas_[w]->parameters());
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor& grad = params[i].mutable_grad();
    if (!grad.defined()) grad = torch::zeros_like(params[i]);
    grad.copy_(grads[0][i].grad());
    for (size_t k = 1; k < grads.size(); ++k) grad.add_(grads[k][i].grad());
    if (grads.size() > 1) grad.div_(static_cast<double>(grads.size()));
  }
}

void WaveMaster::step() {
  const auto start = std::chrono::steady_clock::now();
  net_->optimizerStep(*optimizer_);
  optimizerSeconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void WaveMaster::apply(int wave, int64_t round) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
  if (consistency_ == WaveConsistency::kShared) {
    // In the waves' order (tick 0, tock 0, tick 1, ...), whichever allreduce finished first:
    // momentum makes the order matter, and every worker must make the same updates.
    waitUntil(lock, wave, round * waves() + wave);
    copyGradients({wave});
    step();
    // The wave's next forward runs on the master as of this update, whichever of the other
    // waves' later updates are applied by then: exactly K - 1 updates stale, whatever the
    // timing, so a run repeats bitwise. (The replica is free: its gradients were just used.)
    copyMasterTo(wave);
  } else {
    // A wave's next forward waits for this round's update, so every wave's .grad still holds
    // this round's average when the last one hands in.
    GS_CHECK(round == applied_);
    if (++handedIn_ < waves()) return;
    std::vector<int> all(replicas_.size());
    std::iota(all.begin(), all.end(), 0);
    copyGradients(all);
    step();
    handedIn_ = 0;
  }
  ++applied_;
  updated_.notify_all();
}

void WaveMaster::abort(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = std::move(error);
  updated_.notify_all();
}

double WaveMaster::optimizerSeconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return optimizerSeconds_;
}

}  // namespace gradsync
