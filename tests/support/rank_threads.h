// Runs a function as `size` ranks, one thread each, and rethrows the first failure in the
// calling thread (after joining all threads, so no rank outlives the test).
#pragma once

#include <functional>

namespace gradsync::testing {

void runRankThreads(int size, const std::function<void(int rank)>& body);

}  // namespace gradsync::testing
