#include "torch/elastic/checkpoint.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gradsync/error.h"
#include "torch/api/archive_bytes.h"
#include "torch/loop/checkpointing.h"

namespace gradsync {
namespace {

// The fixed runs' "run" section is format 2 too (torch/loop/checkpointing.cc); an elastic one has
// an "elastic" object, which tells the two apart (each loader takes both: docs/checkpoints.md).
constexpr int kElasticRunFormat = 2;

size_t globalBatchOf(const ElasticIdentity& identity) {
  return static_cast<size_t>(identity.maxWorkers) * identity.batchSize;
}

// What a run without --elastic resuming this checkpoint needs (torch/loop/checkpointing.cc): the
// settings, the finished epochs, the epoch's mean loss and the data position as steps of the
// epoch (an epoch used up is the next one's start).
nlohmann::json elasticRunJson(const ElasticIdentity& identity, const ElasticProgress& progress) {
  EpochPosition at = progress.data;
  if (at.offset >= identity.datasetSize) at = {at.epoch + 1, 0};
  return {{"format", kElasticRunFormat},
          {"elastic", {{"max_workers", identity.maxWorkers}}},
          {"model", identity.model},
          {"dataset", identity.dataset},
          {"batch_size", identity.batchSize},
          {"seed", identity.seed},
          {"sync", identity.sync},
          {"compress", identity.compress},
          {"step", progress.step},
          {"epoch", at.epoch},
          {"epoch_step", at.offset / globalBatchOf(identity)},
          {"epoch_loss_mean",
           progress.epochLossCount > 0 ? progress.epochLossSum / progress.epochLossCount : 0.0},
          {"epochs", epochsJson(progress.epochs)}};
}

// `what` in the checkpoint is `mine`, or ConfigError naming it.
template <class T>
void expectSame(const std::string& path, const char* what, const T& theirs, const T& mine) {
  if (theirs == mine) return;
  throw ConfigError(fmt::format("checkpoint {} was written with {} {} but this run has {}", path,
                                what, nlohmann::json(theirs).dump(), nlohmann::json(mine).dump()),
                    {.hint = "resume with the same settings (any number of workers within "
                             "--elastic's range), or use another --checkpoint-dir"});
}

// A fixed run's checkpoint (without --elastic) as an elastic run's progress: at MAX workers an
// elastic step takes DistributedSampler's global batch, so the fixed run's step s is the elastic
// position (s / steps per epoch, (s mod steps per epoch) x MAX x B), and s x MAX x B samples
// were trained (the dropped remainders of its epochs are not). Its epoch's loss sums become the
// epoch's sum and count; its evaluations and epoch seconds are not in it.
ElasticProgress progressOfFixedRun(const nlohmann::json& run, const ElasticIdentity& identity,
                                   const std::string& path) {
  expectSame(path,
             "--elastic's MAX (the global batch is MAX x batch size, the fixed run's "
             "workers x batch size)",
             run.value("batch_workers", run.at("workers").get<int>()), identity.maxWorkers);
  expectSame(path, "sync", run.at("sync").get<std::string>(), identity.sync);
  expectSame(path, "compress", run.at("compress").get<std::string>(), identity.compress);
  const size_t globalBatch = globalBatchOf(identity);
  const auto perEpoch =
      static_cast<int64_t>(std::max<size_t>(1, identity.datasetSize / globalBatch));
  ElasticProgress progress;
  progress.step = run.at("step");
  progress.samples = progress.step * static_cast<int64_t>(globalBatch);
  progress.data = {progress.step / perEpoch,
                   static_cast<size_t>(progress.step % perEpoch) * globalBatch};
  const auto sums = run.at("epoch_loss_sums").get<std::vector<double>>();
  for (double sum : sums) progress.epochLossSum += sum;
  progress.epochLossCount =
      static_cast<double>(sums.size() * static_cast<size_t>(progress.step % perEpoch));
  progress.epochs = epochsFromJson(run.at("epochs"));
  return progress;
}

// The settings every checkpoint records; an elastic one's MAX too (a fixed one's global batch:
// progressOfFixedRun).
void checkElasticIdentity(const nlohmann::json& run, const ElasticIdentity& identity,
                          const std::string& path) {
  expectSame(path, "model", run.at("model").get<std::string>(), identity.model);
  expectSame(path, "dataset", run.at("dataset").get<std::string>(), identity.dataset);
  expectSame(path, "batch_size", run.at("batch_size").get<size_t>(), identity.batchSize);
  expectSame(path, "seed", run.at("seed").get<uint64_t>(), identity.seed);
  if (!run.contains("elastic")) return;
  expectSame(path, "--elastic's MAX (the global batch is MAX x batch size)",
             run.at("elastic").at("max_workers").get<int>(), identity.maxWorkers);
}

}  // namespace

void saveElasticCheckpoint(CheckpointDir& dir, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, const ElasticIdentity& identity,
                           const ElasticProgress& progress, const std::vector<uint8_t>& sync) {
  const std::string run = elasticRunJson(identity, progress).dump();
  std::vector<Section> sections = {
      {"run", {run.begin(), run.end()}},
      {"progress", encodeProgress(progress)},
      {"model", archiveBytes([&](auto& archive) { model.save(archive); })},
      {"optimizer", archiveBytes([&](auto& archive) { optimizer.save(archive); })}};
  if (!sync.empty()) sections.push_back({"sync", sync});
  dir.write(progress.step, sections);
}

std::optional<ElasticProgress> loadElasticCheckpoint(const CheckpointDir& dir,
                                                     torch::nn::Module& model,
                                                     torch::optim::Optimizer& optimizer,
                                                     const ElasticIdentity& identity,
                                                     std::vector<uint8_t>& sync) {
  if (!dir.latest()) return std::nullopt;
  const LoadedCheckpoint checkpoint = dir.loadLatest();
  const Section& runSection = findSection(checkpoint.sections, "run");
  const nlohmann::json run =
      nlohmann::json::parse(runSection.data, nullptr, /*allow_exceptions=*/false);
  if (run.is_discarded() || !run.is_object() || run.value("format", 0) != kElasticRunFormat) {
    throw DataError(fmt::format("{}: the run section is not a gradsync run of format {}",
                                checkpoint.path, kElasticRunFormat));
  }
  const bool elastic = run.contains("elastic");
  ElasticProgress progress;
  try {
    checkElasticIdentity(run, identity, checkpoint.path);
    progress = elastic ? decodeProgress(findSection(checkpoint.sections, "progress").data)
                       : progressOfFixedRun(run, identity, checkpoint.path);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(
        fmt::format("{}: the run section lacks a setting: {}", checkpoint.path, e.what()));
  }
  loadModuleInPlace(model, findSection(checkpoint.sections, "model").data,
                    fmt::format("{}: section 'model'", checkpoint.path));
  loadArchiveBytes(findSection(checkpoint.sections, "optimizer").data,
                   fmt::format("{}: section 'optimizer'", checkpoint.path),
                   [&](auto& archive) { optimizer.load(archive); });
  sync.clear();
  const std::string syncSection = elastic ? "sync" : rankSyncSection(0);
  for (const Section& section : checkpoint.sections) {
    if (section.name == syncSection) sync = section.data;
  }
  return progress;
}

}  // namespace gradsync
