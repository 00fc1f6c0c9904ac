// Preemption as Slurm and Kubernetes do it, on real processes: SIGTERM to `gradsync train`
// (its launcher forwards it to the ranks) makes every rank finish its step, write a final
// checkpoint and exit 75, and the resumed run ends exactly as an uninterrupted one (the same
// final loss and test accuracy, to the last digit). A full disk while checkpointing costs only
// that checkpoint: training goes on, the previous checkpoint stays, and the last one's failure
// names the path.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "support/read_file.h"
#include "support/scratch_dir.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::readFile;

fs::path scratch(const std::string& name) {
  return testing::scratchDir("gradsync-preemption", name);
}

// mlp on synthetic data, 2 worker processes, `steps` steps (400: 3 epochs and a part).
std::vector<std::string> trainArgs(const fs::path& dir, int steps = 400) {
  return {GRADSYNC_BIN,
          "train",
          "--model",
          "mlp",
          "--dataset",
          "synthetic",
          "--steps",
          std::to_string(steps),
          "--quiet",
          "--checkpoint-dir",
          (dir / "ckpt").string(),
          "--metrics",
          (dir / "metrics.json").string()};
}

pid_t start(std::vector<std::string> argv, const fs::path& dir, const std::string& tag) {
  SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.stdoutPath = (dir / (tag + ".out")).string();
  spawn.stderrPath = (dir / (tag + ".err")).string();
  return spawnProcess(spawn);
}

ExitStatus finish(pid_t pid, std::chrono::seconds timeout = 120s) {
  auto ended = waitAny({pid}, timeout);
  EXPECT_TRUE(ended.has_value()) << "gradsync hung";
  if (!ended) {
    ::kill(pid, SIGKILL);
    return {.code = -1};
  }
  return ended->second;
}

nlohmann::json metricsOf(const fs::path& dir) {
  return nlohmann::json::parse(readFile(dir / "metrics.json"));
}

nlohmann::json summaryOf(const fs::path& dir) {
  return metricsOf(dir)["summary"];
}

TEST(Preemption, SigtermCheckpointsAndTheResumedRunEndsAsAnUninterruptedOne) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const fs::path whole = scratch("whole");
  ASSERT_TRUE(finish(start(trainArgs(whole), whole, "run")).ok()) << readFile(whole / "run.err");

  const fs::path cut = scratch("cut");
  std::vector<std::string> args = trainArgs(cut);
  args.insert(args.end(), {"--checkpoint-every", "50"});
  const pid_t pid = start(args, cut, "run");
  // The first periodic checkpoint says training is under way; then the preemption.
  for (int i = 0; i < 600 && !fs::exists(cut / "ckpt" / "step-000000000050.gsckpt"); ++i) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_TRUE(fs::exists(cut / "ckpt" / "step-000000000050.gsckpt")) << readFile(cut / "run.err");
  ::kill(pid, SIGTERM);
  const ExitStatus stopped = finish(pid);
  EXPECT_EQ(stopped.code, 75) << stopped.describe() << "\n" << readFile(cut / "run.err");
  EXPECT_NE(readFile(cut / "run.out").find("stopped early by a signal"), std::string::npos);
  EXPECT_TRUE(summaryOf(cut)["stopped"].get<bool>());
  const int64_t at = summaryOf(cut)["steps"].get<int64_t>();
  EXPECT_GE(at, 50);
  EXPECT_LT(at, 400) << "the run was meant to be cut";
  char name[64];
  std::snprintf(name, sizeof name, "step-%012lld.gsckpt", static_cast<long long>(at));
  EXPECT_TRUE(fs::exists(cut / "ckpt" / name)) << "no checkpoint of the last step, " << name;

  std::vector<std::string> resume = trainArgs(cut);
  resume.push_back("--resume");
  const ExitStatus resumed = finish(start(resume, cut, "resume"));
  ASSERT_TRUE(resumed.ok()) << resumed.describe() << "\n" << readFile(cut / "resume.err");
  const nlohmann::json a = metricsOf(whole), b = metricsOf(cut);
  EXPECT_EQ(b["summary"]["steps"], 400);
  EXPECT_FALSE(b["summary"]["stopped"].get<bool>());
  EXPECT_EQ(b["summary"]["final_test_accuracy"], a["summary"]["final_test_accuracy"]);
  ASSERT_EQ(b["epochs"].size(), a["epochs"].size());
  EXPECT_EQ(b["epochs"].back()["train_loss"], a["epochs"].back()["train_loss"]);
}

TEST(Preemption, AFullDiskCostsOnlyThatCheckpoint) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const fs::path dir = scratch("full");
  std::vector<std::string> first = trainArgs(dir, 20);
  ASSERT_TRUE(finish(start(first, dir, "first")).ok()) << readFile(dir / "first.err");
  ASSERT_TRUE(fs::exists(dir / "ckpt" / "step-000000000020.gsckpt"));
  // A file-size limit of 256 KiB: every checkpoint of this mlp (about 1.8 MB) fails to write.
  std::string command = "ulimit -f 256 && exec";
  std::vector<std::string> rest = trainArgs(dir, 40);
  rest.insert(rest.end(), {"--resume", "--checkpoint-every", "10"});
  for (const std::string& arg : rest) command += " '" + arg + "'";
  const ExitStatus limited = finish(start({"bash", "-c", command}, dir, "limited"));
  const std::string err = readFile(dir / "limited.err");
  EXPECT_NE(limited.code, 0) << "the last checkpoint could not be written";
  EXPECT_NE(err.find("checkpoint of step 30 not written, training goes on"), std::string::npos)
      << err;
  // The last step's checkpoint fails too, naming its path: training went on to the end.
  EXPECT_NE(err.find("cannot write checkpoint '" + (dir / "ckpt").string() +
                     "/step-000000000040.gsckpt'"),
            std::string::npos)
      << err;
  // The checkpoint of step 20 is intact: a resume starts from it.
  std::vector<std::string> again = trainArgs(dir, 21);
  again.push_back("--resume");
  again.erase(std::find(again.begin(), again.end(), "--quiet"));
  ASSERT_TRUE(finish(start(again, dir, "again")).ok()) << readFile(dir / "again.err");
  EXPECT_NE(readFile(dir / "again.out").find("resuming from step 20"), std::string::npos)
      << readFile(dir / "again.out");
}

// An elastic job whose last checkpoint cannot be written ends with that failure, at once: the
// launcher does not restart rank 0 into a job that has finished (it once did, and the restarted
// worker waited --timeout for a round that never formed, again and again).
TEST(Preemption, AnElasticJobWhoseLastCheckpointFailsEndsWithoutRestarts) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const fs::path dir = scratch("elastic-full");
  std::string command =
      "ulimit -f 256 && exec " + std::string(GRADSYNC_BIN) + " launch -n 2 --max-restarts 5 --";
  std::vector<std::string> train = trainArgs(dir, 20);
  train.insert(train.end(), {"--elastic", "1:2", "--checkpoint-every", "10"});
  for (const std::string& arg : train) command += " '" + arg + "'";
  const auto begin = std::chrono::steady_clock::now();
  const ExitStatus status = finish(start({"bash", "-c", command}, dir, "launch"), 60s);
  const std::string err = readFile(dir / "launch.err");
  EXPECT_NE(status.code, 0) << "the last checkpoint could not be written";
  EXPECT_NE(err.find("checkpoint of step 10 not written, training goes on"), std::string::npos)
      << err;
  EXPECT_NE(err.find("step-000000000020.gsckpt"), std::string::npos) << err;
  EXPECT_NE(err.find("the job had finished: worker 0 not restarted"), std::string::npos) << err;
  EXPECT_EQ(err.find("restarting worker"), std::string::npos) << err;
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 30s) << err;
}

}  // namespace
}  // namespace gradsync
