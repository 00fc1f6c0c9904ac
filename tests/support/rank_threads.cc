#include "rank_threads.h"

#include "common/rank_threads.h"

namespace gradsync::testing {

void runRankThreads(int size, const std::function<void(int rank)>& body) {
  gradsync::runRankThreads(size, [&](int rank) {
    body(rank);
    return 0;
  });
}

}  // namespace gradsync::testing
