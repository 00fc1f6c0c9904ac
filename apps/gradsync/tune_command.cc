// gradsync tune: the fastest schedule x compressor x strategy to dense's accuracy, predicted by
// the simulator and the measured convergence costs (docs/cli.md, docs/simulator.md).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "codec_costs.h"
#include "commands.h"
#include "gradsync/error.h"
#include "sim/tune.h"
#include "sim_flags.h"
#include "svg_chart.h"
#include "tune_verify.h"

namespace gradsync {
namespace {

// Without --latency, candidates are also simulated at these latencies between hosts (RDMA-like
// and a slow cloud network), and the pick is the one whose worst ratio to the best is smallest.
constexpr std::array<double, 2> kHedgeLatencies = {5e-6, 100e-6};

struct TuneFlags {
  SimModelFlags model;
  int servers = 0;
  int top = 10;
  std::string json;
  std::string plot;
  int verify = 0;  // steps per verification run (0: none)
  int verifyTop = 3;
  std::string verifyModel;  // empty: emulated compute
  bool everySchedule = false;
};

// The ranks the table and the chart show: the first `top`, or (the default) the best schedule of
// each of the first `top` compressor x strategy pairs, since a method's schedules are often
// within a few percent of each other; and the recommendation.
std::vector<size_t> shownRanks(const sim::TuneResult& r, const TuneFlags& f) {
  std::set<std::string> methods;
  std::vector<size_t> shown;
  for (size_t i = 0; i < r.ranked.size() && shown.size() < static_cast<size_t>(f.top); ++i) {
    const sim::TuneCandidate& c = r.ranked[i];
    if (f.everySchedule || methods.insert(c.compress + " " + c.sync.label()).second)
      shown.push_back(i);
  }
  if (r.topPick < r.ranked.size() &&
      std::find(shown.begin(), shown.end(), r.topPick) == shown.end())
    shown.push_back(r.topPick);
  return shown;
}

void printRanked(const sim::TuneResult& r, const std::vector<size_t>& shown) {
  const double best = r.ranked.front().timeToAccuracy();
  const bool hedged = !r.hedgeLatencies.empty();
  std::printf("%4s  %-26s %-20s %-30s %10s %7s %9s%s\n", "rank", "schedule", "compress", "sync",
              "step ms", "factor", "to acc.", hedged ? "  worst" : "");
  for (size_t i : shown) {
    const sim::TuneCandidate& c = r.ranked[i];
    const bool bound = c.cost.status == sim::Convergence::kAtLeast;
    const std::string worst = !hedged            ? ""
                              : c.worstRatio > 0 ? fmt::format(" {:6.2f}x", c.worstRatio)
                                                 : "       -";
    std::printf("%4zu  %-26s %-20s %-30s %10.2f %s%6.2f %8.2fx%s%s\n", i + 1, c.schedule.c_str(),
                c.compress.c_str(), c.sync.label().c_str(), c.stepSeconds * 1e3, bound ? ">" : " ",
                c.cost.factor, c.timeToAccuracy() / best, worst.c_str(),
                i == r.topPick ? "  <- recommended" : (bound ? "  (factor is a lower bound)" : ""));
  }
}

// The legend of the "worst" column.
void printHedgeNote(const sim::TuneResult& r, const sim::SimOptions& base) {
  if (r.hedgeLatencies.empty()) return;
  std::string latencies;
  for (double l : r.hedgeLatencies) latencies += fmt::format("{:g} us, ", l * 1e6);
  std::printf(
      "worst: the largest time to accuracy at %sand %g us per message between hosts, each as a "
      "multiple of that latency's best; the recommendation minimises it, so that it holds on "
      "networks faster or slower than the default (--latency states yours)\n",
      latencies.c_str(), base.cluster.latency * 1e6);
}

// One row per excluded method on ring ssgd and per strategy without compression; compressors
// off ring ssgd (excluded for the same reasons, or measured under ring ssgd only) are counted.
void printExcluded(const sim::TuneResult& r) {
  size_t offRing = 0;
  std::printf("excluded (not simulated):\n");
  for (const sim::TuneExclusion& e : r.excluded) {
    const bool ring = e.sync.sync == "ssgd" && !e.sync.throughServers();
    if (!ring && e.compress != "none") {
      ++offRing;
      continue;
    }
    std::printf("      %-20s %-30s %s\n", e.compress.c_str(), e.sync.label().c_str(),
                e.cost.reason.c_str());
  }
  if (offRing > 0)
    std::printf(
        "      and %zu compressor x strategy pairs off ring ssgd (the reasons above, or a "
        "compressor's cost measured under ring ssgd only; --json lists them)\n",
        offRing);
}

nlohmann::json candidateJson(const sim::TuneCandidate& c, double best, int workers) {
  return {{"schedule", c.schedule},
          {"compress", c.compress},
          {"sync", c.sync.label()},
          {"step_ms", c.stepSeconds * 1e3},
          {"factor", c.cost.factor},
          {"factor_status", sim::toString(c.cost.status)},
          {"factor_from", c.cost.reason},
          {"time_to_accuracy_vs_best", c.timeToAccuracy() / best},
          {"worst_ratio_over_latencies", c.worstRatio},
          {"train_flags", sim::trainFlags(c, workers)}};
}

nlohmann::json resultJson(const sim::SimOptions& base, const sim::TuneResult& r) {
  const double best = r.ranked.front().timeToAccuracy();
  nlohmann::json ranked = nlohmann::json::array(), excluded = ranked, rejected = ranked;
  for (const auto& c : r.ranked) ranked.push_back(candidateJson(c, best, base.cluster.workers));
  for (const auto& e : r.excluded)
    excluded.push_back({{"compress", e.compress},
                        {"sync", e.sync.label()},
                        {"status", sim::toString(e.cost.status)},
                        {"reason", e.cost.reason}});
  for (const auto& j : r.rejected)
    rejected.push_back({{"schedule", j.schedule},
                        {"compress", j.compress},
                        {"sync", j.sync.label()},
                        {"error", j.error}});
  nlohmann::json out = {{"profile", base.profile.name},
                        {"device", base.profile.device},
                        {"cluster", base.cluster.describe()},
                        {"ranked", ranked},
                        {"excluded", excluded},
                        {"rejected", rejected}};
  if (r.topPick < r.ranked.size()) out["recommended"] = ranked[r.topPick];
  return out;
}

void writePlot(const std::string& path, const sim::SimOptions& base, const sim::TuneResult& r,
               const std::vector<size_t>& shown) {
  BarChart chart;
  chart.title = fmt::format("gradsync tune: {} on {}", base.profile.name,  // the device is long
                            base.cluster.describe());
  chart.valueSuffix = "x";
  chart.xLabel = "predicted time to dense's accuracy (x the best candidate's)";
  const double best = r.ranked.front().timeToAccuracy();
  for (size_t i : shown) {
    const sim::TuneCandidate& c = r.ranked[i];
    chart.labels.push_back(fmt::format("{}{} · {} · {}{}", i == r.topPick ? "recommended: " : "",
                                       c.schedule, c.compress, c.sync.label(),
                                       c.cost.status == sim::Convergence::kAtLeast ? " (>=)" : ""));
    chart.values.push_back(c.timeToAccuracy() / best);
  }
  writeTextFile(path, renderBarSvg(chart));
}

// Runs the first --verify-top of the shown candidates and the recommendation in `gradsync train`
// and prints them re-ranked by measured step time.
nlohmann::json verify(const TuneFlags& f, const sim::TuneResult& r, std::vector<size_t> ranks,
                      int workers) {
#ifndef GRADSYNC_HAVE_TORCH
  throw ConfigError("--verify needs gradsync train: a build with LibTorch");
#endif
  ranks.resize(std::min(ranks.size(), static_cast<size_t>(f.verifyTop)));
  if (r.topPick < r.ranked.size() &&
      std::find(ranks.begin(), ranks.end(), r.topPick) == ranks.end())
    ranks.push_back(r.topPick);
  const VerifyOptions options{.steps = f.verify,
                              .workers = workers,
                              .profile = f.model.profile,
                              .computeScale = f.model.computeScale,
                              .model = f.verifyModel,
                              .bandwidth = f.model.bandwidth,
                              .latency = f.model.latency.empty() ? "0" : f.model.latency};
  const std::vector<VerifiedCandidate> verified = verifyCandidates(r, ranks, options);
  const double best = verified.front().measuredTimeToAccuracy();
  const std::string compute =
      f.verifyModel.empty() ? "emulated compute" : "--model " + f.verifyModel;
  std::printf("verified (%d steps of gradsync train each, %s):\n", f.verify, compute.c_str());
  std::printf("%4s %9s  %-26s %-20s %-30s %12s %10s %9s\n", "rank", "predicted", "schedule",
              "compress", "sync", "predicted ms", "measured", "to acc.");
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < verified.size(); ++i) {
    const VerifiedCandidate& v = verified[i];
    const sim::TuneCandidate& c = *v.candidate;
    std::printf("%4zu %9zu  %-26s %-20s %-30s %12.2f %10.2f %8.2fx\n", i + 1, v.predictedRank,
                c.schedule.c_str(), c.compress.c_str(), c.sync.label().c_str(), c.stepSeconds * 1e3,
                v.measuredStepMs, v.measuredTimeToAccuracy() / best);
    rows.push_back({{"predicted_rank", v.predictedRank},
                    {"train_flags", sim::trainFlags(c, workers)},
                    {"predicted_step_ms", c.stepSeconds * 1e3},
                    {"measured_step_ms", v.measuredStepMs},
                    {"measured_time_to_accuracy_vs_best", v.measuredTimeToAccuracy() / best}});
  }
  std::printf("verified best: gradsync train %s\n",
              sim::trainFlags(*verified.front().candidate, workers).c_str());
  return rows;
}

void run(const TuneFlags& f) {
  if (f.top < 1) throw ConfigError(fmt::format("--top must be at least 1, not {}", f.top));
  if (f.verify < 0) throw ConfigError(fmt::format("--verify must be >= 0, not {}", f.verify));
  if (f.verifyTop < 1)
    throw ConfigError(fmt::format("--verify-top must be at least 1, not {}", f.verifyTop));
  if (!f.verifyModel.empty() && f.model.computeScale != 1)
    throw ConfigError(
        "--compute-scale scales emulated compute; --verify-model trains the model for real");
  if (f.servers < 0) throw ConfigError(fmt::format("--servers must be >= 0, not {}", f.servers));
  sim::SimOptions base;
  base.profile = loadScaledProfile(f.model);
  base.cluster = parseCluster(f.model);
  const CodecCostSource codecs = codecCostSource(f.model, base.profile);
  base.codecCost = codecs.cost;
  std::vector<double> hedge;
  if (latencyDefaulted(f.model)) hedge = {kHedgeLatencies.begin(), kHedgeLatencies.end()};
  const auto start = std::chrono::steady_clock::now();
  const sim::TuneResult r = sim::tune(base, sim::defaultTuneGrid(f.servers), hedge);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "gradsync tune: %s (%s) on %s: %zu candidates simulated in %.1f s, %zu impossible "
      "combinations rejected\n",
      base.profile.name.c_str(), base.profile.device.c_str(), base.cluster.describe().c_str(),
      r.ranked.size() + r.rejected.size(), seconds, r.rejected.size());
  if (const std::string note = latencyNote(f.model); !note.empty())
    std::printf("%s\n", note.c_str());
  std::printf("%s\n", codecs.describe().c_str());
  const std::vector<size_t> shown = shownRanks(r, f);
  printRanked(r, shown);
  printHedgeNote(r, base);
  printExcluded(r);
  if (r.topPick < r.ranked.size()) {
    std::printf("recommended: gradsync train %s\n",
                sim::trainFlags(r.ranked[r.topPick], base.cluster.workers).c_str());
  } else {
    std::printf("no candidate with a measured (not bounded) convergence cost: no recommendation\n");
  }
  std::fflush(stdout);
  nlohmann::json doc = resultJson(base, r);
  doc["latency_defaults"] = latencyNote(f.model);
  doc["codec_costs"] = codecs.describe();
  if (f.verify > 0) doc["verified"] = verify(f, r, shown, base.cluster.workers);
  if (!f.json.empty()) writeTextFile(f.json, doc.dump(1) + "\n");
  if (!f.plot.empty()) writePlot(f.plot, base, r, shown);
}

}  // namespace

void addTuneCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<TuneFlags>();
  TuneFlags& f = *flags;
  CLI::App* cmd = app.add_subcommand(
      "tune", "rank schedules, compressors and strategies by predicted time to accuracy");
  addSimModelFlags(cmd, f.model);
  cmd->add_option("--servers", f.servers, "also try K parameter servers on hosts of their own")
      ->capture_default_str();
  cmd->add_option("--top", f.top,
                  "compressor x strategy pairs (their best schedule) to print and plot")
      ->capture_default_str();
  cmd->add_flag("--every-schedule", f.everySchedule,
                "print and plot the top candidates, not only each pair's best schedule");
  cmd->add_option("--json", f.json, "write every candidate, exclusion and rejection as JSON");
  cmd->add_option("--plot", f.plot, "write the top candidates as an SVG bar chart");
  cmd->add_option(
         "--verify", f.verify,
         "run the top shown candidates for N steps of gradsync train (emulated compute) and "
         "re-rank them by measured step time")
      ->capture_default_str();
  cmd->add_option("--verify-top", f.verifyTop, "candidates --verify runs")->capture_default_str();
  cmd->add_option("--verify-model", f.verifyModel,
                  "--verify trains this model (train's --model, real CPU compute on Fashion-MNIST) "
                  "instead of emulating the profile's compute");
  cmd->callback([flags, &context] {
    run(*flags);
    context.exitCode = 0;
  });
}

}  // namespace gradsync
