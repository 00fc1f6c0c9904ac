// The life of embedding server `shard`: as a process of its own (one incarnation; an injected
// failure is a real SIGKILL, and the launcher respawns the process), or as a thread that plays
// every incarnation in turn (--transport loopback, tests, the simulated-clock replay: an injected
// failure crashes the incarnation, which breaks its star as a killed process would, and the next
// one starts). Either way a replacement announces itself through the store, the workers join its
// new star, and it restores its shard when they ask (ps/embedding_server.h).
#pragma once

#include <optional>
#include <vector>

#include "ckpt/cpr_failures.h"
#include "ps/embedding_links.h"
#include "ps/embedding_server.h"

namespace gradsync {

struct EmbeddingHostOptions {
  EmbeddingServerOptions server;        // shard, spec, workers, rule, mode, checkpoints, timeout
  std::optional<FailureSpec> failures;  // injected failures (incarnation n dies at the n-th)
  int shards = 1;                       // every server's failures come from one trace
  std::vector<double> deaths;           // instead: incarnation n dies at deaths[n - 1] (tests)
};

// One incarnation in this process: returns once every worker stopped; at its injected failure the
// process kills itself with SIGKILL (nothing runs after it, as with `kill -9`).
void serveEmbeddingProcess(EmbeddingLinks& links, const EmbeddingHostOptions& options);

// Every incarnation on this thread, until the workers stop; with `respawn` false the first
// injected failure ends it (the workers then time out naming the server). Returns the failures.
int hostEmbeddingThread(EmbeddingLinks& links, const EmbeddingHostOptions& options, bool respawn);

}  // namespace gradsync
