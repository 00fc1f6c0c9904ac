#include "torch/recommendation/checkpoint.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gradsync/error.h"
#include "torch/api/archive_bytes.h"

namespace gradsync {
namespace {

constexpr int kFormat = 1;

}  // namespace

std::string recommendationIdentity(const RecommendationOptions& options, int workers) {
  const TrainOptions& t = options.train;
  nlohmann::json identity = {{"model", "dlrm"},
                             {"dataset", t.dataset},
                             {"workers", workers},
                             {"servers", t.strategy.servers},
                             {"batch_size", t.batchSize},
                             {"seed", t.seed},
                             {"tables", options.tables},
                             {"embedding_rows", options.embeddingRows},
                             {"embedding_dim", options.embeddingDim},
                             {"bottom_mlp", options.bottomMlp},
                             {"top_mlp", options.topMlp},
                             {"embedding_optimizer", options.embeddingOptimizer},
                             {"zipf", options.zipf}};
  return identity.dump();
}

void saveRecommendationCheckpoint(CheckpointDir& dir, int64_t step, const std::string& identity,
                                  DlrmModel& model, torch::optim::Optimizer& mlp,
                                  torch::optim::Optimizer* tables) {
  const std::string run = nlohmann::json{
      {"format", kFormat},
      {"identity", nlohmann::json::parse(identity)},
      {"step", step}}.dump();
  std::vector<Section> sections = {
      {"run", {run.begin(), run.end()}},
      {"model", archiveBytes([&](auto& archive) { model.save(archive); })},
      {"optimizer", archiveBytes([&](auto& archive) { mlp.save(archive); })}};
  if (tables) {
    sections.push_back(
        {"table-optimizer", archiveBytes([&](auto& archive) { tables->save(archive); })});
  }
  dir.write(step, sections);
}

void loadRecommendationCheckpoint(const CheckpointDir& dir, int64_t step,
                                  const std::string& identity, DlrmModel& model,
                                  torch::optim::Optimizer& mlp, torch::optim::Optimizer* tables) {
  const std::string path = dir.pathForStep(step);
  const std::vector<Section> sections = readCheckpointFile(path);
  const auto& runBytes = findSection(sections, "run").data;
  nlohmann::json run = nlohmann::json::parse(runBytes.begin(), runBytes.end(), nullptr, false);
  if (run.is_discarded() || run.value("format", 0) != kFormat) {
    throw DataError(fmt::format("{}: not a checkpoint of a recommendation run", path));
  }
  const nlohmann::json mine = nlohmann::json::parse(identity);
  for (const auto& [key, value] : mine.items()) {
    if (!run["identity"].contains(key) || run["identity"][key] != value) {
      throw ConfigError(
          fmt::format("checkpoint {} was written with {} {} but this run has {}", path, key,
                      run["identity"].value(key, nlohmann::json()).dump(), value.dump()),
          {.hint = "resume with the same settings, or use another --checkpoint-dir"});
    }
  }
  // Module::load points each parameter at new storage; the gradient engine's hooks and the
  // optimizers hold the original tensors, so the values are copied back into them.
  std::vector<torch::Tensor> storage;
  for (const torch::Tensor& p : model.parameters()) storage.push_back(p.detach());
  loadArchiveBytes(findSection(sections, "model").data, fmt::format("{}: section 'model'", path),
                   [&](auto& archive) { model.load(archive); });
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> parameters = model.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    storage[i].copy_(parameters[i]);
    parameters[i].set_(storage[i]);
  }
  loadArchiveBytes(findSection(sections, "optimizer").data,
                   fmt::format("{}: section 'optimizer'", path),
                   [&](auto& archive) { mlp.load(archive); });
  if (tables) {
    loadArchiveBytes(findSection(sections, "table-optimizer").data,
                     fmt::format("{}: section 'table-optimizer'", path),
                     [&](auto& archive) { tables->load(archive); });
  }
}

}  // namespace gradsync
