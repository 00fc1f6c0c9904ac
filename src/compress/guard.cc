#include "compress/guard.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/check.h"
#include "common/logging.h"
#include "compress/error_feedback.h"
#include "gradsync/collectives.h"

namespace gradsync {
namespace {

constexpr uint64_t kCompressed = UINT64_MAX;  // denseFrom_ of a unit the guard left alone

std::string optimizerRuleWhy(const std::string& methods) {
  return fmt::format(
      "{} under Adam's per-coordinate scaling lost 6-15% of held-out loss on the language model "
      "(docs/performance.md, \"every compressor under AdamW\"); compress with a quantizer and "
      "--compress-momentum (Python: compress_momentum=True; 1-bit Adam), or give --guard off "
      "(guard=False) to compress anyway",
      methods);
}

// A ratio of two norms, or -1 (not measured) when there is nothing to compare with.
double ratio(double norm, double gradNorm) {
  return norm >= 0 && gradNorm > 0 ? norm / gradNorm : -1;
}

// max(largest, value), where a NaN, once seen, stays (std::max's result would depend on the
// order of the ranks).
void keepLarger(double& largest, double value) {
  if (!std::isnan(largest) && (std::isnan(value) || value > largest)) largest = value;
}

std::string joined(const std::vector<std::string>& names) {
  return fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

GuardDetector::GuardDetector(size_t units, GuardOptions options)
    : options_(options), overWindows_(units, 0), tripped_(units, false) {
  GS_CHECK(options.windowSteps >= 1 && options.windowsToConfirm >= 1);
  GS_CHECK(options.residualRatio > 0 && options.sentRatio > 0 && options.lossRatio > 0);
}

// NaN and infinite ratios (a gradient or residual that overflowed) count as past the threshold:
// they are the divergence the guard is for.
std::vector<GuardTrip> GuardDetector::observe(std::span<const GuardSignals> window) {
  GS_CHECK_EQ(window.size(), overWindows_.size());
  std::vector<GuardTrip> trips;
  for (size_t u = 0; u < window.size(); ++u) {
    if (tripped_[u]) continue;
    const GuardSignals& s = window[u];
    auto past = [](double value, double threshold) {
      return std::isnan(value) || value > threshold;
    };
    const bool residual = past(s.residualRatio, options_.residualRatio);
    const bool sent = past(s.sentRatio, options_.sentRatio);
    const bool misaligned = past(s.misalignment, options_.misalignment);
    if (!residual && !sent && !misaligned) {
      overWindows_[u] = 0;
      continue;
    }
    if (++overWindows_[u] < options_.windowsToConfirm) continue;
    tripped_[u] = true;
    // The alignment is reported as the cosine itself, and its threshold as the cosine's floor.
    trips.push_back(misaligned
                        ? GuardTrip{u, "alignment", 1 - s.misalignment, 1 - options_.misalignment}
                    : residual ? GuardTrip{u, "residual", s.residualRatio, options_.residualRatio}
                               : GuardTrip{u, "sent", s.sentRatio, options_.sentRatio});
  }
  return trips;
}

bool GuardDetector::observeLoss(double lossRatio) {
  if (lossTripped_) return false;
  if (!(std::isnan(lossRatio) || lossRatio > options_.lossRatio)) {
    lossOverWindows_ = 0;
    return false;
  }
  lossTripped_ = ++lossOverWindows_ >= options_.windowsToConfirm;
  return lossTripped_;
}

void GuardDetector::saveState(StateWriter& out) const {
  out.write(overWindows_);
  out.write(tripped_);
  out.write(std::vector<int64_t>{lossOverWindows_, lossTripped_ ? 1 : 0});
}

void GuardDetector::loadState(StateReader& in) {
  in.readExact(overWindows_);
  in.readExact(tripped_);
  std::vector<int64_t> loss(2);
  in.readExact(loss);
  lossOverWindows_ = loss[0];
  lossTripped_ = loss[1] != 0;
}

double dotProduct(std::span<const float> a, std::span<const float> b) {
  GS_CHECK_EQ(a.size(), b.size());
  constexpr size_t kLanes = 16;
  constexpr size_t kBlock = 4096;
  double total = 0;
  for (size_t begin = 0; begin < a.size(); begin += kBlock) {
    const size_t end = std::min(a.size(), begin + kBlock);
    float lanes[kLanes] = {};
    size_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      for (size_t j = 0; j < kLanes; ++j) lanes[j] += a[i + j] * b[i + j];
    }
    for (; i < end; ++i) lanes[0] += a[i] * b[i];
    for (float lane : lanes) total += lane;
  }
  return total;
}

double l2Norm(std::span<const float> values) {
  return std::sqrt(dotProduct(values, values));
}

CompressionGuard::CompressionGuard(GuardOptions options, int64_t warmupSteps,
                                   std::vector<GuardedUnit> units)
    : warmup_(std::max<int64_t>(warmupSteps, 0)),
      detector_(units.size(), options),
      lossTrend_(warmupSteps, options.windowSteps),
      units_(std::move(units)),
      denseFrom_(new std::atomic<uint64_t>[units_.size()]),
      records_(units_.size()) {
  for (size_t u = 0; u < units_.size(); ++u) {
    denseFrom_[u].store(kCompressed);
    if (!units_[u].compressed || !units_[u].failsUnderOptimizer) continue;
    denseFrom_[u].store(static_cast<uint64_t>(warmup_));
    events_.push_back(eventFor({u, "optimizer", 0, 0}, warmup_, -1));
  }
}

bool CompressionGuard::dense(size_t unit, uint64_t step) const {
  return step >= denseFrom_[unit].load(std::memory_order_acquire);
}

bool CompressionGuard::samples(uint64_t step) const {
  const auto w = static_cast<uint64_t>(detector_.options().windowSteps);
  return step >= static_cast<uint64_t>(warmup_) && (step - warmup_) % w == 0;
}

void CompressionGuard::record(size_t unit, uint64_t step, double gradNorm, double sentNorm,
                              double residualNorm, double sentDotGradient) {
  std::lock_guard<std::mutex> lock(mutex_);
  Record& r = records_[unit];
  if (r.step != step) r = Record{step, {}};
  const double scale = units_[unit].momentumScale;
  r.signals = {ratio(residualNorm, gradNorm * scale), ratio(sentNorm, gradNorm * scale),
               units_[unit].watchAlignment && gradNorm > 0 && sentNorm > 0
                   ? 1 - sentDotGradient / (gradNorm * sentNorm)
                   : -1};
}

double CompressionGuard::residualNorm(const Compressor& compressor) {
  const auto* ef = dynamic_cast<const ErrorFeedback*>(&compressor);
  return ef ? l2Norm(ef->residual()) : -1;
}

bool CompressionGuard::checksAt(uint64_t stepsEnded) const {
  const auto w = static_cast<uint64_t>(detector_.options().windowSteps);
  return stepsEnded > static_cast<uint64_t>(warmup_) && (stepsEnded - warmup_) % w == 0;
}

uint64_t CompressionGuard::sampledStep(uint64_t stepsEnded) const {
  return stepsEnded - static_cast<uint64_t>(detector_.options().windowSteps);
}

std::vector<GuardSignals> CompressionGuard::localSignals(uint64_t sampled) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<GuardSignals> signals(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) {
    if (records_[u].step == sampled) signals[u] = records_[u].signals;
  }
  return signals;
}

// One allgather of every rank's ratios (raw doubles, so every rank takes the maximum of the same
// bits) and loss contributions.
CompressionGuard::Window CompressionGuard::gather(Transport& transport, uint64_t tag,
                                                  uint64_t sampled) {
  const std::vector<GuardSignals> mine = localSignals(sampled);
  // Per rank: three ratios per unit, then its LossTrend contribution.
  const size_t perRank = 3 * units_.size() + LossTrend::kValues;
  const auto ranks = static_cast<size_t>(transport.size());
  std::vector<double> all(perRank * ranks);
  double* own = all.data() + perRank * static_cast<size_t>(transport.rank());
  for (size_t u = 0; u < mine.size(); ++u) {
    own[3 * u] = mine[u].residualRatio;
    own[3 * u + 1] = mine[u].sentRatio;
    own[3 * u + 2] = mine[u].misalignment;
  }
  const LossTrend::Contribution loss = lossTrend_.takeWindow();
  std::copy(loss.begin(), loss.end(), own + 3 * units_.size());
  std::vector<size_t> counts(static_cast<size_t>(transport.size()), perRank * sizeof(double));
  allgatherv(transport, {reinterpret_cast<uint8_t*>(all.data()), all.size() * sizeof(double)},
             counts, CollectiveOptions{.tag = tag});
  std::vector<GuardSignals> window(units_.size());
  std::vector<LossTrend::Contribution> losses(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    for (size_t u = 0; u < units_.size(); ++u) {
      keepLarger(window[u].residualRatio, all[r * perRank + 3 * u]);
      keepLarger(window[u].sentRatio, all[r * perRank + 3 * u + 1]);
      keepLarger(window[u].misalignment, all[r * perRank + 3 * u + 2]);
    }
    const double* tail = all.data() + r * perRank + 3 * units_.size();
    std::copy(tail, tail + LossTrend::kValues, losses[r].begin());
  }
  return {std::move(window), LossTrend::ratio(losses)};
}

// Decides on the gathered window; every rank the same.
std::vector<GuardEvent> CompressionGuard::check(Transport& transport, uint64_t tag,
                                                uint64_t stepsEnded) {
  return decide(gather(transport, tag, sampledStep(stepsEnded)), stepsEnded, -1);
}

std::vector<GuardEvent> CompressionGuard::checkAlone(int rank, uint64_t stepsEnded) {
  const LossTrend::Contribution loss = lossTrend_.takeWindow();
  return decide({localSignals(sampledStep(stepsEnded)), LossTrend::ratio({&loss, 1})}, stepsEnded,
                rank);
}

std::vector<GuardEvent> CompressionGuard::decide(const Window& window, uint64_t stepsEnded,
                                                 int rank) {
  const double lossRatio = window.lossRatio;
  GS_LOG(kDebug, "guard window ending at step {}: loss {:.3f}x the dense warm-up's", stepsEnded,
         lossRatio);
  for (size_t u = 0; u < units_.size(); ++u) {
    if (units_[u].compressed && window.signals[u].sentRatio >= 0) {
      GS_LOG(kDebug,
             "guard window ending at step {}: unit {} ({}) residual {:.2f}x, sent {:.2f}x, "
             "misalignment {:.3f}",
             stepsEnded, u, joined(units_[u].names), window.signals[u].residualRatio,
             window.signals[u].sentRatio, window.signals[u].misalignment);
    }
  }
  std::vector<GuardTrip> trips = detector_.observe(window.signals);
  if (detector_.observeLoss(lossRatio)) {  // every unit the trips above leave compressed
    for (size_t u = 0; u < units_.size(); ++u) {
      if (std::none_of(trips.begin(), trips.end(), [&](const GuardTrip& t) { return t.unit == u; }))
        trips.push_back({u, "loss", lossRatio, detector_.options().lossRatio});
    }
  }
  std::vector<GuardEvent> events;
  for (const GuardTrip& trip : trips) {
    // Every unit holding one of the tripped unit's tensors: p3's slices of a tensor go together.
    for (size_t u = 0; u < units_.size(); ++u) {
      if (u != trip.unit &&
          std::none_of(units_[u].tensors.begin(), units_[u].tensors.end(), [&](int t) {
            const auto& ts = units_[trip.unit].tensors;
            return std::find(ts.begin(), ts.end(), t) != ts.end();
          })) {
        continue;
      }
      if (denseFrom_[u].load() != kCompressed || !units_[u].compressed) continue;
      denseFrom_[u].store(stepsEnded, std::memory_order_release);
      GuardTrip unitTrip = trip;
      unitTrip.unit = u;
      events.push_back(eventFor(unitTrip, stepsEnded, rank));
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  events_.insert(events_.end(), events.begin(), events.end());
  return events;
}

std::string CompressionGuard::startNotice() const {
  std::vector<std::string> methods;
  size_t count = 0;
  for (const GuardEvent& e : events()) {
    if (e.signal != "optimizer") continue;
    ++count;
    if (std::find(methods.begin(), methods.end(), e.method) == methods.end()) {
      methods.push_back(e.method);
    }
  }
  if (count == 0) return "";
  return fmt::format("guard: {} of {} units -> dense at step {}: {}", count, units_.size(), warmup_,
                     optimizerRuleWhy(joined(methods)));
}

GuardEvent CompressionGuard::eventFor(const GuardTrip& trip, uint64_t from, int rank) const {
  const GuardedUnit& unit = units_[trip.unit];
  std::string what;
  if (trip.signal == "optimizer") {
    GuardEvent event{.step = static_cast<int64_t>(from),
                     .unit = trip.unit,
                     .method = unit.method,
                     .signal = trip.signal,
                     .rank = rank};
    event.tensors = unit.names;
    event.reason = fmt::format("guard: unit {} (tensors {}) -> dense at step {}: {}", trip.unit,
                               joined(unit.names), from, optimizerRuleWhy(unit.method));
    return event;
  }
  if (trip.signal == "alignment") {
    what = fmt::format("what it sent is at cos {:.3f} to the gradient (threshold: below {:.2f}",
                       trip.ratio, trip.threshold);
  } else if (trip.signal == "loss") {
    what = fmt::format("the training loss is {:.2f}x the dense warm-up's (threshold {:.2f}x",
                       trip.ratio, trip.threshold);
  } else {
    what = fmt::format("{} norm {:.1f}x the gradient's (threshold {:.0f}x",
                       trip.signal == "residual" ? "error-feedback residual" : "sent", trip.ratio,
                       trip.threshold);
  }
  GuardEvent event{.step = static_cast<int64_t>(from),
                   .unit = trip.unit,
                   .method = unit.method,
                   .signal = trip.signal,
                   .ratio = trip.ratio,
                   .threshold = trip.threshold,
                   .rank = rank};
  event.tensors = unit.names;
  event.reason = fmt::format(
      "guard: unit {} (tensors {}) -> dense at step {}{}: {}, {} windows of {} steps); {} dropped "
      "its residual",
      trip.unit, joined(unit.names), from,
      rank < 0 ? "" : fmt::format(" in rank {}'s pushes", rank), what,
      detector_.options().windowsToConfirm, detector_.options().windowSteps, unit.method);
  return event;
}

void CompressionGuard::saveState(StateWriter& out) const {
  std::vector<uint64_t> denseFrom(units_.size());
  for (size_t u = 0; u < units_.size(); ++u) denseFrom[u] = denseFrom_[u].load();
  out.write(denseFrom);
  detector_.saveState(out);
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<uint64_t> steps;
  std::vector<double> ratios;
  for (const Record& r : records_) {
    steps.push_back(r.step);
    ratios.push_back(r.signals.residualRatio);
    ratios.push_back(r.signals.sentRatio);
    ratios.push_back(r.signals.misalignment);
  }
  out.write(steps);
  out.write(ratios);
  lossTrend_.saveState(out);
}

void CompressionGuard::loadState(StateReader& in) {
  std::vector<uint64_t> denseFrom(units_.size());
  in.readExact(denseFrom);
  for (size_t u = 0; u < units_.size(); ++u) denseFrom_[u].store(denseFrom[u]);
  detector_.loadState(in);
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<uint64_t> steps(units_.size());
  std::vector<double> ratios(3 * units_.size());
  in.readExact(steps);
  in.readExact(ratios);
  for (size_t u = 0; u < units_.size(); ++u) {
    records_[u] = Record{steps[u], {ratios[3 * u], ratios[3 * u + 1], ratios[3 * u + 2]}};
  }
  lossTrend_.loadState(in);
}

std::vector<GuardEvent> CompressionGuard::events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_;
}

}  // namespace gradsync
