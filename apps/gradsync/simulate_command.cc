// gradsync simulate: predicted step time of a model profile on a cluster (docs/simulator.md).
#include <chrono>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codec_costs.h"
#include "commands.h"
#include "common/units.h"
#include "compress/registry.h"
#include "gradsync/error.h"
#include "sim/model_profile.h"
#include "sim/simulator.h"
#include "sim_flags.h"
#include "simulate_pipeline.h"
#include "simulate_waves.h"
#include "svg_chart.h"

namespace gradsync {
namespace {

struct SimulateFlags {
  SimModelFlags model;
  std::string schedule = "wfbp";
  std::string sweep;
  std::string json;
  std::string plot;
  std::string writeProfile;
  sim::SimOptions options;
  PipelineSimFlags pipeline;
  WaveSimFlags waves;
};

// --sweep workers=A,B,... or bandwidth=X,Y,...: the swept variable and its values as text.
std::pair<std::string, std::vector<std::string>> parseSweep(const std::string& text) {
  const size_t eq = text.find('=');
  const std::string name = text.substr(0, eq);
  if (eq == std::string::npos || (name != "workers" && name != "bandwidth"))
    throw ConfigError(
        fmt::format("--sweep {}: expected workers=N,N,... or bandwidth=X,X,...", text));
  std::vector<std::string> values;
  for (size_t begin = eq + 1; begin <= text.size();) {
    size_t end = std::min(text.find(',', begin), text.size());
    if (end > begin) values.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  if (values.empty()) throw ConfigError(fmt::format("--sweep {}: no values", text));
  return {name, values};
}

nlohmann::json resultJson(const sim::SimOptions& o, const sim::SimResult& r, double seconds) {
  return {{"workers", o.cluster.workers},
          {"gpus_per_host", o.cluster.gpusPerHost},
          {"bandwidth_gbit", o.cluster.bandwidth * 8 / 1e9},
          {"latency_us", o.cluster.latency * 1e6},
          {"step_ms", r.stepSeconds * 1e3},
          {"compute_ms", r.computeSeconds * 1e3},
          {"exposed_comm_ms", r.exposedCommSeconds * 1e3},
          {"comm_ms", r.commSeconds * 1e3},
          {"bytes_sent_per_step", r.bytesSentPerStep},
          {"largest_sync_bytes", r.largestSyncBytes},
          {"samples_per_s", r.samplesPerSecond},
          {"scaling_efficiency", r.scalingEfficiency},
          {"units", r.units},
          {"events", r.events},
          {"simulation_s", seconds}};
}

void printResult(const sim::SimOptions& o, const SimulateFlags& f, const sim::SimResult& r,
                 double seconds) {
  std::printf(
      "gradsync simulate: %s on %s; %s, %s%s%s: step %.2f ms (compute %.2f, exposed "
      "communication %.2f; communication %.2f), %.0f samples/s, scaling efficiency %.1f%%, "
      "%.2f MB sent per worker per step%s [%llu events, %.3f s]\n",
      o.profile.name.c_str(), o.cluster.describe().c_str(), r.schedule.c_str(), o.sync.c_str(),
      o.strategy.servers > 0 ? fmt::format(" over {} servers", o.strategy.servers).c_str()
      : o.strategy.ps        ? " (co-located servers)"
                             : "",
      o.compression.spec == "none" ? "" : (", " + o.compression.spec).c_str(), r.stepSeconds * 1e3,
      r.computeSeconds * 1e3, r.exposedCommSeconds * 1e3, r.commSeconds * 1e3, r.samplesPerSecond,
      100 * r.scalingEfficiency, r.bytesSentPerStep / 1e6,
      r.largestSyncBytes > 0
          ? fmt::format(" (an outer sync at most {:.2f} MB)", r.largestSyncBytes / 1e6).c_str()
          : "",
      static_cast<unsigned long long>(r.events), seconds);
  std::fflush(stdout);
}

void writePlot(const SimulateFlags& f, const std::string& variable, const nlohmann::json& rows) {
  Chart chart;
  const sim::SimOptions& o = f.options;
  chart.title = fmt::format("gradsync simulate: {} ({}), {} {}{}", o.profile.name, o.profile.device,
                            f.schedule, o.sync,
                            o.compression.spec == "none" ? "" : ", " + o.compression.spec);
  chart.xLabel = variable == "workers" ? "workers" : "bandwidth per host (Gbit/s)";
  chart.yLabel = "samples/s (all workers)";
  chart.logX = true;
  chart.logY = true;  // linear scaling is a straight line; the gap to it reads as a ratio
  ChartSeries predicted{"predicted", {}}, ideal{"linear scaling", {}};
  for (const nlohmann::json& row : rows) {
    chart.x.push_back(row[variable == "workers" ? "workers" : "bandwidth_gbit"].get<double>());
    predicted.y.push_back(row["samples_per_s"].get<double>());
    ideal.y.push_back(predicted.y.back() / row["scaling_efficiency"].get<double>());
  }
  chart.series = {predicted, ideal};
  writeTextFile(f.plot, renderSvg(chart));
}

void run(SimulateFlags& f, bool waves) {
  sim::SimOptions& o = f.options;
  o.profile = loadScaledProfile(f.model);
  if (!f.writeProfile.empty()) writeTextFile(f.writeProfile, profileToJson(o.profile));
  if (waves) return runWaveSimulation(o.profile, f.waves, f.pipeline, o.steps, f.json, f.plot);
  if (f.pipeline.stages > 0) return runPipelineSimulation(o.profile, f.pipeline, f.json);
  o.schedule = ScheduleSpec::parse(f.schedule);
  o.cluster = parseCluster(f.model);
  const CodecCostSource codecs = codecCostSource(f.model, o.profile);
  o.codecCost = codecs.cost;
  std::string variable;
  std::vector<std::string> values{""};
  if (!f.sweep.empty()) std::tie(variable, values) = parseSweep(f.sweep);
  if (!f.plot.empty() && variable.empty()) throw ConfigError("--plot needs --sweep");
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& value : values) {
    sim::SimOptions point = o;
    if (variable == "workers")
      point.cluster.workers = static_cast<int>(parseInteger(value, "--sweep workers"));
    if (variable == "bandwidth")
      point.cluster.bandwidth = parseBandwidth(value, "--sweep bandwidth");
    const auto start = std::chrono::steady_clock::now();
    const sim::SimResult result = sim::simulate(point);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    printResult(point, f, result, seconds);
    rows.push_back(resultJson(point, result, seconds));
  }
  if (const std::string note = latencyNote(f.model); !note.empty())
    std::printf("%s\n", note.c_str());
  if (o.compression.spec != "none") std::printf("%s\n", codecs.describe().c_str());
  if (!f.json.empty()) {
    nlohmann::json out = {{"profile", o.profile.name},
                          {"device", o.profile.device},
                          {"batch_size", o.profile.batchSize},
                          {"schedule", f.schedule},
                          {"sync", o.sync},
                          {"compress", o.compression.spec},
                          {"servers", o.strategy.servers},
                          {"ps", o.strategy.ps},
                          {"sweep", f.sweep},
                          {"latency_defaults", latencyNote(f.model)},
                          {"codec_costs", codecs.describe()},
                          {"results", rows}};
    writeTextFile(f.json, out.dump(1) + "\n");
  }
  if (!f.plot.empty()) writePlot(f, variable, rows);
}

}  // namespace

void addSimulateCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<SimulateFlags>();
  SimulateFlags& f = *flags;
  sim::SimOptions& o = f.options;
  CLI::App* cmd = app.add_subcommand("simulate", "predict step time on a cluster we do not have");
  addSimModelFlags(cmd, f.model);
  cmd->add_option("--schedule", f.schedule, "fifo | wfbp | fusion:MB | p3[:slice=N,window=W]")
      ->capture_default_str();
  cmd->add_option("--sync", o.sync, "as train --sync")->capture_default_str();
  cmd->add_flag("--ps", o.strategy.ps, "ssgd through co-located parameter servers");
  cmd->add_option("--servers", o.strategy.servers, "K parameter servers on hosts of their own")
      ->capture_default_str();
  cmd->add_option("--compress", o.compression.spec, "as train --compress: " + methodChoices())
      ->capture_default_str();
  cmd->add_option("--compress-override", o.compression.overrides, "as train");
  cmd->add_option("--compress-min-elements", o.compression.minElements, "as train")
      ->capture_default_str();
  cmd->add_option("--steps", o.steps,
                  "simulated steps; the first two (or first period) are not measured")
      ->capture_default_str();
  cmd->add_option("--sweep", f.sweep, "workers=N,N,... or bandwidth=X,X,...");
  cmd->add_option("--json", f.json, "write the results as JSON");
  cmd->add_option("--plot", f.plot, "with --sweep: write samples/s as an SVG chart");
  cmd->add_option("--write-profile", f.writeProfile,
                  "write the profile (after --compute-scale) as JSON, as --model-profile reads");
  addPipelineSimFlags(cmd, f.pipeline);
  addWaveSimFlags(cmd, f.waves);
  cmd->callback([flags, cmd, &context] {
    checkWaveFlags(*cmd, flags->waves, flags->pipeline.stages);
    run(*flags, cmd->count("--waves") > 0);
    context.exitCode = 0;
  });
}

}  // namespace gradsync
