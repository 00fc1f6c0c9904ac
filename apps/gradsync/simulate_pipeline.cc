#include "simulate_pipeline.h"

#include <cstdio>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/units.h"
#include "gradsync/error.h"
#include "pipeline/balance.h"
#include "sim/pipeline_sim.h"

namespace gradsync {
namespace {

std::string joined(const std::vector<int>& split) {
  return fmt::format("{}", fmt::join(split, ","));
}

}  // namespace

std::vector<sim::PipelineStageCosts> stageCosts(const ModelProfile& profile,
                                                const std::vector<int>& split) {
  const double parameters = static_cast<double>(std::max<size_t>(profile.parameterCount(), 1));
  std::vector<sim::PipelineStageCosts> costs;
  size_t layer = 0;
  for (int count : split) {
    sim::PipelineStageCosts c;
    size_t elements = 0;
    for (int i = 0; i < count; ++i, ++layer) {
      c.forwardSeconds += profile.layers[layer].forwardSeconds;
      c.backwardSeconds += profile.layers[layer].backwardSeconds;
      for (const TensorShape& t : profile.layers[layer].tensors) elements += t.elements;
    }
    c.updateSeconds = profile.updateSeconds * static_cast<double>(elements) / parameters;
    costs.push_back(c);
  }
  return costs;
}

std::vector<int> balancedSplit(const ModelProfile& profile, int stages) {
  std::vector<double> layerCosts;
  for (const LayerProfile& l : profile.layers)
    layerCosts.push_back(l.forwardSeconds + l.backwardSeconds);
  return balanceStages(layerCosts, stages);
}

void addPipelineSimFlags(CLI::App* simulate, PipelineSimFlags& f) {
  simulate->add_option("--pipeline", f.stages, "a pipeline of S stages (0: data parallel)")
      ->capture_default_str();
  simulate->add_option("--pipeline-mode", f.mode, "fill-drain | pb")->capture_default_str();
  simulate->add_option("--micro-batches", f.microBatches, "fill-drain: micro-batches per step")
      ->capture_default_str();
  simulate->add_option("--pipeline-steps", f.steps, "pipeline: steps from empty to empty")
      ->capture_default_str();
  simulate->add_option("--hop", f.hop, "pipeline: one transfer between stages, e.g. 50us")
      ->capture_default_str();
}

void runPipelineSimulation(const ModelProfile& profile, const PipelineSimFlags& f,
                           const std::string& json) {
  sim::PipelineSimOptions o;
  o.shape = {.mode = parsePipelineMode(f.mode), .stages = f.stages, .microBatches = f.microBatches};
  if (f.microBatches < 1) throw ConfigError("--micro-batches must be at least 1");
  if (o.shape.mode == PipelineMode::kPipelined && f.microBatches != 1)
    throw ConfigError("--micro-batches is fill-drain's", {.hint = "pb takes one per step"});
  const std::vector<int> split = balancedSplit(profile, f.stages);
  o.stages = stageCosts(profile, split);
  o.hopSeconds = parseDurationSeconds(f.hop, "--hop");
  o.steps = f.steps;
  const sim::PipelineSimResult r = sim::simulatePipeline(o);
  const double samplesPerStep = static_cast<double>(profile.batchSize * f.microBatches);
  const double samplesPerSecond = samplesPerStep / r.secondsPerStep;
  std::printf(
      "gradsync simulate: %s, pipeline %s of %d stages (layers %s), %lld steps of %.0f samples: "
      "%.3f ms per step, utilisation %.1f%%, %.0f samples/s; activations kept per stage (in "
      "micro-batches) %s\n",
      profile.name.c_str(), f.mode.c_str(), f.stages, joined(split).c_str(),
      static_cast<long long>(f.steps), samplesPerStep, r.secondsPerStep * 1e3, 100 * r.utilisation,
      samplesPerSecond, fmt::format("{}", fmt::join(r.peakActivations, ",")).c_str());
  std::fflush(stdout);
  if (json.empty()) return;
  nlohmann::json doc = {{"profile", profile.name},      {"mode", f.mode},
                        {"stages", f.stages},           {"micro_batches", f.microBatches},
                        {"stage_layers", split},        {"steps", f.steps},
                        {"hop_s", o.hopSeconds},        {"step_ms", r.secondsPerStep * 1e3},
                        {"utilisation", r.utilisation}, {"samples_per_s", samplesPerSecond},
                        {"busy_s", r.busySeconds},      {"peak_activations", r.peakActivations}};
  std::ofstream out(json);
  out << doc.dump(1) << "\n";
  if (!out) throw ConfigError(fmt::format("cannot write {}", json));
}

}  // namespace gradsync
