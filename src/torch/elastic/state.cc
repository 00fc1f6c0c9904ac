#include "torch/elastic/state.h"

#include <chrono>
#include <cmath>
#include <cstring>

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

// A member's part of shareState: rank 0's bytes into its own state. The progress and the
// synchronization state are decoded before anything is replaced; the tensors go in place.
void loadSharedState(const std::vector<uint8_t>& bytes, Model& net,
                     torch::optim::Optimizer& optimizer, ElasticProgress& progress,
                     std::vector<uint8_t>* sync) {
  StateReader reader(bytes, "the elastic state of rank 0");
  std::vector<uint8_t> progressBytes, syncBytes;
  reader.read(progressBytes);
  if (sync != nullptr) reader.read(syncBytes);
  ElasticProgress shared = decodeProgress(progressBytes);
  readTrainingState(reader, net, optimizer);
  reader.expectEnd();
  progress = std::move(shared);
  if (sync != nullptr) *sync = std::move(syncBytes);
}

}  // namespace

void shareState(Transport& transport, Model& net, torch::optim::Optimizer& optimizer,
                ElasticProgress& progress, std::vector<uint8_t>* sync) {
  const auto start = std::chrono::steady_clock::now();
  const bool source = transport.rank() == 0;
  StateWriter writer;
  if (source) {
    const auto write = [&](StateWriter& out) {
      out.write(encodeProgress(progress));
      if (sync != nullptr) out.write(*sync);
      writeTrainingState(out, net, optimizer);
    };
    StateWriter sizer = StateWriter::sizer();  // one buffer of the whole size, touched once
    write(sizer);
    writer.reserve(sizer.size());
    write(writer);
  }
  const std::vector<uint8_t> bytes =
      broadcastBytes(transport, writer.bytes(), 0, {.tag = tags::kModelState});
  if (!source) loadSharedState(bytes, net, optimizer, progress, sync);
  checkSameState(transport, sharedStateHash(net, progress));
  // After the hash check every member has loaded it: rank 0's clock spans the whole recovery
  // (its serialisation, the broadcast, every member's load and hash).
  if (source && transport.size() > 1) {
    const double seconds = secondsSince(start);
    const double mb = static_cast<double>(bytes.size()) / 1e6;
    GS_LOG(kInfo, "elastic: the job's state ({:.1f} MB) to {} members in {:.3f} s ({:.0f} MB/s)",
           mb, transport.size() - 1, seconds, mb / seconds);
  }
}

uint32_t sharedStateHash(Model& net, const ElasticProgress& progress) {
  std::vector<uint32_t> pieces{crc32Of(encodeProgress(progress))};
  const auto add = [&](const torch::Tensor& t) {
    const torch::Tensor c = t.contiguous();
    pieces.push_back(crc32Of({static_cast<const uint8_t*>(c.data_ptr()),
                              static_cast<size_t>(c.numel()) * c.element_size()}));
  };
  for (const torch::Tensor& p : net.parameters()) add(p);
  for (const torch::Tensor& b : net.buffers()) add(b);
  return crc32Of(
      {reinterpret_cast<const uint8_t*>(pieces.data()), pieces.size() * sizeof(uint32_t)});
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
