#include "rank_threads.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/logging.h"

namespace gradsync::testing {

void runRankThreads(int size, const std::function<void(int rank)>& body) {
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(size);
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      setThreadLogRank(rank);
      try {
        body(rank);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace gradsync::testing
