#include "ps/embedding_links.h"

#include <thread>

#include <fmt/format.h>

#include "common/socket.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

std::string key(int server, const std::string& name) {
  return fmt::format("emb/{}/{}", server, name);
}

}  // namespace

EmbeddingLinks::EmbeddingLinks(Store& store, TcpTransportOptions tcp, int workers, int rank)
    : store_(store), tcp_(std::move(tcp)), workers_(workers), rank_(rank) {}

int EmbeddingLinks::takeIncarnation(int server) {
  return static_cast<int>(store_.add(key(server, "incarnations"), 1));
}

std::unique_ptr<Transport> EmbeddingLinks::join(int server, int incarnation, int rank) {
  TcpTransportOptions options = tcp_;
  options.keyPrefix = fmt::format("emb/{}/{}", server, incarnation);
  return connectTcpTransport(store_, rank, workers_ + 1, options);
}

std::unique_ptr<Transport> EmbeddingLinks::serve(int server, int incarnation) {
  store_.setString(key(server, "ready"), std::to_string(incarnation));
  return join(server, incarnation, workers_);
}

void EmbeddingLinks::refuse(int server, const std::string& message) {
  store_.setString(key(server, "ready"), "error: " + message);
}

std::pair<std::unique_ptr<Transport>, int> EmbeddingLinks::connect(int server, int after) {
  const Deadline deadline(tcp_.transport.timeout);
  auto pause = std::chrono::milliseconds(5);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining());
    std::string ready;
    try {
      ready = store_.getString(key(server, "ready"), std::max(left, std::chrono::milliseconds(1)));
    } catch (const TimeoutError&) {
    }
    if (ready.starts_with("error: ")) {
      throw ConfigError(
          fmt::format("embedding server {} refused to start: {}", server, ready.substr(7)),
          {.rank = rank_});
    }
    const int incarnation = ready.empty() ? 0 : std::stoi(ready);
    if (incarnation > after) return {join(server, incarnation, rank_), incarnation};
    if (deadline.expired()) {
      throw TimeoutError(
          fmt::format("embedding server {} did not come back within {} s (newest incarnation "
                      "{})",
                      server, tcp_.transport.timeout.count() / 1000.0, incarnation),
          {.rank = rank_,
           .operation = "embedding recovery",
           .hint = "a failed server must be respawned: run the job with `gradsync train "
                   "--recovery ...` (it supervises its processes) or `gradsync launch --respawn`"});
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(100));
  }
}

}  // namespace gradsync
