#include "convergence_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

namespace gradsync::testing {

uint64_t testSeed() {
  const char* seed = std::getenv("GRADSYNC_TEST_SEED");
  return seed ? std::stoull(seed) : 0;
}

void report(const std::string& name, double accuracy, double reference) {
  std::printf("CONVERGENCE case=%s accuracy=%.4f reference=%.4f seed=%llu\n", name.c_str(),
              accuracy, reference, static_cast<unsigned long long>(testSeed()));
  std::fflush(stdout);
}

void expectConverged(const std::string& name, double accuracy, double reference, Bound bound) {
  std::printf(
      "%-14s accuracy %.2f%% (reference %.2f%%, gap %.2f; allowed gap %.2f, floor %.2f%%)\n",
      name.c_str(), 100 * accuracy, 100 * reference, 100 * (reference - accuracy),
      100 * bound.maxGap, 100 * bound.floor);
  report(name, accuracy, reference);
  EXPECT_GE(accuracy, reference - bound.maxGap) << name << ": gap to its reference";
  EXPECT_GE(accuracy, bound.floor) << name << ": absolute floor";
}

}  // namespace gradsync::testing
