#include "torch/loop/checkpointing.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gradsync/error.h"
#include "torch/api/archive_bytes.h"

namespace gradsync {
namespace {

// 2: every rank's synchronization state (format 1 had none).
constexpr int kRunFormat = 2;

std::string syncSectionName(int rank) {
  return fmt::format("sync-state/rank-{}", rank);
}

nlohmann::json runJson(const RunIdentity& identity, const RunPosition& position,
                       const std::vector<double>& lossSums) {
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochRecord& e : position.epochs) {
    epochs.push_back({e.epoch, e.trainLoss, e.testAccuracy, e.seconds, e.samplesPerSecond});
  }
  return {{"format", kRunFormat},
          {"model", identity.model},
          {"dataset", identity.dataset},
          {"workers", identity.workers},
          {"batch_size", identity.batchSize},
          {"seed", identity.seed},
          {"sync", identity.sync},
          {"compress", identity.compress},
          {"schedule", identity.schedule},
          {"step", position.step},
          {"epoch_loss_sums", lossSums},
          {"epochs", epochs}};
}

void checkIdentity(const nlohmann::json& run, const RunIdentity& identity,
                   const std::string& path) {
  auto differs = [&](const char* key, const auto& mine) {
    if (run.at(key) != mine) {
      throw ConfigError(fmt::format("checkpoint {} was written with {} {} but this run has {}",
                                    path, key, run.at(key).dump(), nlohmann::json(mine).dump()),
                        {.hint = "resume with the same settings, or use another --checkpoint-dir"});
    }
  };
  differs("model", identity.model);
  differs("dataset", identity.dataset);
  differs("workers", identity.workers);
  differs("batch_size", identity.batchSize);
  differs("seed", identity.seed);
  differs("sync", identity.sync);
  differs("compress", identity.compress);
}

RunPosition positionFrom(const nlohmann::json& run, int rank) {
  RunPosition position;
  position.step = run.at("step");
  position.epochLossSum = run.at("epoch_loss_sums").at(rank);
  for (const auto& e : run.at("epochs")) {
    position.epochs.push_back({e[0].get<int>(), e[1].get<double>(), e[2].get<double>(),
                               e[3].get<double>(), e[4].get<double>()});
  }
  return position;
}

}  // namespace

void saveCheckpoint(CheckpointDir& dir, torch::nn::Module& model,
                    torch::optim::Optimizer& optimizer, const RunIdentity& identity,
                    const RunPosition& position, const std::vector<double>& lossSums,
                    const std::vector<std::vector<uint8_t>>& syncStates) {
  std::string run = runJson(identity, position, lossSums).dump();
  std::vector<Section> sections = {
      {"run", {run.begin(), run.end()}},
      {"model", archiveBytes([&](auto& archive) { model.save(archive); })},
      {"optimizer", archiveBytes([&](auto& archive) { optimizer.save(archive); })}};
  for (size_t rank = 0; rank < syncStates.size(); ++rank) {
    sections.push_back({syncSectionName(static_cast<int>(rank)), syncStates[rank]});
  }
  dir.write(position.step, sections);
}

std::optional<RunPosition> loadCheckpoint(const CheckpointDir& dir, torch::nn::Module& model,
                                          torch::optim::Optimizer& optimizer,
                                          const RunIdentity& identity, int rank) {
  if (!dir.latest()) return std::nullopt;
  LoadedCheckpoint checkpoint = dir.loadLatest();
  const Section& runSection = findSection(checkpoint.sections, "run");
  nlohmann::json run = nlohmann::json::parse(runSection.data, nullptr, /*allow_exceptions=*/false);
  if (run.is_discarded() || !run.is_object()) {
    throw DataError(fmt::format("{}: the run section is not a gradsync run", checkpoint.path));
  }
  if (run.contains("elastic")) {
    throw ConfigError(
        fmt::format("checkpoint {} was written by an elastic run (--elastic)", checkpoint.path),
        {.hint = "resume it with --elastic MIN:MAX (any number of workers within "
                 "its range), or use another --checkpoint-dir"});
  }
  if (run.value("format", 0) != kRunFormat) {
    throw DataError(
        fmt::format("{}: run format {} (this gradsync reads {}; format 1 was "
                    "written without the ranks' synchronization state)",
                    checkpoint.path, run.value("format", 0), kRunFormat));
  }
  checkIdentity(run, identity, checkpoint.path);
  loadModuleInPlace(model, findSection(checkpoint.sections, "model").data,
                    fmt::format("{}: section 'model'", checkpoint.path));
  loadArchiveBytes(findSection(checkpoint.sections, "optimizer").data,
                   fmt::format("{}: section 'optimizer'", checkpoint.path),
                   [&](auto& archive) { optimizer.load(archive); });
  RunPosition position = positionFrom(run, rank);
  position.syncState = findSection(checkpoint.sections, syncSectionName(rank)).data;
  return position;
}

}  // namespace gradsync
