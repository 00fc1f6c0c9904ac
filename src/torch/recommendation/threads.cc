// A whole recommendation job in this process (`--transport loopback`, tests, the simulated-clock
// replay): workers and embedding servers as threads. Torch-free.
#include <thread>

#include "common/rank_threads.h"
#include "gradsync/loopback.h"
#include "gradsync/store.h"
#include "ps/embedding_host.h"
#include "torch/recommendation/recommendation.h"

namespace gradsync {

std::vector<RecommendationResult> trainRecommendationThreads(int workers,
                                                             const RecommendationOptions& options,
                                                             const TransportOptions& link) {
  const int shards = options.train.strategy.servers;
  std::shared_ptr<Store> store = makeInMemoryStore();
  TcpTransportOptions tcp;
  tcp.transport = link;
  std::vector<std::thread> servers;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(shards));
  for (int s = 0; s < shards; ++s) {
    servers.emplace_back([&, s] {
      try {
        EmbeddingLinks links(*store, tcp, workers, workers + s);
        hostEmbeddingThread(links, embeddingHostOptions(options, s, workers), true);
      } catch (...) {
        errors[static_cast<size_t>(s)] = std::current_exception();
      }
    });
  }
  LoopbackFabric fabric(workers, link);
  std::vector<RecommendationResult> results(static_cast<size_t>(workers));
  try {
    runRankThreads(workers, [&](int rank) {
      auto ring = fabric.connect(rank);
      EmbeddingLinks links(*store, tcp, workers, rank);
      results[static_cast<size_t>(rank)] =
          trainRecommendation(*ring, shards > 0 ? &links : nullptr, options);
      return 0;
    });
  } catch (...) {  // the workers told the servers they stopped (EmbeddingClient's destructor)
    for (auto& t : servers) t.join();
    throw;
  }
  for (auto& t : servers) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results;
}

}  // namespace gradsync
