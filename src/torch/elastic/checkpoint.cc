#include "torch/elastic/checkpoint.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gradsync/error.h"
#include "torch/api/archive_bytes.h"

namespace gradsync {
namespace {

// The fixed runs' "run" section is format 2 too (torch/loop/checkpointing.cc); an elastic one has
// an "elastic" object, which the fixed loader refuses.
constexpr int kElasticRunFormat = 2;

nlohmann::json elasticRunJson(const ElasticIdentity& identity, int64_t step) {
  return {{"format", kElasticRunFormat},
          {"elastic", {{"max_workers", identity.maxWorkers}}},
          {"model", identity.model},
          {"dataset", identity.dataset},
          {"batch_size", identity.batchSize},
          {"seed", identity.seed},
          {"step", step}};
}

void checkElasticIdentity(const nlohmann::json& run, const ElasticIdentity& identity,
                          const std::string& path) {
  if (!run.contains("elastic")) {
    throw ConfigError(
        fmt::format("checkpoint {} was written by a run of {} fixed workers, without --elastic: "
                    "its data position is DistributedSampler's shards, which an elastic run "
                    "cannot take",
                    path, run.value("workers", 0)),
        {.hint = "resume it without --elastic, or start the elastic run in another "
                 "--checkpoint-dir"});
  }
  const ElasticIdentity saved{run.at("model"), run.at("dataset"), run.at("batch_size"),
                              run.at("elastic").at("max_workers"), run.at("seed")};
  auto differs = [&](const char* key, const auto& theirs, const auto& mine) {
    if (theirs == mine) return;
    throw ConfigError(fmt::format("checkpoint {} was written with {} {} but this run has {}", path,
                                  key, nlohmann::json(theirs).dump(), nlohmann::json(mine).dump()),
                      {.hint = "resume with the same settings (any number of workers within "
                               "--elastic's range), or use another --checkpoint-dir"});
  };
  differs("model", saved.model, identity.model);
  differs("dataset", saved.dataset, identity.dataset);
  differs("batch_size", saved.batchSize, identity.batchSize);
  differs("--elastic's MAX (the global batch is MAX x batch size)", saved.maxWorkers,
          identity.maxWorkers);
  differs("seed", saved.seed, identity.seed);
}

}  // namespace

void saveElasticCheckpoint(CheckpointDir& dir, torch::nn::Module& model,
                           torch::optim::Optimizer& optimizer, const ElasticIdentity& identity,
                           const ElasticProgress& progress, const std::vector<uint8_t>& sync) {
  const std::string run = elasticRunJson(identity, progress.step).dump();
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
  try {
    checkElasticIdentity(run, identity, checkpoint.path);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(
        fmt::format("{}: the run section lacks a setting: {}", checkpoint.path, e.what()));
  }
  ElasticProgress progress = decodeProgress(findSection(checkpoint.sections, "progress").data);
  loadModuleInPlace(model, findSection(checkpoint.sections, "model").data,
                    fmt::format("{}: section 'model'", checkpoint.path));
  loadArchiveBytes(findSection(checkpoint.sections, "optimizer").data,
                   fmt::format("{}: section 'optimizer'", checkpoint.path),
                   [&](auto& archive) { optimizer.load(archive); });
  sync.clear();
  for (const Section& section : checkpoint.sections) {
    if (section.name == "sync") sync = section.data;
  }
  return progress;
}

}  // namespace gradsync
