#include "torch/loop/progress.h"

#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

namespace gradsync {
namespace {

std::string duration(double seconds) {
  int s = static_cast<int>(seconds + 0.5);
  return s >= 60 ? fmt::format("{}m{:02}s", s / 60, s % 60) : fmt::format("{}s", s);
}

// Plain lines at most this often when stdout is not a terminal.
constexpr std::chrono::seconds kLineInterval{10};

}  // namespace

Progress::Progress(bool enabled, int64_t totalSteps, int epochs)
    : enabled_(enabled),
      terminal_(::isatty(STDOUT_FILENO) != 0),
      totalSteps_(totalSteps),
      epochs_(epochs),
      start_(std::chrono::steady_clock::now()),
      lastPrint_(start_) {}

void Progress::step(int64_t step, int epoch, int64_t stepInEpoch, int64_t stepsPerEpoch,
                    double loss, double samplesPerSecond) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  bool last = step == totalSteps_;
  if (!last && now - lastPrint_ < (terminal_ ? std::chrono::milliseconds(200) : kLineInterval)) {
    return;
  }
  lastPrint_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  double eta = elapsed / static_cast<double>(step) * static_cast<double>(totalSteps_ - step);
  std::string text =
      fmt::format("epoch {}/{} step {}/{}  loss {:.4f}  {:.0f} samples/s  ETA {}", epoch, epochs_,
                  stepInEpoch, stepsPerEpoch, loss, samplesPerSecond, duration(eta));
  if (terminal_) {
    constexpr int kWidth = 24;
    int filled = static_cast<int>(kWidth * step / std::max<int64_t>(totalSteps_, 1));
    std::printf("\r[%s%s] %s\033[K", std::string(filled, '#').c_str(),
                std::string(kWidth - filled, '.').c_str(), text.c_str());
    barOpen_ = true;
  } else {
    std::printf("%s\n", text.c_str());
  }
  std::fflush(stdout);
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  if (barOpen_) std::printf("\n");
  barOpen_ = false;
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

std::string describeEpoch(const EpochRecord& record, int epochs, size_t windowTokens) {
  if (windowTokens == 0) {
    return fmt::format("epoch {}/{}: train loss {:.4f}, test accuracy {:.2f}%, {:.0f} samples/s",
                       record.epoch, epochs, record.trainLoss, 100 * record.testAccuracy,
                       record.samplesPerSecond);
  }
  return fmt::format(
      "epoch {}/{}: train loss {:.4f}, held-out loss {:.4f} nats/token ({:.3f} bits/byte), {:.0f} "
      "tokens/s",
      record.epoch, epochs, record.trainLoss, record.heldOutLoss, bitsPerByte(record.heldOutLoss),
      record.samplesPerSecond * static_cast<double>(windowTokens - 1));
}

}  // namespace gradsync
