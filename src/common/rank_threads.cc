#include "common/rank_threads.h"

#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "common/logging.h"

namespace gradsync {

int runRankThreads(int size, const std::function<int(int rank)>& body) {
  std::mutex mutex;
  std::exception_ptr error;
  int result = 0;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      setThreadLogRank(rank);
      try {
        int code = body(rank);
        std::lock_guard<std::mutex> lock(mutex);
        if (result == 0) result = code;
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  if (error) std::rethrow_exception(error);
  return result;
}

}  // namespace gradsync
