#include "torch/elastic/state.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/allocator.h"
#include "common/elapsed.h"
#include "common/logging.h"
#include "common/state_bytes.h"
#include "common/tags.h"
#include "data/shard_format.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "torch/elastic/plain_state.h"

namespace gradsync {
namespace {

// JSON has no NaN (a classifier's held-out loss, a language model's accuracy): null stands for it.
nlohmann::json orNull(double value) {
  return std::isnan(value) ? nlohmann::json() : nlohmann::json(value);
}
double orNaN(const nlohmann::json& value) {
  return value.is_null() ? std::nan("") : value.get<double>();
}

}  // namespace

std::vector<uint8_t> encodeProgress(const ElasticProgress& p) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochRecord& e : p.epochs) {
    epochs.push_back({e.epoch, e.trainLoss, orNull(e.testAccuracy), e.seconds, e.samplesPerSecond,
                      orNull(e.heldOutLoss)});
  }
  nlohmann::json rounds = nlohmann::json::array();
  for (const RoundRecord& r : p.rounds) {
    rounds.push_back({r.round, r.workers, r.firstStep, r.epoch, r.offset});
  }
  nlohmann::json evaluations = nlohmann::json::array();
  for (const Evaluation& e : p.evaluations) {
    evaluations.push_back({e.step, e.seconds, orNull(e.testAccuracy), orNull(e.heldOutLoss)});
  }
  const std::string text = nlohmann::json{
      {"step", p.step},
      {"samples", p.samples},
      {"epoch", p.data.epoch},
      {"offset", p.data.offset},
      {"loss_sum", p.epochLossSum},
      {"loss_count", p.epochLossCount},
      {"epoch_seconds", p.epochSeconds},
      {"epochs", epochs},
      {"rounds", rounds},
      {"evaluations",
       evaluations}}.dump();
  return {text.begin(), text.end()};
}

ElasticProgress decodeProgress(const std::vector<uint8_t>& bytes) {
  ElasticProgress p;
  try {
    const nlohmann::json doc = nlohmann::json::parse(bytes.begin(), bytes.end());
    p.step = doc.at("step");
    p.samples = doc.at("samples");
    p.data = {doc.at("epoch"), doc.at("offset")};
    p.epochLossSum = doc.at("loss_sum");
    p.epochLossCount = doc.at("loss_count");
    p.epochSeconds = doc.at("epoch_seconds");
    for (const auto& e : doc.at("epochs")) {
      EpochRecord record{e.at(0), e.at(1), orNaN(e.at(2)), e.at(3), e.at(4)};
      record.heldOutLoss = e.size() > 5 ? orNaN(e.at(5)) : std::nan("");
      p.epochs.push_back(record);
    }
    for (const auto& r : doc.at("rounds")) {
      p.rounds.push_back({r.at(0), r.at(1), r.at(2), r.at(3), r.at(4)});
    }
    for (const auto& e : doc.at("evaluations")) {
      p.evaluations.push_back(
          {e.at(0), e.at(1), orNaN(e.at(2)), e.size() > 3 ? orNaN(e.at(3)) : std::nan("")});
    }
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("an elastic run's progress does not decode: {}", e.what()));
  }
  return p;
}

namespace {

// What shareState moves besides the progress: the synchronization state, then the training
// state. A member "holds" rank 0's state when these bytes would be rank 0's.
void writeHeldState(StateWriter& out, Model& net, torch::optim::Optimizer& optimizer,
                    const std::vector<uint8_t>* sync) {
  if (sync != nullptr) out.write(*sync);
  writeTrainingState(out, net, optimizer);
}

// Its hash (hash()) and size (size()), from a hasher: nothing is copied.
StateWriter hashHeldState(Model& net, torch::optim::Optimizer& optimizer,
                          const std::vector<uint8_t>* sync) {
  StateWriter hasher = StateWriter::hasher();
  writeHeldState(hasher, net, optimizer, sync);
  return hasher;
}

// What every member holds, as every member learns it (one allgather of 12 bytes each): the
// hash and the size of its held state, by rank.
struct Holdings {
  std::vector<uint32_t> hashes;
  std::vector<uint64_t> sizes;

  // The ranks whose held state is not rank 0's.
  std::vector<int> lacking() const {
    std::vector<int> ranks;
    for (size_t rank = 1; rank < hashes.size(); ++rank) {
      if (hashes[rank] != hashes[0] || sizes[rank] != sizes[0]) {
        ranks.push_back(static_cast<int>(rank));
      }
    }
    return ranks;
  }
};

Holdings gatherHoldings(Transport& transport, const StateWriter& held) {
  const uint32_t hash = held.hash();
  const uint64_t size = held.size();
  std::vector<uint8_t> mine(sizeof hash + sizeof size);
  std::memcpy(mine.data(), &hash, sizeof hash);
  std::memcpy(mine.data() + sizeof hash, &size, sizeof size);
  Holdings all;
  for (const std::vector<uint8_t>& theirs :
       allgatherBytes(transport, mine, {.tag = tags::kModelState})) {
    if (theirs.size() != mine.size()) {
      throw ProtocolError(fmt::format("rank {} described its elastic state in {} bytes, not {}",
                                      all.hashes.size(), theirs.size(), mine.size()),
                          {.rank = transport.rank(),
                           .peer = static_cast<int>(all.hashes.size()),
                           .operation = "elastic state"});
    }
    all.hashes.push_back(0);
    all.sizes.push_back(0);
    std::memcpy(&all.hashes.back(), theirs.data(), sizeof hash);
    std::memcpy(&all.sizes.back(), theirs.data() + sizeof hash, sizeof size);
  }
  return all;
}

// A member's receive of rank 0's held state (`size` bytes). It touches its buffer first (advised
// to huge pages: src/common/allocator.h), while rank 0 writes, then posts the receive and tells
// rank 0 it is ready: rank 0 sends only then, so the bytes land straight in this buffer
// (single-copy through shared memory), not in a fresh one the transport would allocate, fault
// in and copy from (first touches of fresh memory cost more than the copy on this machine).
class HeldStateReceive {
 public:
  HeldStateReceive(Transport& transport, uint64_t size) : transport_(transport) {
    bytes_.reserve(size);
    adviseHugePages(bytes_.data(), bytes_.capacity());
    bytes_.resize(size);
    work_ = transport.recv(0, tags::kElasticState, bytes_.data(), size);
    ready_ = transport.send(0, tags::kElasticState, &kReady, sizeof kReady);
  }
  HeldStateReceive(const HeldStateReceive&) = delete;
  HeldStateReceive& operator=(const HeldStateReceive&) = delete;
  // A receive still pending when the share fails (an exception on its way out) must not write
  // into a freed buffer: the round's transport is aborted (the round fails anyway) and the
  // receive waited out.
  ~HeldStateReceive() {
    if (work_->done() && ready_->done()) return;
    transport_.abort(std::make_exception_ptr(
        Error("the elastic state's transfer was abandoned", {.rank = transport_.rank()})));
    for (const WorkPtr& work : {work_, ready_}) {
      try {
        work->wait();
      } catch (...) {  // the abort's, as meant
      }
    }
  }

  // Blocks until every byte arrived; throws what the transport throws.
  const std::vector<uint8_t>& bytes() {
    ready_->wait();
    work_->wait();
    return bytes_;
  }

  static constexpr uint8_t kReady = 1;

 private:
  Transport& transport_;
  std::vector<uint8_t> bytes_;
  WorkPtr work_, ready_;
};

// Rank 0's held state (`size` bytes, as its hasher counted them) to the ranks in `to`, written
// once into one buffer, sent to each as soon as it is ready (HeldStateReceive). On a failure the
// transport is aborted before the buffer goes (the round fails anyway), so that no send still
// reads it.
void sendHeldState(Transport& transport, const std::vector<int>& to, size_t size, Model& net,
                   torch::optim::Optimizer& optimizer, const std::vector<uint8_t>* sync) {
  StateWriter writer;
  writer.reserve(size);
  writeHeldState(writer, net, optimizer, sync);
  std::vector<WorkPtr> sends;
  try {
    for (int rank : to) {
      uint8_t ready = 0;
      transport.recv(rank, tags::kElasticState, &ready, sizeof ready)->wait();
      sends.push_back(
          transport.send(rank, tags::kElasticState, writer.bytes().data(), writer.size()));
    }
    for (WorkPtr& work : sends) work->wait();
  } catch (...) {
    transport.abort(std::current_exception());
    for (WorkPtr& work : sends) {
      try {
        work->wait();
      } catch (...) {  // the abort's
      }
    }
    throw;
  }
}

// The hash of a held state's hash and the progress.
uint32_t withProgress(uint32_t held, const ElasticProgress& progress) {
  const std::vector<uint32_t> pieces{crc32Of(encodeProgress(progress)), held};
  return crc32Of(
      {reinterpret_cast<const uint8_t*>(pieces.data()), pieces.size() * sizeof(uint32_t)});
}

// A member's part of shareState: rank 0's held state into its own (the tensors in place).
void loadHeldState(const std::vector<uint8_t>& bytes, Model& net,
                   torch::optim::Optimizer& optimizer, std::vector<uint8_t>* sync) {
  StateReader reader(bytes, "the elastic state of rank 0");
  std::vector<uint8_t> syncBytes;
  if (sync != nullptr) reader.read(syncBytes);
  readTrainingState(reader, net, optimizer);
  reader.expectEnd();
  if (sync != nullptr) *sync = std::move(syncBytes);
}

}  // namespace

void shareState(Transport& transport, Model& net, torch::optim::Optimizer& optimizer,
                ElasticProgress& progress, std::vector<uint8_t>* sync) {
  const auto start = std::chrono::steady_clock::now();
  const bool source = transport.rank() == 0;
  const StateWriter before = hashHeldState(net, optimizer, sync);
  const Holdings holdings = gatherHoldings(transport, before);
  const std::vector<int> lacking = holdings.lacking();
  std::optional<HeldStateReceive> receive;
  if (std::find(lacking.begin(), lacking.end(), transport.rank()) != lacking.end()) {
    receive.emplace(transport, holdings.sizes[0]);
  }
  const std::vector<uint8_t> progressBytes =
      broadcastBytes(transport, source ? encodeProgress(progress) : std::vector<uint8_t>{}, 0,
                     {.tag = tags::kModelState});
  ElasticProgress shared = decodeProgress(progressBytes);  // before anything is replaced
  if (source && !lacking.empty()) {
    sendHeldState(transport, lacking, before.size(), net, optimizer, sync);
  }
  uint32_t held = before.hash();
  if (receive) {
    loadHeldState(receive->bytes(), net, optimizer, sync);
    held = hashHeldState(net, optimizer, sync).hash();  // what it loaded, checked below
  }
  progress = std::move(shared);
  checkSameState(transport, withProgress(held, progress));
  // After the hash check every member has loaded it: rank 0's clock spans the whole recovery
  // (the hashes, its serialisation, the transfers, every member's load and hash).
  if (source && transport.size() > 1) {
    const double seconds = secondsSince(start);
    const double mb = static_cast<double>(before.size()) / 1e6;
    if (lacking.empty()) {
      GS_LOG(kInfo,
             "elastic: the {} other members held the job's state ({:.1f} MB) already: "
             "checked in {:.3f} s",
             transport.size() - 1, mb, seconds);
    } else {
      GS_LOG(kInfo,
             "elastic: the job's state ({:.1f} MB) to {} of the {} other members in {:.3f} s "
             "({:.0f} MB/s to each; {} held it already)",
             mb, lacking.size(), transport.size() - 1, seconds, mb / seconds,
             transport.size() - 1 - static_cast<int>(lacking.size()));
    }
  }
}

uint32_t sharedStateHash(Model& net, torch::optim::Optimizer& optimizer,
                         const ElasticProgress& progress, const std::vector<uint8_t>* sync) {
  return withProgress(hashHeldState(net, optimizer, sync).hash(), progress);
}

void checkSameState(Transport& transport, uint32_t hash) {
  std::vector<uint8_t> mine(sizeof hash);
  std::memcpy(mine.data(), &hash, sizeof hash);
  const std::vector<std::vector<uint8_t>> all =
      allgatherBytes(transport, mine, {.tag = tags::kModelState});
  for (int rank = 1; rank < transport.size(); ++rank) {
    if (all[static_cast<size_t>(rank)] == all[0]) continue;
    uint32_t theirs = 0, first = 0;
    std::memcpy(&theirs, all[static_cast<size_t>(rank)].data(), sizeof theirs);
    std::memcpy(&first, all[0].data(), sizeof first);
    throw DataError(
        fmt::format("rank {}'s state at the round's start is not rank 0's (hash {:08x}, "
                    "rank 0's {:08x}): the transfer of the job's state went wrong",
                    rank, theirs, first),
        {.rank = transport.rank(), .peer = rank, .operation = "elastic state"});
  }
}

}  // namespace gradsync
