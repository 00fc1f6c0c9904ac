#include "torch/loop/metrics.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "gradsync/error.h"

namespace gradsync {
namespace {

// This process's peak resident set so far (getrusage: Linux reports KiB). With ranks as
// processes it is rank 0's alone; with rank threads, the whole job's.
double peakRssMiB() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

// --compress-warmup as given: "auto" or its number of steps.
nlohmann::json warmupJson(int64_t warmupSteps) {
  return warmupSteps == kAutoWarmup ? nlohmann::json("auto") : nlohmann::json(warmupSteps);
}

}  // namespace

void writeMetrics(const std::string& path, const TrainOptions& options, int workers,
                  const TrainResult& result) {
  // A pipeline's ranks are its stages times its replicas; each replica takes --batch-size.
  const size_t batchTakers =
      options.pipeline.enabled() ? std::max(1, workers / options.pipeline.stages) : workers;
  nlohmann::json config = {{"model", options.model},
                           {"compute", options.compute},
                           {"compute_scale", options.computeScale},
                           {"dataset", options.dataset},
                           {"workers", workers},
                           {"batch_size", options.batchSize},
                           {"global_batch", options.batchSize * batchTakers},
                           {"epochs", options.epochs},
                           {"steps", options.steps},
                           {"lr", options.lr},
                           {"momentum", options.momentum},
                           {"fused_update", options.fusedUpdate},
                           {"lars", options.lars},
                           {"seed", options.seed},
                           {"threads", options.threads},
                           {"sync", options.sync},
                           {"ps", options.strategy.ps},
                           {"servers", options.strategy.servers},
                           {"delay_warmup", options.strategy.warmup},
                           {"local_lr", options.strategy.localLr},
                           {"local_momentum", options.strategy.localMomentum},
                           {"glu", options.strategy.glu},
                           {"cd_threshold", options.strategy.threshold},
                           {"compress", options.compression.spec},
                           {"eval_every", options.evalEvery},
                           {"eval_samples", options.evalSamples},
                           {"compress_overrides", options.compression.overrides},
                           {"compress_min_elements", options.compression.minElements},
                           {"compress_warmup", warmupJson(options.compression.warmupSteps)},
                           {"compress_warmup_codec", options.compression.warmupCodec},
                           {"guard", options.compression.guard ? "on" : "off"},
                           {"schedule", options.schedule},
                           {"optimizer", options.optimizer},
                           {"weight_decay", options.weightDecay},
                           {"warmup_steps", options.warmupSteps},
                           {"lr_schedule", options.lrSchedule},
                           {"clip_grad_norm", options.clipGradNorm},
                           {"waves", options.waves},
                           {"wave_consistency", options.waveConsistency}};
  if (options.pipeline.enabled()) {
    const PipelineOptions& p = options.pipeline;
    config["pipeline"] = {{"stages", p.stages},
                          {"mode", p.mode},
                          {"micro_batches", p.microBatches},
                          {"weight_stash", p.weightStash},
                          {"compensate", p.compensate},
                          {"lwp_backward", p.lwpBackward},
                          {"stage_layers", p.stageLayers},
                          {"stage_profile", p.stageProfile},
                          {"reference_batch", p.referenceBatch},
                          {"emulated", p.emulate},
                          {"wave_placement", p.wavePlacement},
                          {"pinned", !result.placement.empty()}};
  }
  nlohmann::json epochs = nlohmann::json::array();
  for (const EpochRecord& e : result.epochs) {
    epochs.push_back({{"epoch", e.epoch},
                      {"train_loss", e.trainLoss},
                      {"test_accuracy", e.testAccuracy},
                      {"held_out_loss", e.heldOutLoss},
                      {"seconds", e.seconds},
                      {"samples_per_s", e.samplesPerSecond},
                      {"data_seconds", e.dataSeconds}});
  }
  nlohmann::json evaluations = nlohmann::json::array();
  for (const Evaluation& e : result.evaluations) {
    evaluations.push_back({{"step", e.step},
                           {"seconds", e.seconds},
                           {"test_accuracy", e.testAccuracy},
                           {"held_out_loss", e.heldOutLoss}});
  }
  const StepProfile& p = result.perStep;
  nlohmann::json doc = {{"config", config},
                        {"epochs", epochs},
                        {"evaluations", evaluations},
                        {"summary",
                         {{"steps", result.steps},
                          {"seconds", result.seconds},
                          {"samples_per_s", result.samplesPerSecond},
                          {"final_test_accuracy", result.finalTestAccuracy},
                          // A language model's, nats per token and bits per byte (else null).
                          {"final_held_out_loss", result.finalHeldOutLoss},
                          {"final_bits_per_byte", bitsPerByte(result.finalHeldOutLoss)},
                          {"tokens_per_s", result.tokensPerSecond},
                          {"peak_rss_mib", peakRssMiB()},
                          {"stopped", result.stopped}}},
                        {"per_step",
                         {{"step_ms", p.stepMs},
                          {"compute_ms", p.computeMs},
                          {"comm_ms", p.commMs},
                          {"exposed_comm_ms", p.exposedCommMs},
                          {"optimizer_ms", p.optimizerMs},
                          {"bytes_sent", p.bytesSent},
                          {"dense_bytes", p.denseBytes},
                          {"compression_ratio", p.bytesSent > 0 ? p.denseBytes / p.bytesSent : 1.0},
                          {"encode_ms", p.encodeMs},
                          {"decode_ms", p.decodeMs},
                          {"device_ms", p.deviceMs}}}};
  nlohmann::json stragglers = nlohmann::json::array();
  for (const StragglerReport& r : result.stragglers) {
    stragglers.push_back({{"rank", r.rank},
                          {"slower", r.slower},
                          {"compute_ms", r.computeMs},
                          {"others_compute_ms", r.othersMs},
                          {"since_step", r.sinceStep},
                          {"named_after_steps", r.namedAfter}});
  }
  doc["stragglers"] = stragglers;
  nlohmann::json guard = nlohmann::json::array();
  for (const GuardEvent& e : result.guard) {
    guard.push_back({{"step", e.step},
                     {"unit", e.unit},
                     {"tensors", e.tensors},
                     {"method", e.method},
                     {"signal", e.signal},
                     {"ratio", e.ratio},
                     {"threshold", e.threshold},
                     {"reason", e.reason}});
    if (e.rank >= 0) guard.back()["rank"] = e.rank;  // a worker's own pushes (servers)
  }
  doc["guard"] = guard;
  if (!result.staleness.empty()) {  // asgd, ssp
    nlohmann::json staleness = nlohmann::json::array();
    for (const RankStaleness& r : result.staleness) {
      staleness.push_back(
          {{"rank", r.rank}, {"pushes", r.pushes}, {"mean", r.mean}, {"max", r.max}});
    }
    doc["staleness"] = staleness;
  }
  if (!result.placement.empty()) {  // a pinned pipeline: where every rank computed
    nlohmann::json ranks = nlohmann::json::array();
    for (const RankPlacement& r : result.placement) {
      ranks.push_back({{"rank", r.rank},
                       {"wave", r.wave},
                       {"stage", r.stage},
                       {"device", r.device},
                       {"core", r.core},
                       {"affinity", r.affinity}});
    }
    doc["summary"]["placement"] = ranks;
  }
  doc["summary"]["schedule"] = result.schedule;
  doc["summary"]["fused_update_steps"] = result.fusedUpdateSteps;
  doc["summary"]["compress_warmup_steps"] = result.compressWarmupSteps;
  if (!result.compressSpec.empty()) doc["summary"]["compress"] = result.compressSpec;
  if (result.dataCache) {  // --data-url: rank 0's cache
    const ShardCacheStats& c = *result.dataCache;
    doc["data_cache"] = {{"memory_hits", c.memoryHits},       {"disk_hits", c.diskHits},
                         {"remote_fetches", c.remoteFetches}, {"remote_bytes", c.remoteBytes},
                         {"remote_seconds", c.remoteSeconds}, {"disk_seconds", c.diskSeconds},
                         {"corrupt_shards", c.corruptShards}};
  }
  if (!result.scheduleTuning.empty()) doc["summary"]["schedule_tuning"] = result.scheduleTuning;
  if (!result.rounds.empty()) {  // an elastic run: who trained when
    nlohmann::json rounds = nlohmann::json::array();
    for (const RoundRecord& r : result.rounds) {
      rounds.push_back({{"round", r.round},
                        {"workers", r.workers},
                        {"first_step", r.firstStep},
                        {"epoch", r.epoch + 1},
                        {"samples_used", r.offset}});
    }
    doc["elastic"] = {{"range", options.elastic},
                      {"rounds", rounds},
                      {"final_workers", result.rounds.back().workers}};
  }
  writeMetricsFile(path, doc.dump(2) + "\n");
}

void writeMetricsFile(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary);
    if (!out) throw ConfigError(fmt::format("cannot write the metrics file '{}'", path));
    out << text;
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    throw ConfigError(fmt::format("cannot write the metrics file '{}'", path));
  }
}

}  // namespace gradsync
