#include "ps/embedding_host.h"

#include <signal.h>

#include "common/logging.h"

namespace gradsync {
namespace {

EmbeddingServerOptions incarnation(const EmbeddingHostOptions& options, int n) {
  EmbeddingServerOptions server = options.server;
  server.replacement = n > 1;
  if (!options.deaths.empty()) {
    if (static_cast<size_t>(n) <= options.deaths.size()) server.deathClock = options.deaths[n - 1];
  } else if (options.failures) {
    server.deathClock = nthFailureOf(*options.failures, options.shards, server.shard, n);
  }
  return server;
}

}  // namespace

void serveEmbeddingProcess(EmbeddingLinks& links, const EmbeddingHostOptions& options) {
  const int shard = options.server.shard;
  const int n = links.takeIncarnation(shard);
  EmbeddingServerOptions server = incarnation(options, n);
  server.die = [] { ::raise(SIGKILL); };
  if (n > 1) GS_LOG(kWarn, "embedding server {}: incarnation {} starts", shard, n);
  std::unique_ptr<Transport> star = links.serve(shard, n);
  EmbeddingServer running(*star, server);
  running.wait();
}

int hostEmbeddingThread(EmbeddingLinks& links, const EmbeddingHostOptions& options, bool respawn) {
  const int shard = options.server.shard;
  for (int failures = 0;;) {
    const int n = links.takeIncarnation(shard);
    EmbeddingServerOptions server = incarnation(options, n);
    server.die = nullptr;  // the server crashes itself: its star breaks, its state is dropped
    std::unique_ptr<Transport> star = links.serve(shard, n);
    EmbeddingServer running(*star, server);
    if (running.wait() == EmbeddingServer::End::kStopped) return failures;
    ++failures;
    GS_LOG(kWarn, "embedding server {}: incarnation {} failed (injected){}", shard, n,
           respawn ? "; starting a replacement" : "");
    if (!respawn) return failures;
  }
}

}  // namespace gradsync
