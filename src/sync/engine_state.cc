// The engine's state between steps (engine.h), for checkpoints and elastic commits: the
// optimizer state that update mode keeps (with its own count of steps, Adam's bias correction),
// and the executor's and the guard's state as bytes in a versioned format.
#include <fmt/format.h>

#include "gradsync/error.h"
#include "sync/engine.h"

namespace gradsync {

std::vector<float> Engine::optimizerState() {
  drain();
  return executor_->optimizerState();
}

void Engine::setOptimizerState(std::span<const float> state, std::optional<uint64_t> stateSteps) {
  drain();
  executor_->setOptimizerState(state);
  std::lock_guard<std::mutex> lock(mutex_);
  stateCounted_ = stateSteps.has_value();
  stateOrigin_ = stateCounted_ ? static_cast<int64_t>(stepsEnded_ - *stateSteps) : 0;
  executor_->setStateOrigin(stateOrigin_);
}

uint64_t Engine::optimizerSteps() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<uint64_t>(static_cast<int64_t>(stepsEnded_) - stateOrigin_);
}

void Engine::pullGlobalModel() {
  drain();
  executor_->pullGlobalModel();
}

namespace {
// 2: Adam's moments in update mode moved to optimizerState() (1 held them in the executor's part).
constexpr uint64_t kEngineStateFormat = 2;
}  // namespace

std::vector<uint8_t> Engine::saveState() {
  drain();
  StateWriter out;
  out.write(kEngineStateFormat);
  out.write(uint64_t{layout_.units.size()});
  executor_->saveState(out);
  if (guard_) guard_->saveState(out);
  return out.take();
}

uint64_t Engine::stateFormat(std::span<const uint8_t> state) {
  if (state.empty()) return 0;
  StateReader in(state, "an engine's state");
  return in.readU64();
}

void Engine::loadState(std::span<const uint8_t> state) {
  drain();
  StateReader in(state, fmt::format("the synchronization state of rank {}", transport_.rank()));
  const uint64_t format = in.readU64();
  if (format != 1 && format != kEngineStateFormat) {
    throw DataError(fmt::format("{}: unknown format (written by another gradsync)", in.what()));
  }
  // Stateless units (dense, SGD) may change: say, the schedule from wfbp to fusion.
  const uint64_t units = in.readU64();
  if (units != layout_.units.size() && !in.atEnd()) {
    throw DataError(
        fmt::format("{}: {} communication units where this run has {} (another "
                    "schedule or model)",
                    in.what(), units, layout_.units.size()));
  }
  executor_->loadState(in, format);
  if (format == 1 && options_.update.stateSlots() == 2) {  // Adam's moments of the job's steps
    std::lock_guard<std::mutex> lock(mutex_);
    stateCounted_ = false;
    stateOrigin_ = 0;
    executor_->setStateOrigin(0);
  }
  // The guard's decisions (a checkpoint written before it existed has none: it starts afresh).
  if (guard_ && !in.atEnd()) guard_->loadState(in);
  if (!guard_ && !in.atEnd()) {
    throw DataError(
        fmt::format("{}: it holds the compression guard's state, which this run "
                    "does not keep (--guard off, or nothing compressed)",
                    in.what()));
  }
  in.expectEnd();
}

}  // namespace gradsync
