// `gradsync train --pipeline` as users run it: stage processes over TCP, the emulator, and a
// stage killed mid-training.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "pipeline/device_pinning.h"
#include "support/killed_rank.h"
#include "support/read_file.h"
#include "support/scratch_dir.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::readFile;

fs::path scratch(const std::string& name) {
  return testing::scratchDir("gradsync-pipeline-e2e", name);
}
using testing::removeScratch;

struct CliRun {
  ExitStatus status;
  std::string out, err;
};

CliRun gradsync(const std::vector<std::string>& args, const fs::path& dir) {
  SpawnOptions spawn;
  spawn.argv = {GRADSYNC_BIN};
  spawn.argv.insert(spawn.argv.end(), args.begin(), args.end());
  spawn.stdoutPath = (dir / "out").string();
  spawn.stderrPath = (dir / "err").string();
  auto ended = waitAny({spawnProcess(spawn)}, 240s);
  EXPECT_TRUE(ended.has_value()) << "gradsync hung";
  return {ended ? ended->second : ExitStatus{.code = -1}, readFile(dir / "out"),
          readFile(dir / "err")};
}

double trainLoss(const fs::path& metrics) {
  return nlohmann::json::parse(readFile(metrics))["epochs"].back()["train_loss"].get<double>();
}

// `gradsync` with `common` then `extra`, its metrics to dir/name; expects it to succeed.
CliRun trainWithMetrics(const fs::path& dir, const std::vector<std::string>& common,
                        const std::vector<std::string>& extra, const std::string& name) {
  std::vector<std::string> args = common;
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--metrics", (dir / name).string()});
  CliRun r = gradsync(args, dir);
  EXPECT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  return r;
}

// Three stage processes over TCP and the emulator: the same plan, the same arithmetic (the
// losses' bits), the pipeline's settings in the metrics.
TEST(PipelineCli, StageProcessesTrainAsTheEmulatorBitwise) {
  const fs::path dir = scratch("run");
  const std::vector<std::string> common = {
      "train",        "--model", "mlp",          "--steps", "40",
      "--batch-size", "16",      "--lr",         "0.01",    "--quiet",
      "--pipeline",   "3",       "--compensate", "sc+lwp",  "--weight-stash"};
  std::vector<std::string> real = common;
  real.insert(real.end(), {"--metrics", (dir / "real.json").string()});
  CliRun r = gradsync(real, dir);
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("pipeline of 3 stages (pb), 3 ranks, 40 steps"), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(dir / "real.json"));
  EXPECT_EQ(doc["config"]["pipeline"]["stages"], 3);
  EXPECT_EQ(doc["config"]["pipeline"]["compensate"], "sc+lwp");
  EXPECT_EQ(doc["summary"]["steps"], 40);

  std::vector<std::string> emulated = common;
  emulated.insert(emulated.end(), {"--pipeline-emulate", "--metrics", (dir / "emu.json").string()});
  CliRun e = gradsync(emulated, dir);
  ASSERT_TRUE(e.status.ok()) << e.status.describe() << "\n" << e.err;
  nlohmann::json emu = nlohmann::json::parse(readFile(dir / "emu.json"));
  EXPECT_TRUE(emu["config"]["pipeline"]["emulated"].get<bool>());
  EXPECT_EQ(trainLoss(dir / "emu.json"), trainLoss(dir / "real.json"));
  EXPECT_EQ(emu["summary"]["final_test_accuracy"], doc["summary"]["final_test_accuracy"]);
  // Fashion-MNIST is learnt (the loss compared above is not a constant).
  EXPECT_GT(doc["summary"]["final_test_accuracy"].get<double>(), 0.4);  // measured 0.544

  CliRun bad = gradsync({"train", "--model", "mlp", "--pipeline", "2", "--workers", "3"}, dir);
  EXPECT_EQ(bad.status.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("stages x replicas"), std::string::npos) << bad.err;
  CliRun elastic =
      gradsync({"train", "--model", "mlp", "--pipeline", "2", "--elastic", "2:3"}, dir);
  EXPECT_EQ(elastic.status.code, 2) << elastic.err;
  EXPECT_NE(elastic.err.find("--elastic does not combine with --pipeline"), std::string::npos)
      << elastic.err;
  if (!HasFailure()) removeScratch(dir);
}

// Fill-drain with one stage is the ordinary trainer's SGD (up to the update's rounding: torch's
// kernels against optim/'s loop), and three stage processes run the same micro-batches as one.
TEST(PipelineCli, FillDrainIsOrdinarySgd) {
  const fs::path dir = scratch("fill-drain");
  const std::vector<std::string> common = {"train", "--model",      "mlp", "--steps", "50", "--lr",
                                           "0.05",  "--batch-size", "32",  "--quiet"};
  auto run = [&](const std::string& name, const std::vector<std::string>& extra) {
    return trainWithMetrics(dir, common, extra, name);
  };
  run("sgd.json", {"--workers", "1"});
  run("one.json", {"--pipeline", "1", "--pipeline-mode", "fill-drain", "--micro-batches", "4"});
  run("three.json", {"--pipeline", "3", "--pipeline-mode", "fill-drain", "--micro-batches", "4"});
  const double sgd = trainLoss(dir / "sgd.json");
  // Micro-batches of 8 whose gradients add up to the batch's of 32: rounding only.
  EXPECT_NEAR(trainLoss(dir / "one.json"), sgd, 1e-5 * sgd);
  EXPECT_EQ(trainLoss(dir / "three.json"), trainLoss(dir / "one.json"));
  EXPECT_LT(sgd, 1.8);  // learning: ln 10 = 2.30 before any step
  if (!HasFailure()) removeScratch(dir);
}

// A stage process killed mid-training: every other stage fails promptly (not at its 30 s
// timeout) with an error naming the killed rank, never hangs.
TEST(PipelineCli, KilledStageIsNamedByEveryOtherStage) {
  const fs::path dir = scratch("killed");
  testing::expectKilledRankNamedByTheOthers(
      {.argv = {GRADSYNC_BIN, "train", "--model", "cnn-gn", "--dataset", "synthetic", "--pipeline",
                "4", "--batch-size", "1", "--steps", "1000000", "--timeout", "30s"},
       .ready = "pipeline: ",  // rank 0 prints the plan once every rank connected
       .token = "pipeline"},
      dir);
  if (!HasFailure()) removeScratch(dir);
}

// Model-parallel Wavelet as processes: --pipeline 2 --waves 2 starts 4 stage ranks (2 rotated
// replicas), each pinned to its device's core as its metrics record (the CPUs its thread was on
// at the end), and trains exactly as 2 unpinned replicas (--workers 4) and as the same placement.
TEST(PipelineCli, RotatedWavesArePinnedReplicas) {
  const fs::path dir = scratch("waves");
  const std::vector<std::string> common = {
      "train",           "--model",   "cnn-gn",     "--dataset", "synthetic", "--steps",   "6",
      "--batch-size",    "8",         "--pipeline", "2",         "--quiet",   "--threads", "1",
      "--pipeline-mode", "fill-drain"};
  auto run = [&](const std::string& name, const std::vector<std::string>& extra) {
    return trainWithMetrics(dir, common, extra, name);
  };
  CliRun rotated = run("rotated.json", {"--waves", "2"});
  EXPECT_NE(rotated.out.find("4 ranks"), std::string::npos) << rotated.out;
  EXPECT_NE(rotated.out.find("2 waves, rotated placement"), std::string::npos) << rotated.out;
  run("same.json", {"--waves", "2", "--wave-placement", "same"});
  run("replicas.json", {"--workers", "4"});
  for (const char* name : {"same.json", "replicas.json"}) {
    EXPECT_EQ(trainLoss(dir / name), trainLoss(dir / "rotated.json")) << name;
  }
  const std::vector<int> cpus = threadCpus();  // the ranks inherit this process's CPUs
  for (const char* name : {"rotated.json", "same.json"}) {
    const nlohmann::json doc = nlohmann::json::parse(readFile(dir / name));
    EXPECT_TRUE(doc["config"]["pipeline"]["pinned"].get<bool>());
    const nlohmann::json& ranks = doc["summary"]["placement"];
    ASSERT_EQ(ranks.size(), 4u) << name;
    for (const nlohmann::json& r : ranks) {
      const int wave = r["wave"], stage = r["stage"];
      const int device = name == std::string("rotated.json") ? (stage + wave) % 2 : stage;
      EXPECT_EQ(r["rank"].get<int>(), 2 * wave + stage);
      EXPECT_EQ(r["device"].get<int>(), device) << name << " " << r;
      const int core = cpus[static_cast<size_t>(device) % cpus.size()];
      EXPECT_EQ(r["core"].get<int>(), core) << name << " " << r;
      EXPECT_EQ(r["affinity"].get<std::vector<int>>(), std::vector<int>{core}) << name << " " << r;
    }
  }
  const nlohmann::json replicas = nlohmann::json::parse(readFile(dir / "replicas.json"));
  EXPECT_FALSE(replicas["config"]["pipeline"]["pinned"].get<bool>());
  EXPECT_EQ(replicas["config"]["global_batch"], 16);  // 2 replicas of 8, not 4 ranks of 8
  EXPECT_FALSE(replicas["summary"].contains("placement"));
  if (!HasFailure()) removeScratch(dir);
}

// What model-parallel waves cannot run is refused before any rank starts (exit status 2).
TEST(PipelineCli, WavesItCannotPlaceAreRefused) {
  const fs::path dir = scratch("waves-refused");
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--pipeline", "2", "--waves", "3"}, "--waves 3 on 2 stages: at most one wave per device"},
      {{"--pipeline", "2", "--waves", "2", "--pipeline-emulate"},
       "--waves 2 does not combine with --pipeline-emulate"},
      {{"--pipeline", "2", "--waves", "2", "--wave-consistency", "shared"},
       "--wave-consistency shared is data-parallel Wavelet's"},
      {{"--pipeline", "2", "--waves", "2", "--workers", "2"},
       "--pipeline 2 --waves 2 runs 4 ranks (stages x waves), not --workers 2"},
      {{"--pipeline", "2", "--waves", "2", "--wave-placement", "spiral"},
       "--wave-placement must be rotated or same"},
      {{"--pipeline", "2", "--pin-devices", "--pipeline-emulate"},
       "--pin-devices does not combine with --pipeline-emulate"},
  };
  for (const auto& [flags, reason] : refused) {
    std::vector<std::string> args = {"train", "--model", "mlp", "--steps", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    CliRun r = gradsync(args, dir);
    EXPECT_EQ(r.status.code, 2) << reason << "\n" << r.err;
    EXPECT_NE(r.err.find(reason), std::string::npos) << r.err;
  }
  if (!HasFailure()) removeScratch(dir);
}

// A killed rank of the rotated waves (wave 1's stage 0, on the other core than wave 0's): every
// other rank fails naming it.
TEST(PipelineCli, KilledWaveRankIsNamedByEveryOtherRank) {
  const fs::path dir = scratch("killed-wave");
  testing::expectKilledRankNamedByTheOthers(
      {.argv = {GRADSYNC_BIN, "train", "--model", "mlp", "--dataset", "synthetic", "--pipeline",
                "2", "--waves", "2", "--batch-size", "4", "--steps", "1000000", "--timeout", "30s"},
       .ready = "pipeline: ",
       .token = "pipeline-waves"},
      dir);
  if (!HasFailure()) removeScratch(dir);
}

}  // namespace
}  // namespace gradsync
