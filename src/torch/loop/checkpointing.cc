#include "torch/loop/checkpointing.h"

#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gradsync/error.h"
#include "torch/api/archive_bytes.h"

namespace gradsync {
namespace {

// 2: every rank's synchronization state (format 1 had none).
constexpr int kRunFormat = 2;

nlohmann::json runJson(const RunIdentity& identity, const RunPosition& position,
                       const std::vector<double>& lossSums) {
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
          {"epochs", epochsJson(position.epochs)}};
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
  point.epochs = epochsFromJson(run.at("epochs"));
  if (point.workers < 1 || point.batchWorkers < 1 ||
      point.lossSums.size() != static_cast<size_t>(point.workers)) {
    throw DataError(fmt::format("{}: the run section's workers do not match its loss sums",
                                point.checkpoint.path));
  }
  return point;
}

// An elastic run's checkpoint (torch/elastic/checkpoint.cc): its MAX workers' global batch, its
// epoch's mean loss as every saved rank's, and its data position. Its sync and compress, where it
// recorded them (elastic checkpoints of 2026-12-03 on), must be this run's.
ResumePoint resumePointOfElasticRun(const nlohmann::json& run, const RunIdentity& identity,
                                    LoadedCheckpoint checkpoint) {
  const std::string& path = checkpoint.path;
  if (!run.contains("epoch_loss_mean")) {
    throw ConfigError(
        fmt::format("checkpoint {} was written by an elastic run (--elastic) of a gradsync "
                    "before 2026-12-03, which did not record what a run without --elastic needs",
                    path),
        {.hint = "resume it with --elastic MIN:MAX (any number of workers within its range)"});
  }
  const nlohmann::json mine = {
      {"model", identity.model}, {"dataset", identity.dataset}, {"batch_size", identity.batchSize},
      {"seed", identity.seed},   {"sync", identity.sync},       {"compress", identity.compress}};
  for (const auto& [key, value] : mine.items()) {
    if (!run.contains(key) || run.at(key) == value) continue;
    throw ConfigError(fmt::format("checkpoint {} was written with {} {} but this run has {}", path,
                                  key, run.at(key).dump(), value.dump()),
                      {.hint = "resume with the same settings, or use another --checkpoint-dir"});
  }
  ResumePoint point{.checkpoint = std::move(checkpoint), .fromElastic = true};
  point.workers = point.batchWorkers = run.at("elastic").at("max_workers");
  point.step = run.at("step");
  point.epoch = run.at("epoch");
  point.epochStep = run.at("epoch_step");
  point.lossSums.assign(
      static_cast<size_t>(point.workers),
      run.at("epoch_loss_mean").get<double>() * static_cast<double>(point.epochStep));
  point.epochs = epochsFromJson(run.at("epochs"));
  return point;
}

// An elastic run's step is this run's at the same data position when both cut their epochs into
// as many steps of the global batch (an elastic epoch's last step takes the remainder, which
// DistributedSampler drops).
void checkElasticPosition(const ResumePoint& point, int64_t perEpoch) {
  if (point.step / perEpoch == point.epoch && point.step % perEpoch == point.epochStep) return;
  if (point.epochStep == 0 && point.epoch > point.step / perEpoch) {
    throw ConfigError(
        fmt::format("checkpoint {} was written at the end of an elastic run of --steps {}, which "
                    "ended its epoch there: its next step is the first of epoch {}, where a run "
                    "without --elastic goes on with step {} of epoch {}",
                    point.checkpoint.path, point.step, point.epoch + 1, point.step % perEpoch,
                    point.step / perEpoch + 1),
        {.hint = "resume it with --elastic, or from a checkpoint the elastic run wrote before "
                 "its end (--checkpoint-every)"});
  }
  throw DataError(fmt::format(
      "checkpoint {}: the elastic run's step {} is step {} of epoch {}, where this run has "
      "step {} of epoch {} ({} steps per epoch)",
      point.checkpoint.path, point.step, point.epochStep, point.epoch, point.step % perEpoch,
      point.step / perEpoch, perEpoch));
}

}  // namespace

std::string rankSyncSection(int rank) {
  return fmt::format("sync-state/rank-{}", rank);
}

std::string compressSetting(const TrainOptions& options) {
  std::string compress = options.compression.spec;
  for (const std::string& override : options.compression.overrides) compress += " " + override;
  return compress;
}

// [epoch, train loss, test accuracy, seconds, samples/s] per epoch; a NaN (a language model's
// accuracy) is written as null and read back as NaN.
nlohmann::json epochsJson(const std::vector<EpochRecord>& epochs) {
  nlohmann::json out = nlohmann::json::array();
  for (const EpochRecord& e : epochs) {
    out.push_back({e.epoch, e.trainLoss, e.testAccuracy, e.seconds, e.samplesPerSecond});
  }
  return out;
}

std::vector<EpochRecord> epochsFromJson(const nlohmann::json& epochs) {
  auto number = [](const nlohmann::json& v) {
    return v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
  };
  std::vector<EpochRecord> out;
  for (const auto& e : epochs) {
    out.push_back(
        {e.at(0).get<int>(), number(e.at(1)), number(e.at(2)), number(e.at(3)), number(e.at(4))});
  }
  return out;
}

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
    sections.push_back({rankSyncSection(static_cast<int>(rank)), syncStates[rank]});
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
  if (run.value("format", 0) != kRunFormat) {
    throw DataError(
        fmt::format("{}: run format {} (this gradsync reads {}; format 1 was "
                    "written without the ranks' synchronization state)",
                    checkpoint.path, run.value("format", 0), kRunFormat));
  }
  const std::string path = checkpoint.path;
  try {
    if (run.contains("elastic"))
      return resumePointOfElasticRun(run, identity, std::move(checkpoint));
    checkIdentity(run, identity, path);
    return resumePointFrom(run, std::move(checkpoint));
  } catch (const nlohmann::json::exception& e) {
    throw DataError(fmt::format("{}: the run section lacks a setting: {}", path, e.what()));
  }
}

RunPosition loadResumePoint(const ResumePoint& point, torch::nn::Module& model,
                            torch::optim::Optimizer& optimizer, int rank, int workers,
                            int64_t stepsPerEpoch) {
  if (point.fromElastic) checkElasticPosition(point, stepsPerEpoch);
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
  if (point.fromElastic) {
    for (const Section& section : point.checkpoint.sections) {
      if (section.name == "sync") position.syncState = section.data;
    }
    return position;
  }
  position.syncState =
      findSection(point.checkpoint.sections, rankSyncSection(rank % point.workers)).data;
  return position;
}

}  // namespace gradsync
