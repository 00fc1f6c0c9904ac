#include "torch/loop/checkpointing.h"

#include <numeric>

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
          {"batch_workers", identity.batchWorkers},
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
  differs("batch_size", identity.batchSize);
  differs("seed", identity.seed);
  differs("sync", identity.sync);
  differs("compress", identity.compress);
}

ResumePoint resumePointFrom(const nlohmann::json& run, LoadedCheckpoint checkpoint) {
  ResumePoint point{.checkpoint = std::move(checkpoint)};
  point.workers = run.at("workers");
  point.batchWorkers = run.value("batch_workers", point.workers);  // absent: never resumed
  point.step = run.at("step");
  point.lossSums = run.at("epoch_loss_sums").get<std::vector<double>>();
  for (const auto& e : run.at("epochs")) {
    point.epochs.push_back({e[0].get<int>(), e[1].get<double>(), e[2].get<double>(),
                            e[3].get<double>(), e[4].get<double>()});
  }
  if (point.workers < 1 || point.batchWorkers < 1 ||
      point.lossSums.size() != static_cast<size_t>(point.workers)) {
    throw DataError(fmt::format("{}: the run section's workers do not match its loss sums",
                                point.checkpoint.path));
  }
  return point;
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

std::optional<ResumePoint> readResumePoint(const CheckpointDir& dir, const RunIdentity& identity) {
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
  return resumePointFrom(run, std::move(checkpoint));
}

RunPosition loadResumePoint(const ResumePoint& point, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, int rank, int workers) {
  const std::string& path = point.checkpoint.path;
  loadModuleInPlace(model, findSection(point.checkpoint.sections, "model").data,
                    fmt::format("{}: section 'model'", path));
  loadArchiveBytes(findSection(point.checkpoint.sections, "optimizer").data,
                   fmt::format("{}: section 'optimizer'", path),
                   [&](auto& archive) { optimizer.load(archive); });
  RunPosition position{.step = point.step, .epochs = point.epochs};
  const bool sameWorkers = workers == point.workers;
  position.epochLossSum = sameWorkers
                              ? point.lossSums.at(rank)
                              : std::accumulate(point.lossSums.begin(), point.lossSums.end(), 0.0) /
                                    static_cast<double>(point.workers);
  position.syncState =
      findSection(point.checkpoint.sections, syncSectionName(rank % point.workers)).data;
  return position;
}

}  // namespace gradsync
