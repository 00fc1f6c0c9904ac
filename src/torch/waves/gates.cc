#include "torch/waves/gates.h"

#include <fmt/format.h>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {

WaveGates::WaveGates(int waves, std::chrono::milliseconds timeout, int rank)
    : waves_(waves), timeout_(timeout), rank_(rank), origin_(std::chrono::steady_clock::now()) {
  GS_CHECK(waves >= 1);
}

double WaveGates::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
}

void WaveGates::enter(WavePhase phase, int wave, int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  Gate& g = gate(phase);
  const bool ready = changed_.wait_for(lock, timeout_, [&] { return error_ || g.turn == wave; });
  if (error_) std::rethrow_exception(error_);
  if (!ready) {
    const char* name = phase == WavePhase::kForward ? "forward" : "backward";
    throw TimeoutError(fmt::format("wave {} waited {} ms for wave {} to finish its {}", wave,
                                   timeout_.count(), g.turn, name),
                       {.rank = rank_,
                        .operation = "wave gate",
                        .hint = "a wave stalled in compute; see the other wave's error"});
  }
  g.current = {wave, step, phase, now(), 0};
}

void WaveGates::leave(WavePhase phase, int wave) {
  std::lock_guard<std::mutex> lock(mutex_);
  Gate& g = gate(phase);
  if (g.turn != wave) return;  // entering failed: nothing to pass on
  g.current.end = now();
  intervals_.push_back(g.current);
  g.turn = (wave + 1) % waves_;
  changed_.notify_all();
}

void WaveGates::abort(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = std::move(error);
  changed_.notify_all();
}

std::vector<WaveInterval> WaveGates::intervals() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return intervals_;
}

WaveGates::Pass::Pass(WaveGates& gates, WavePhase phase, int wave, int64_t step)
    : gates_(gates), phase_(phase), wave_(wave) {
  gates_.enter(phase, wave, step);
}

WaveGates::Pass::~Pass() {
  gates_.leave(phase_, wave_);
}

}  // namespace gradsync
