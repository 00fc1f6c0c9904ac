#include "torch/elastic/state.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/elapsed.h"
#include "common/logging.h"
#include "common/state_bytes.h"
#include "common/tags.h"
#include "data/shard_format.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "torch/elastic/plain_state.h"
#include "torch/elastic/state_transfer.h"

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

// Fixed-size records, one from each member, by rank (`what` names them in an error).
std::vector<std::vector<uint8_t>> allgatherRecords(Transport& transport,
                                                   const std::vector<uint8_t>& mine,
                                                   const char* what) {
  std::vector<std::vector<uint8_t>> all =
      allgatherBytes(transport, mine, {.tag = tags::kModelState});
  for (size_t rank = 0; rank < all.size(); ++rank) {
    if (all[rank].size() != mine.size()) {
      throw ProtocolError(
          fmt::format("rank {} described its {} in {} bytes, not {}", rank, what, all[rank].size(),
                      mine.size()),
          {.rank = transport.rank(), .peer = static_cast<int>(rank), .operation = "elastic state"});
    }
  }
  return all;
}

template <typename T>
T fieldOf(const std::vector<uint8_t>& record, size_t at) {
  T value{};
  std::memcpy(&value, record.data() + at, sizeof value);
  return value;
}

// Where every member stands before anything moves (one allgather of 9 bytes each): behind (at
// another step than rank 0's: it lacks rank 0's state for certain, and receives it without
// hashing its own first), and whether it takes rank 0's state in place.
struct Standings {
  std::vector<bool> behind, inPlace;

  std::vector<int> behindRanks() const {
    std::vector<int> ranks;
    for (size_t rank = 1; rank < behind.size(); ++rank) {
      if (behind[rank]) ranks.push_back(static_cast<int>(rank));
    }
    return ranks;
  }
};

Standings gatherStandings(Transport& transport, int64_t step, bool inPlace) {
  std::vector<uint8_t> mine(sizeof step + 1);
  std::memcpy(mine.data(), &step, sizeof step);
  mine.back() = inPlace ? 1 : 0;
  const std::vector<std::vector<uint8_t>> all = allgatherRecords(transport, mine, "step");
  Standings standings;
  for (const std::vector<uint8_t>& theirs : all) {
    standings.behind.push_back(fieldOf<int64_t>(theirs, 0) != fieldOf<int64_t>(all[0], 0));
    standings.inPlace.push_back(theirs.back() != 0);
  }
  return standings;
}

// The hash and size of every member's held state (one allgather of 12 bytes each): a member at
// rank 0's step whose hash or size is not rank 0's lacks it too (a survivor that lost a step).
// A member behind sends zeros: it lacks it anyway.
std::vector<int> gatherLacking(Transport& transport, const StateWriter* held,
                               const Standings& standings) {
  const uint32_t hash = held != nullptr ? held->hash() : 0;
  const uint64_t size = held != nullptr ? held->size() : 0;
  std::vector<uint8_t> mine(sizeof hash + sizeof size);
  std::memcpy(mine.data(), &hash, sizeof hash);
  std::memcpy(mine.data() + sizeof hash, &size, sizeof size);
  const std::vector<std::vector<uint8_t>> all = allgatherRecords(transport, mine, "state");
  std::vector<int> lacking;
  for (size_t rank = 1; rank < all.size(); ++rank) {
    if (!standings.behind[rank] && all[rank] != all[0]) lacking.push_back(static_cast<int>(rank));
  }
  return lacking;
}

// Rank 0's part of shareState: it gives its state to the members behind, hashes its own while
// they receive, learns which members at its step hold another and gives it to those too. Returns
// its held state's hasher and how many members it gave the state to.
std::pair<StateWriter, size_t> giveState(Transport& transport, const Standings& standings,
                                         Model& net, torch::optim::Optimizer& optimizer,
                                         const std::vector<uint8_t>* sync) {
  std::optional<HeldStateSource> source;
  std::vector<WorkPtr> sends;
  try {
    const std::vector<int> behind = standings.behindRanks();
    if (!behind.empty()) source.emplace(net, optimizer, sync);
    for (int rank : behind) {
      source->give(transport, rank, standings.inPlace[static_cast<size_t>(rank)], sends);
    }
    StateWriter held = hashHeldState(net, optimizer, sync);
    const std::vector<int> lacking = gatherLacking(transport, &held, standings);
    if (!lacking.empty() && !source) source.emplace(net, optimizer, sync);
    for (int rank : lacking) {
      source->give(transport, rank, standings.inPlace[static_cast<size_t>(rank)], sends);
    }
    for (const WorkPtr& work : sends) work->wait();
    return {std::move(held), behind.size() + lacking.size()};
  } catch (...) {
    abandonTransfers(transport, sends, std::current_exception());
    throw;
  }
}

// Another member's part: rank 0's state, straight away when behind, or after the hashes when
// they show that it holds another. Returns the hash of what it holds then.
uint32_t takeState(Transport& transport, const Standings& standings, Model& net,
                   torch::optim::Optimizer& optimizer, std::vector<uint8_t>* sync) {
  const auto me = static_cast<size_t>(transport.rank());
  const bool inPlace = standings.inPlace[me];
  if (standings.behind[me]) {
    receiveHeldState(transport, inPlace, net, optimizer, sync);
    gatherLacking(transport, nullptr, standings);
  } else {
    const StateWriter held = hashHeldState(net, optimizer, sync);
    const std::vector<int> lacking = gatherLacking(transport, &held, standings);
    if (std::find(lacking.begin(), lacking.end(), transport.rank()) == lacking.end()) {
      return held.hash();
    }
    receiveHeldState(transport, inPlace, net, optimizer, sync);
  }
  return hashHeldState(net, optimizer, sync).hash();  // what it received, checked after
}

// The hash of a held state's hash and the progress.
uint32_t withProgress(uint32_t held, const ElasticProgress& progress) {
  const std::vector<uint32_t> pieces{crc32Of(encodeProgress(progress)), held};
  return crc32Of(
      {reinterpret_cast<const uint8_t*>(pieces.data()), pieces.size() * sizeof(uint32_t)});
}

}  // namespace

void shareState(Transport& transport, Model& net, torch::optim::Optimizer& optimizer,
                ElasticProgress& progress, std::vector<uint8_t>* sync, bool keepOwnOnFailure) {
  const auto start = std::chrono::steady_clock::now();
  const bool source = transport.rank() == 0;
  const Standings standings =
      gatherStandings(transport, progress.step, !keepOwnOnFailure && modelIsContiguous(net));
  const std::vector<uint8_t> progressBytes =
      broadcastBytes(transport, source ? encodeProgress(progress) : std::vector<uint8_t>{}, 0,
                     {.tag = tags::kModelState});
  ElasticProgress shared = decodeProgress(progressBytes);  // before anything is replaced
  uint32_t held = 0;
  size_t given = 0;
  uint64_t size = 0;
  if (source) {
    auto [hasher, count] = giveState(transport, standings, net, optimizer, sync);
    held = hasher.hash();
    size = hasher.size();
    given = count;
  } else {
    held = takeState(transport, standings, net, optimizer, sync);
  }
  progress = std::move(shared);
  checkSameState(transport, withProgress(held, progress));
  // After the hash check every member has its state: rank 0's clock spans the whole recovery
  // (the standings, the transfers, every member's hashes and load).
  if (source && transport.size() > 1) {
    const double seconds = secondsSince(start);
    const double mb = static_cast<double>(size) / 1e6;
    if (given == 0) {
      GS_LOG(kInfo,
             "elastic: the {} other members held the job's state ({:.1f} MB) already: "
             "checked in {:.3f} s",
             transport.size() - 1, mb, seconds);
    } else {
      GS_LOG(kInfo,
             "elastic: the job's state ({:.1f} MB) to {} of the {} other members in {:.3f} s "
             "({:.0f} MB/s to each; {} held it already)",
             mb, given, transport.size() - 1, seconds, mb / seconds,
             transport.size() - 1 - static_cast<int>(given));
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
