#include "ps/embedding_client.h"

#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/logging.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {}  // namespace

// A request in flight to one server: its works and the buffers they use (kept until they end).
struct EmbeddingClient::Exchange {
  EmbHeader header;
  std::vector<uint8_t> payload;
  EmbReply reply;
  std::vector<uint8_t> answer;
  std::vector<WorkPtr> sends;
  WorkPtr replyWork;
};

namespace {

// Fails every exchange's transport before a fatal error leaves the function whose buffers they
// use (a broken transport no longer touches them).
template <typename Body>
auto guarded(std::vector<std::unique_ptr<Transport>*> stars, Body body) {
  try {
    return body();
  } catch (...) {
    for (auto* star : stars) {
      if (*star) (*star)->abort(std::current_exception());
    }
    throw;
  }
}

}  // namespace

EmbeddingClient::EmbeddingClient(const EmbeddingSpec& spec, int workers, int rank,
                                 EmbeddingConnector& connector)
    : spec_(spec), workers_(workers), rank_(rank), connector_(connector) {
  links_.resize(static_cast<size_t>(spec.shards));
  for (int s = 0; s < spec.shards; ++s) reconnect(s);
}

EmbeddingClient::~EmbeddingClient() {
  EmbHeader stop;
  stop.request = EmbRequest::kStop;
  for (size_t s = 0; s < links_.size(); ++s) {
    Link& link = links_[s];
    if (!link.star || !link.lost.empty()) continue;
    try {
      link.star->send(workers_, tags::kEmbRequest, &stop, sizeof stop)->wait();
    } catch (const Error& e) {
      GS_LOG(kWarn, "worker {}: could not tell embedding server {} it stopped: {}", rank_, s,
             e.what());
    }
  }
}

void EmbeddingClient::reconnect(int server) {
  Link& link = links_[static_cast<size_t>(server)];
  link.star.reset();
  auto [star, incarnation] = connector_.connect(server, link.incarnation);
  GS_CHECK_EQ(star->size(), workers_ + 1);
  link.star = std::move(star);
  link.incarnation = incarnation;
  link.lost.clear();
}

void EmbeddingClient::markLost(int server, const Error& error) {
  Link& link = links_[static_cast<size_t>(server)];
  if (link.lost.empty()) {
    link.lost = error.what();
    GS_LOG(kWarn, "worker {}: embedding server {} (incarnation {}) lost: {}", rank_, server,
           link.incarnation, link.lost);
  }
}

std::vector<bool> EmbeddingClient::pull(uint64_t step, uint64_t epoch, uint32_t flags,
                                        const EmbeddingBatch& batch,
                                        std::vector<std::vector<float>>& tableValues) {
  return fetch(EmbRequest::kPull, step, epoch, flags, batch, tableValues);
}

void EmbeddingClient::read(uint64_t step, uint64_t epoch, const EmbeddingBatch& batch,
                           std::vector<std::vector<float>>& tableValues) {
  std::vector<bool> ok = fetch(EmbRequest::kRead, step, epoch, 0, batch, tableValues);
  for (size_t s = 0; s < ok.size(); ++s) {
    if (!ok[s]) {
      throw PeerLostError(
          fmt::format("embedding server {} was lost during an evaluation: {}", s, links_[s].lost),
          {.rank = rank_, .operation = "embedding read"});
    }
  }
}

std::vector<bool> EmbeddingClient::fetch(EmbRequest request, uint64_t step, uint64_t epoch,
                                         uint32_t flags, const EmbeddingBatch& batch,
                                         std::vector<std::vector<float>>& tableValues) {
  const auto dim = static_cast<size_t>(spec_.dim);
  tableValues.resize(batch.rows.size());
  for (size_t t = 0; t < batch.rows.size(); ++t) tableValues[t].resize(batch.rows[t].size() * dim);
  if (request == EmbRequest::kPull) saveReport_ = {};
  std::vector<bool> ok(links_.size(), false);
  std::vector<Exchange> exchanges(links_.size());
  std::vector<std::unique_ptr<Transport>*> stars;
  for (auto& link : links_) stars.push_back(&link.star);
  guarded(stars, [&] {
    for (size_t s = 0; s < links_.size(); ++s) {  // every request first: servers work in parallel
      if (!links_[s].star || !links_[s].lost.empty()) continue;
      Exchange& x = exchanges[s];
      std::vector<uint64_t> keys = batch.keys(static_cast<int>(s));
      x.header = {
          .request = request, .flags = flags, .step = step, .epoch = epoch, .rows = keys.size()};
      x.payload.resize(keys.size() * sizeof(uint64_t));
      if (!keys.empty()) std::memcpy(x.payload.data(), keys.data(), x.payload.size());
      Transport& star = *links_[s].star;
      x.sends.push_back(star.send(workers_, tags::kEmbRequest, &x.header, sizeof x.header));
      if (!x.payload.empty()) {
        x.sends.push_back(
            star.send(workers_, tags::kEmbPayload, x.payload.data(), x.payload.size()));
      }
      bytesPulled_ += sizeof x.header + x.payload.size();
      x.replyWork = star.recv(workers_, tags::kEmbReply, &x.reply, sizeof x.reply);
    }
    for (size_t s = 0; s < links_.size(); ++s) {
      if (exchanges[s].replyWork)
        ok[s] = receiveRows(static_cast<int>(s), exchanges[s], batch, tableValues);
    }
  });
  return ok;
}

// The answer of server `server` to `x`, scattered into the tables' rows; false when the server
// is lost (PeerLostError), other failures throw.
bool EmbeddingClient::receiveRows(int server, Exchange& x, const EmbeddingBatch& batch,
                                  std::vector<std::vector<float>>& tableValues) {
  const auto dim = static_cast<size_t>(spec_.dim);
  try {
    for (auto& send : x.sends) send->wait();
    x.replyWork->wait();
    x.answer.resize(x.reply.payloadBytes);
    if (x.reply.rows != x.header.rows || x.answer.size() != x.header.rows * dim * sizeof(float)) {
      throw ProtocolError(fmt::format("embedding server {} answered {} rows ({} bytes) for {}",
                                      server, x.reply.rows, x.answer.size(), x.header.rows),
                          {.rank = rank_, .peer = workers_});
    }
    if (!x.answer.empty()) {
      links_[server]
          .star->recv(workers_, tags::kEmbReplyPayload, x.answer.data(), x.answer.size())
          ->wait();
    }
  } catch (const PeerLostError& e) {
    markLost(server, e);
    return false;
  }
  const auto* values = reinterpret_cast<const float*>(x.answer.data());
  const auto& rows = batch.byServer[static_cast<size_t>(server)];
  for (size_t i = 0; i < rows.size(); ++i) {
    auto [table, index] = rows[i];
    std::memcpy(&tableValues[table][index * dim], values + i * dim, dim * sizeof(float));
  }
  if (x.reply.saveKind != 0) {
    saveReport_.kind |= x.reply.saveKind;
    saveReport_.step = x.reply.saveStep;
    saveReport_.rows += x.reply.savedRows;
    saveReport_.seconds = std::max(saveReport_.seconds, x.reply.saveSeconds);
  }
  return true;
}

std::vector<bool> EmbeddingClient::push(uint64_t step, uint64_t epoch, uint32_t flags, double clock,
                                        const EmbeddingBatch& batch,
                                        const std::vector<std::vector<float>>& tableGradients) {
  const auto dim = static_cast<size_t>(spec_.dim);
  std::vector<bool> ok(links_.size(), false);
  std::vector<Exchange> exchanges(links_.size());
  std::vector<std::unique_ptr<Transport>*> stars;
  for (auto& link : links_) stars.push_back(&link.star);
  guarded(stars, [&] {
    for (size_t s = 0; s < links_.size(); ++s) {
      const std::vector<uint64_t> keys = batch.keys(static_cast<int>(s));
      const std::vector<uint32_t> accesses = batch.accesses(static_cast<int>(s));
      for (uint32_t a : accesses) links_[s].accesses += a;  // pushed, whether it arrives or not
      if (!links_[s].star || !links_[s].lost.empty()) continue;
      Exchange& x = exchanges[s];
      const size_t n = keys.size();
      x.header = {.request = EmbRequest::kPush,
                  .flags = flags,
                  .step = step,
                  .epoch = epoch,
                  .clock = clock,
                  .rows = n};
      x.payload.resize(embPushBytes(n, spec_.dim));
      uint8_t* out = x.payload.data();
      if (n > 0) {
        std::memcpy(out, keys.data(), n * sizeof(uint64_t));
        std::memcpy(out + n * sizeof(uint64_t), accesses.data(), n * sizeof(uint32_t));
      }
      auto* gradients = reinterpret_cast<float*>(out + n * (sizeof(uint64_t) + sizeof(uint32_t)));
      const auto& rows = batch.byServer[s];
      for (size_t i = 0; i < rows.size(); ++i) {
        auto [table, index] = rows[i];
        std::memcpy(gradients + i * dim, &tableGradients[table][index * dim], dim * sizeof(float));
      }
      Transport& star = *links_[s].star;
      x.sends.push_back(star.send(workers_, tags::kEmbRequest, &x.header, sizeof x.header));
      if (!x.payload.empty()) {
        x.sends.push_back(
            star.send(workers_, tags::kEmbPayload, x.payload.data(), x.payload.size()));
      }
      bytesPushed_ += sizeof x.header + x.payload.size();
    }
    for (size_t s = 0; s < links_.size(); ++s) {
      if (exchanges[s].sends.empty()) continue;
      try {
        for (auto& send : exchanges[s].sends) send->wait();
        ok[s] = true;
      } catch (const PeerLostError& e) {
        markLost(static_cast<int>(s), e);
      }
    }
  });
  return ok;
}

// Sends `header` (with each server's own access count) to `servers` and gathers the answers.
std::vector<RecoveryAnswer> EmbeddingClient::ask(const std::vector<int>& servers,
                                                 EmbHeader header) {
  std::vector<Exchange> exchanges(servers.size());
  std::vector<std::unique_ptr<Transport>*> stars;
  for (auto& link : links_) stars.push_back(&link.star);
  return guarded(stars, [&] {
    for (size_t i = 0; i < servers.size(); ++i) {
      Link& link = links_[static_cast<size_t>(servers[i])];
      Exchange& x = exchanges[i];
      x.header = header;
      x.header.accesses = link.accesses;
      x.sends.push_back(link.star->send(workers_, tags::kEmbRequest, &x.header, sizeof x.header));
      x.replyWork = link.star->recv(workers_, tags::kEmbReply, &x.reply, sizeof x.reply);
    }
    std::vector<RecoveryAnswer> answers;
    for (size_t i = 0; i < servers.size(); ++i) {
      Exchange& x = exchanges[i];
      Link& link = links_[static_cast<size_t>(servers[i])];
      x.sends[0]->wait();
      x.replyWork->wait();
      RecoveryAnswer answer{servers[i], x.reply, ""};
      if (x.reply.payloadBytes > 0) {
        x.answer.resize(x.reply.payloadBytes);
        link.star->recv(workers_, tags::kEmbReplyPayload, x.answer.data(), x.answer.size())->wait();
        answer.message.assign(x.answer.begin(), x.answer.end());
      }
      answers.push_back(std::move(answer));
    }
    return answers;
  });
}

std::vector<RecoveryAnswer> EmbeddingClient::resume(const std::vector<int>& failed, uint64_t step,
                                                    uint64_t epoch) {
  for (int s : failed) reconnect(s);
  std::vector<RecoveryAnswer> answers =
      ask(failed, {.request = EmbRequest::kResume, .step = step, .epoch = epoch});
  for (const RecoveryAnswer& a : answers) {
    if (!a.reply.ok) {
      throw DataError(fmt::format("embedding server {} cannot resume: {}", a.server, a.message),
                      {.rank = rank_, .operation = "partial recovery"});
    }
  }
  return answers;
}

std::vector<RecoveryAnswer> EmbeddingClient::restore(const std::vector<int>& failed, uint64_t step,
                                                     uint64_t epoch) {
  for (int s : failed) reconnect(s);
  std::vector<int> all;
  for (int s = 0; s < servers(); ++s) all.push_back(s);
  std::vector<RecoveryAnswer> answers =
      ask(all, {.request = EmbRequest::kRestore, .step = step, .epoch = epoch});
  // The restored rows hold the updates of the steps before `step`: count them as pushed (by one
  // worker), so that a later partial recovery's lost updates are measured from there.
  for (const RecoveryAnswer& a : answers) {
    if (a.reply.ok) links_[a.server].accesses = rank_ == 0 ? a.reply.accessesHeld : 0;
  }
  return answers;
}

}  // namespace gradsync
