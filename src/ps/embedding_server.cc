#include "ps/embedding_server.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "common/check.h"
#include "common/elapsed.h"
#include "common/logging.h"
#include "gradsync/error.h"
#include "ps/idle_wait.h"

namespace gradsync {

namespace {

using MonotonicClock = std::chrono::steady_clock;

template <typename T>
std::span<const T> viewAs(std::span<const uint8_t> bytes, size_t offset, size_t count) {
  return {reinterpret_cast<const T*>(bytes.data() + offset), count};
}

}  // namespace

EmbeddingServer::EmbeddingServer(Transport& star, EmbeddingServerOptions options)
    : star_(star),
      options_(std::move(options)),
      shard_(options_.spec, options_.shard, options_.rule),
      ready_(!options_.replacement),
      round_(std::make_unique<Round>()),
      stopped_(options_.workers, false) {
  GS_CHECK_EQ(star.size(), options_.workers + 1);
  GS_CHECK_EQ(star.rank(), options_.workers);
  round_->pushes.resize(options_.workers);
  if (!options_.checkpointRoot.empty()) {
    checkpoints_ = std::make_unique<ShardCheckpoints>(options_.checkpointRoot, options_.shard);
  }
  if (options_.mode == RecoveryMode::kCprSsu) {
    shard_.enableSubSample(options_.ssuRate, options_.spec.seed);
  }
  for (int w = 0; w < options_.workers; ++w) threads_.emplace_back([this, w] { serveWorker(w); });
}

EmbeddingServer::~EmbeddingServer() {
  for (auto& thread : threads_) thread.join();
  std::vector<InFlight> sends;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    sends.swap(sends_);
  }
  for (auto& send : sends) {
    try {
      send.header->wait();
      if (send.payload) send.payload->wait();
    } catch (const TimeoutError&) {
      star_.abort(std::current_exception());  // releases the buffers the sends still hold
    } catch (const Error&) {
    }
  }
}

EmbeddingServer::End EmbeddingServer::wait() {
  for (auto& thread : threads_) thread.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  if (crashed_) return End::kCrashed;
  if (error_) std::rethrow_exception(error_);
  return End::kStopped;
}

void EmbeddingServer::crash() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (crashed_) return;
    crashed_ = true;
    changed_.notify_all();
  }
  star_.abort(std::make_exception_ptr(
      PeerLostError(fmt::format("embedding server {} failed (injected)", options_.shard),
                    {.rank = star_.rank()})));
}

void EmbeddingServer::serveWorker(int worker) {
  try {
    EmbHeader header;
    std::vector<uint8_t> payload;
    do {
      waitPatiently(*star_.recv(worker, tags::kEmbRequest, &header, sizeof header));
      if (header.rows > shard_.rows() + 1) {
        throw ProtocolError(
            fmt::format("a request for {} rows of a shard of {}", header.rows, shard_.rows()),
            {.rank = star_.rank(), .peer = worker});
      }
      const bool push = header.request == EmbRequest::kPush;
      const bool rows =
          push || header.request == EmbRequest::kPull || header.request == EmbRequest::kRead;
      payload.resize(!rows  ? 0
                     : push ? embPushBytes(header.rows, options_.spec.dim)
                            : header.rows * sizeof(uint64_t));
      if (!payload.empty()) {
        star_.recv(worker, tags::kEmbPayload, payload.data(), payload.size())->wait();
      }
    } while (handle(worker, header, payload));
  } catch (...) {
    fail(worker);
  }
}

// Keeps the first failure and breaks the star, so that every worker's pending request fails at
// once naming this server instead of waiting for its timeout. After crash(), failures are the
// crash's own consequences.
void EmbeddingServer::fail(int worker) {
  std::exception_ptr error = std::current_exception();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (crashed_) return;
    if (!error_) error_ = error;
    stopped_[worker] = true;
    changed_.notify_all();
  }
  star_.abort(error);
}

bool EmbeddingServer::handle(int worker, const EmbHeader& header, std::vector<uint8_t>& payload) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (crashed_) return false;
    const bool recovery =
        header.request == EmbRequest::kResume || header.request == EmbRequest::kRestore;
    if (header.epoch < epoch_ && !recovery && header.request != EmbRequest::kStop) {
      GS_LOG(kDebug, "embedding server {}: dropping worker {}'s request of epoch {} (now {})",
             options_.shard, worker, header.epoch, epoch_);
      return true;
    }
  }
  switch (header.request) {
    case EmbRequest::kPull:
      answerRows(worker, header, payload, true);
      return true;
    case EmbRequest::kRead:
      answerRows(worker, header, payload, false);
      return true;
    case EmbRequest::kPush:
      push(worker, header, payload);
      return true;
    case EmbRequest::kResume:
    case EmbRequest::kRestore:
      recover(worker, header);
      return true;
    case EmbRequest::kStop: {
      std::lock_guard<std::mutex> lock(mutex_);
      stopped_[worker] = true;
      changed_.notify_all();
      return false;
    }
  }
  throw ProtocolError(
      fmt::format("unknown embedding request {}", static_cast<uint32_t>(header.request)),
      {.rank = star_.rank(), .peer = worker});
}

template <typename Ready>
void EmbeddingServer::waitFor(std::unique_lock<std::mutex>& lock, const char* what, Ready ready) {
  const bool done = changed_.wait_for(lock, options_.timeout * kIdleTimeouts,
                                      [&] { return ready() || crashed_ || error_ != nullptr; });
  if (ready() || crashed_) return;
  if (error_) std::rethrow_exception(error_);
  std::string missing;
  for (int w = 0; w < options_.workers; ++w) {
    if (!round_->pushes[w].arrived) missing += fmt::format(" {}", w);
  }
  throw ProtocolError(
      fmt::format("embedding server {} waited {} for {} (round {}; workers not pushed:{})",
                  options_.shard, done ? "in vain" : "too long", what, applied_, missing),
      {.rank = star_.rank(), .hint = "a worker stopped or hangs; see its error"});
}

std::vector<uint64_t> EmbeddingServer::localRows(int worker, std::span<const uint64_t> keys) const {
  std::vector<uint64_t> rows(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    std::optional<uint64_t> local = shard_.localIndex(keys[i]);
    if (!local) {
      throw ProtocolError(fmt::format("row {} of table {} is not on embedding server {}",
                                      rowOfKey(keys[i]), tableOfKey(keys[i]), options_.shard),
                          {.rank = star_.rank(), .peer = worker});
    }
    rows[i] = *local;
  }
  return rows;
}

// kPull: after the rounds before `step` (and the save they asked for); kRead: after `step` rounds.
void EmbeddingServer::answerRows(int worker, const EmbHeader& header,
                                 std::span<const uint8_t> payload, bool inRound) {
  std::unique_lock<std::mutex> lock(mutex_);
  const std::vector<uint64_t> rows = localRows(worker, viewAs<uint64_t>(payload, 0, header.rows));
  auto stuck = [&] {
    for (int w = 0; w < options_.workers; ++w) {
      if (stopped_[w] && !round_->pushes[w].arrived) return true;
    }
    return false;
  };
  waitFor(lock, "the round's pushes",
          [&] { return ready_ && (applied_ >= header.step || stuck()); });
  if (crashed_) return;
  if (applied_ < header.step) {
    throw ProtocolError(fmt::format("round {} cannot fill: a worker has stopped", applied_),
                        {.rank = star_.rank(), .peer = worker});
  }
  if (inRound && applied_ != header.step) {
    throw ProtocolError(
        fmt::format("a pull of round {} when round {} is next", header.step, applied_),
        {.rank = star_.rank(), .peer = worker});
  }
  if (inRound && (header.flags & kSaveFull) && !(lastSave_.kind && lastSave_.step == applied_)) {
    save(kSaveFull);  // the first worker's pull saves; the others find it done
  }
  auto values = std::make_shared<std::vector<uint8_t>>(rows.size() * shard_.dim() * sizeof(float));
  shard_.gather(rows, {reinterpret_cast<float*>(values->data()), rows.size() * shard_.dim()});
  EmbReply answer;
  answer.rows = rows.size();
  if (inRound && lastSave_.kind != 0 && lastSave_.step == header.step) {
    answer.saveKind = lastSave_.kind;
    answer.saveStep = lastSave_.step;
    answer.savedRows = lastSave_.rows;
    answer.saveSeconds = lastSave_.seconds;
  }
  reply(worker, answer, std::move(values));
}

void EmbeddingServer::push(int worker, const EmbHeader& header, std::span<const uint8_t> payload) {
  if (options_.deathClock && header.clock >= *options_.deathClock) {
    GS_LOG(kWarn, "embedding server {}: injected failure at clock {} (round {})", options_.shard,
           header.clock, header.step);
    if (options_.die) {
      options_.die();  // a process does not come back from it
    } else {
      crash();
    }
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  waitFor(lock, "its state", [&] { return ready_; });
  if (crashed_) return;
  if (header.step < applied_) return;  // a round given up by a recovery
  Round::Push& slot = round_->pushes[worker];
  if (header.step != applied_ || slot.arrived) {
    throw ProtocolError(fmt::format("a push of round {} when round {} is gathered{}", header.step,
                                    applied_, slot.arrived ? " and this worker pushed it" : ""),
                        {.rank = star_.rank(), .peer = worker});
  }
  const size_t n = header.rows;
  const auto keys = viewAs<uint64_t>(payload, 0, n);
  const auto accesses = viewAs<uint32_t>(payload, n * sizeof(uint64_t), n);
  const auto gradients = viewAs<float>(payload, n * (sizeof(uint64_t) + sizeof(uint32_t)),
                                       n * static_cast<size_t>(shard_.dim()));
  slot.rows = localRows(worker, keys);
  slot.accesses.assign(accesses.begin(), accesses.end());
  slot.gradients.assign(gradients.begin(), gradients.end());
  slot.flags = header.flags;
  slot.arrived = true;
  if (++round_->arrived == options_.workers) applyRound(header.flags);
}

// Every worker's rows, summed per row in worker order and averaged over the workers (the mean of
// the workers' batch means: the global batch's mean), then one update per distinct row.
void EmbeddingServer::applyRound(uint32_t flags) {
  struct Entry {
    uint64_t row;
    int worker;
    size_t index;
  };
  std::vector<Entry> entries;
  for (int w = 0; w < options_.workers; ++w) {
    const Round::Push& push = round_->pushes[w];
    if (push.flags != flags) {
      throw ProtocolError(fmt::format("workers disagree on round {}'s save ({} and {})", applied_,
                                      push.flags, flags),
                          {.rank = star_.rank(), .peer = w});
    }
    for (size_t i = 0; i < push.rows.size(); ++i) entries.push_back({push.rows[i], w, i});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.row != b.row ? a.row < b.row : a.worker < b.worker;
  });
  const auto dim = static_cast<size_t>(shard_.dim());
  const float scale = 1.0f / static_cast<float>(options_.workers);
  std::vector<uint64_t> rows;
  std::vector<uint32_t> accesses;
  std::vector<float> sums;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Round::Push& push = round_->pushes[entries[i].worker];
    const float* g = push.gradients.data() + entries[i].index * dim;
    if (rows.empty() || rows.back() != entries[i].row) {
      rows.push_back(entries[i].row);
      accesses.push_back(0);
      sums.insert(sums.end(), g, g + dim);
    } else {
      for (size_t d = 0; d < dim; ++d) sums[sums.size() - dim + d] += g[d];
    }
    accesses.back() += push.accesses[entries[i].index];
  }
  for (float& s : sums) s *= scale;
  shard_.apply(rows, sums, accesses, applied_);
  ++applied_;
  for (auto& push : round_->pushes) push = Round::Push{};
  round_->arrived = 0;
  if (flags != 0) save(flags);
  changed_.notify_all();
}

void EmbeddingServer::save(uint32_t flags) {
  if (!checkpoints_) {
    throw ProtocolError(fmt::format("embedding server {} was asked to save without a checkpoint "
                                    "directory",
                                    options_.shard),
                        {.rank = star_.rank()});
  }
  const auto start = MonotonicClock::now();
  const auto step = static_cast<int64_t>(applied_);
  SaveReport report{flags, applied_, 0, 0};
  try {
    if (flags & kSaveFull) {
      shard_.takeSubSample();  // every row is saved: the sample starts again
      checkpoints_->writeFull(step, shard_.saveFull(step));
      report.rows = shard_.rows();
    } else {
      std::vector<uint64_t> rows = options_.mode == RecoveryMode::kCprSsu
                                       ? shard_.takeSubSample()
                                       : shard_.mostUsed(options_.mfuFraction);
      checkpoints_->writePartial(step, shard_.savePartial(step, rows));
      report.rows = rows.size();
    }
  } catch (const SystemError& e) {  // costs only this save: the previous ones stay
    GS_LOG(kError, "embedding server {}: save of step {} not written, training goes on: {}",
           options_.shard, step, e.what());
  }
  report.seconds = secondsSince(start);
  lastSave_ = report;
}

void EmbeddingServer::reply(int worker, EmbReply header,
                            std::shared_ptr<const std::vector<uint8_t>> payload) {
  header.payloadBytes = payload ? payload->size() : 0;
  auto bytes = std::make_shared<const EmbReply>(header);
  std::erase_if(sends_, [](const InFlight& s) {
    return s.header->done() && (!s.payload || s.payload->done());
  });
  InFlight send{star_.send(worker, tags::kEmbReply, bytes.get(), sizeof(EmbReply)), nullptr, bytes,
                payload};
  if (payload && !payload->empty()) {
    send.payload = star_.send(worker, tags::kEmbReplyPayload, payload->data(), payload->size());
  }
  sends_.push_back(std::move(send));
}

}  // namespace gradsync
