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
  windowMs_ += computeMs;
  if (++windowSteps_ < options_.windowSteps) return {};
  // Each rank's mean, gathered as raw doubles: every rank decides on the same bits.
  std::vector<double> means(static_cast<size_t>(transport_.size()));
  means[static_cast<size_t>(transport_.rank())] = windowMs_ / static_cast<double>(windowSteps_);
  std::vector<size_t> counts(means.size(), sizeof(double));
  allgatherv(transport_, {reinterpret_cast<uint8_t*>(means.data()), means.size() * sizeof(double)},
             counts, CollectiveOptions{.tag = tag_});
  std::vector<StragglerReport> named = detector_.observe(windowFirst_, step, means);
  reports_.insert(reports_.end(), named.begin(), named.end());
  windowMs_ = 0;
  windowSteps_ = 0;
  windowFirst_ = -1;
  return named;
}

}  // namespace gradsync
