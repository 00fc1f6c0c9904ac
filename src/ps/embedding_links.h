// How the workers of a job and its embedding servers find each other through the rendezvous
// store, including a failed server's replacement (docs/algorithms.md, "Embeddings on parameter
// servers"). Keys, for server s:
//   emb/<s>/incarnations   counter: each server process (or thread) that starts takes the next
//                          number (1 for the first)
//   emb/<s>/ready          the newest incarnation that serves, or "error: <message>" when it
//                          refused to start (the workers then fail with that message)
//   emb/<s>/<n>/...        incarnation n's star transport (server rank = workers)
// Thread-safe (the store is); each call blocks up to the timeout.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "gradsync/store.h"
#include "gradsync/tcp.h"
#include "ps/embedding_client.h"

namespace gradsync {

class EmbeddingLinks final : public EmbeddingConnector {
 public:
  // `tcp`: job id, token, TLS, address to advertise and the transports' timeout (also the bound
  // on waiting for a replacement). `rank`: this worker's rank among `workers` (servers: any).
  EmbeddingLinks(Store& store, TcpTransportOptions tcp, int workers, int rank);

  // Server side: this process's incarnation of server `server` (1 for the first).
  int takeIncarnation(int server);
  // Announces that incarnation `n` serves, then connects its star (blocks until every worker
  // joined it).
  std::unique_ptr<Transport> serve(int server, int incarnation);
  // Tells the workers that server `server` cannot start (they fail with `message`).
  void refuse(int server, const std::string& message);

  // Worker side (EmbeddingConnector): waits for an incarnation newer than `after`, polling the
  // store, then joins its star. TimeoutError naming the server when none comes in time.
  std::pair<std::unique_ptr<Transport>, int> connect(int server, int after) override;

 private:
  std::unique_ptr<Transport> join(int server, int incarnation, int rank);

  Store& store_;
  TcpTransportOptions tcp_;
  int workers_;
  int rank_;
};

}  // namespace gradsync
