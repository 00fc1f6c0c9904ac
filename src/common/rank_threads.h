// Runs ranks as threads of this process (--transport loopback, tests).
#pragma once

#include <functional>

namespace gradsync {

// Runs body(rank) on `size` threads; returns the first non-zero result, rethrows the first
// exception after all threads have finished.
int runRankThreads(int size, const std::function<int(int rank)>& body);

}  // namespace gradsync
