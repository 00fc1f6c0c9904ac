#include "sync/straggler.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/check.h"
#include "gradsync/collectives.h"

namespace gradsync {

std::string describe(const StragglerReport& report) {
  return fmt::format(
      "rank {} is {:.1f}x slower than the others (compute {:.1f} ms per step against their "
      "{:.1f} ms) since step {}",
      report.rank, report.slower, report.computeMs, report.othersMs, report.sinceStep);
}

StragglerDetector::StragglerDetector(int worldSize, StragglerOptions options)
    : options_(options),
      slowWindows_(static_cast<size_t>(worldSize), 0),
      slowSince_(static_cast<size_t>(worldSize), 0),
      named_(static_cast<size_t>(worldSize), false) {
  GS_CHECK(worldSize >= 1 && options.windowsToConfirm >= 1 && options.slowerRatio > 1);
}

// The median of the other ranks, not of all: with two ranks, the median of both would hide
// half of the slow one's excess.
bool StragglerDetector::isSlow(int rank, std::span<const double> computeMs,
                               double& othersMs) const {
  std::vector<double> others;
  for (size_t r = 0; r < computeMs.size(); ++r)
    if (static_cast<int>(r) != rank) others.push_back(computeMs[r]);
  if (others.empty()) return false;
  std::sort(others.begin(), others.end());
  const size_t middle = others.size() / 2;
  othersMs = others.size() % 2 == 1 ? others[middle] : (others[middle - 1] + others[middle]) / 2;
  const double mine = computeMs[static_cast<size_t>(rank)];
  return mine >= options_.slowerRatio * othersMs && mine - othersMs >= options_.minExcessMs;
}

std::vector<StragglerReport> StragglerDetector::observe(int64_t firstStep, int64_t stepsDone,
                                                        std::span<const double> computeMsPerStep) {
  GS_CHECK(computeMsPerStep.size() == slowWindows_.size());
  std::vector<StragglerReport> named;
  for (size_t r = 0; r < slowWindows_.size(); ++r) {
    const int rank = static_cast<int>(r);
    double othersMs = 0;
    if (!isSlow(rank, computeMsPerStep, othersMs)) {
      slowWindows_[r] = 0;
      named_[r] = false;
      continue;
    }
    if (slowWindows_[r]++ == 0) slowSince_[r] = firstStep;
    if (named_[r] || slowWindows_[r] < options_.windowsToConfirm) continue;
    named_[r] = true;
    const double mine = computeMsPerStep[r];
    named.push_back(
        {rank, othersMs > 0 ? mine / othersMs : 0, mine, othersMs, slowSince_[r], stepsDone});
  }
  return named;
}

StragglerWatch::StragglerWatch(Transport& transport, StragglerOptions options, uint64_t tag)
    : transport_(transport), options_(options), tag_(tag), detector_(transport.size(), options) {
  GS_CHECK(options.windowSteps >= 1);
}

std::vector<StragglerReport> StragglerWatch::afterStep(int64_t step, double computeMs) {
  if (transport_.size() < 2) return {};
  if (windowFirst_ < 0) windowFirst_ = step - 1;
  windowMs_.push_back(computeMs);
  if (static_cast<int64_t>(windowMs_.size()) < options_.windowSteps) return {};
  // Each rank's median step, not its mean: a few steps stretched by a pause (the thread
  // preempted on a loaded host, a page-fault burst, a log flush) move a mean of ten short steps
  // by as much as a persistently slow rank does, but not the median. Gathered as raw doubles:
  // every rank decides on the same bits.
  std::vector<double> medians(static_cast<size_t>(transport_.size()));
  const auto middle = windowMs_.begin() + static_cast<std::ptrdiff_t>(windowMs_.size() / 2);
  std::nth_element(windowMs_.begin(), middle, windowMs_.end());
  medians[static_cast<size_t>(transport_.rank())] = *middle;
  std::vector<size_t> counts(medians.size(), sizeof(double));
  allgatherv(transport_,
             {reinterpret_cast<uint8_t*>(medians.data()), medians.size() * sizeof(double)}, counts,
             CollectiveOptions{.tag = tag_});
  std::vector<StragglerReport> named = detector_.observe(windowFirst_, step, medians);
  reports_.insert(reports_.end(), named.begin(), named.end());
  windowMs_.clear();
  windowFirst_ = -1;
  return named;
}

}  // namespace gradsync
