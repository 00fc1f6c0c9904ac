// Elastic workers on real processes over real sockets (`gradsync launch --elastic` and
// `gradsync train --elastic`, docs/cluster.md "Elastic workers"): a worker SIGKILLed mid-epoch
// leaves the job to the other three, which finish it; a worker restarted by the launcher rejoins
// and the job ends with four; a worker sent SIGTERM leaves and the others go on; a hung one
// (SIGSTOP) is evicted and rejoins when woken; a compressed job trains through a kill; below the
// minimum the job fails naming the lost rank, and resumes from its checkpoint on fewer workers.
// Every run
// records the samples each rank trained on (--record-samples); with the rounds from --metrics
// the test checks that each step of the run was trained by every rank of its round, once, and
// that every sample of the epoch was used exactly once. The accuracy of each run is compared
// with that of an unfailed run of the same job.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "support/elastic_job.h"
#include "support/read_file.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::finish;
using testing::killAfter;
using testing::launch;
using testing::metricsOf;
using testing::readFile;
using testing::scratch;

constexpr size_t kTrainSamples = 60000;  // Fashion-MNIST's training set

// The local time of day in seconds, as gradsync's log lines print it.
double secondsOfDay(std::chrono::system_clock::time_point t) {
  const double since = std::chrono::duration<double>(t.time_since_epoch()).count();
  const auto whole = static_cast<std::time_t>(since);
  std::tm local{};
  localtime_r(&whole, &local);
  return local.tm_hour * 3600.0 + local.tm_min * 60.0 + local.tm_sec + (since - whole);
}

// (round, step) -> rank -> the samples that rank trained on, from the sample logs in `samples` of
// the steps in [from, to); sample i of epoch e is e * kTrainSamples + i.
using StepLines = std::map<std::pair<int64_t, int64_t>, std::map<int, std::vector<size_t>>>;

StepLines sampleLines(const fs::path& samples, int64_t from = 0,
                      int64_t to = std::numeric_limits<int64_t>::max()) {
  StepLines lines;
  for (const auto& file : fs::directory_iterator(samples)) {
    std::ifstream in(file.path());
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      int64_t round, step, epoch;
      int rank, size;
      fields >> round >> step >> epoch >> rank >> size;
      if (step < from || step >= to) continue;
      std::vector<size_t> indices;
      for (size_t index; fields >> index;) {
        EXPECT_LT(index, kTrainSamples);
        indices.push_back(static_cast<size_t>(epoch) * kTrainSamples + index);
      }
      lines[{round, step}][rank] = indices;  // a rank writes a step's line once
    }
  }
  return lines;
}

// Every step of the run, by the round that trained it (from the metrics' rounds), must have one
// line from each rank of that round; the steps of each epoch together must use every sample once.
void expectEverySampleOnce(const nlohmann::json& metrics, const StepLines& lines, int epochs = 1) {
  const nlohmann::json& rounds = metrics["elastic"]["rounds"];
  std::vector<int> uses(epochs * kTrainSamples, 0);
  const int64_t steps = metrics["summary"]["steps"];
  size_t r = 0;
  for (int64_t step = 0; step < steps; ++step) {
    while (r + 1 < rounds.size() && rounds[r + 1]["first_step"].get<int64_t>() <= step) ++r;
    const int64_t round = rounds[r]["round"];
    const int workers = rounds[r]["workers"];
    const auto found = lines.find({round, step});
    ASSERT_NE(found, lines.end()) << "round " << round << " step " << step;
    ASSERT_EQ(found->second.size(), static_cast<size_t>(workers))
        << "round " << round << " step " << step;
    for (const auto& [rank, indices] : found->second) {
      ASSERT_LT(rank, workers);
      for (size_t sample : indices) {
        ASSERT_LT(sample, uses.size());
        ++uses[sample];
      }
    }
  }
  for (size_t i = 0; i < uses.size(); ++i) {
    ASSERT_EQ(uses[i], 1) << "sample " << i << " was used " << uses[i] << " times";
  }
}

void expectEverySampleOnce(const fs::path& dir, int epochs = 1) {
  expectEverySampleOnce(metricsOf(dir), sampleLines(dir / "samples"), epochs);
}

// --trace under --elastic: the last round's members wrote one file, a process per worker slot
// (the restarted one's events from its rejoin), and each marks the first step of every round it
// trained in; no member of the last round is missing.
void expectTheRoundsTraced(const fs::path& path, const nlohmann::json& rounds) {
  const nlohmann::json trace = nlohmann::json::parse(readFile(path));
  EXPECT_EQ(trace["otherData"]["elastic"], "2:4");
  EXPECT_EQ(trace["otherData"]["rounds"], rounds.size());
  std::map<int, std::set<std::string>> marks;  // pid -> its round marks
  std::set<int> withSteps;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    const std::string name = event.value("name", "");
    if (event.value("cat", "") == "elastic") marks[event["pid"]].insert(name);
    if (name == "forward and backward") withSteps.insert(event["pid"].get<int>());
  }
  EXPECT_EQ(withSteps, (std::set<int>{0, 1, 2, 3}));
  for (const nlohmann::json& round : rounds) {
    const std::string mark = "round " + std::to_string(round["round"].get<int>()) + ": " +
                             std::to_string(round["workers"].get<int>()) + " workers from step " +
                             std::to_string(round["first_step"].get<int64_t>());
    EXPECT_TRUE(marks[0].count(mark)) << mark << " not marked by worker 0";
  }
  EXPECT_GE(marks[2].size(), 1u) << "the restarted worker marks the round it came in at";
}

class Elastic : public ::testing::Test {
 protected:
  // The unfailed run with `extra` flags, once for every test that compares with it.
  static double unfailedAccuracy(const std::vector<std::string>& extra = {}) {
    static std::map<std::vector<std::string>, double> accuracies;
    if (auto found = accuracies.find(extra); found != accuracies.end()) return found->second;
    const fs::path dir = scratch("unfailed" + std::to_string(accuracies.size()));
    const ExitStatus status = finish(launch(dir, "3:4", 0, extra));
    EXPECT_TRUE(status.ok()) << status.describe() << "\n" << readFile(dir / "err");
    const nlohmann::json metrics = metricsOf(dir);
    EXPECT_EQ(metrics["elastic"]["rounds"].size(), 1u);
    return accuracies[extra] = metrics["summary"]["final_test_accuracy"].get<double>();
  }
};

TEST_F(Elastic, AWorkerKilledMidEpochLeavesTheJobToTheOthers) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const double unfailed = unfailedAccuracy();
  const fs::path dir = scratch("killed");
  const pid_t job = launch(dir, "3:4", 0);
  const pid_t victim = killAfter(dir, 2, 100);
  const ExitStatus status = finish(job);
  const std::string err = readFile(dir / "err");
  ASSERT_TRUE(status.ok()) << status.describe() << "\n" << err;
  EXPECT_NE(err.find("worker 2 killed by signal 9"), std::string::npos) << err;
  EXPECT_NE(err.find("lost connection to rank 2"), std::string::npos) << err;
  const nlohmann::json metrics = metricsOf(dir);
  const nlohmann::json& rounds = metrics["elastic"]["rounds"];
  // Usually two rounds; a survivor that came to the second after it formed (descheduled for
  // longer than the settle time) makes a third with it, and that is fine too.
  ASSERT_GE(rounds.size(), 2u) << rounds.dump();
  EXPECT_EQ(rounds[0]["workers"], 4);
  EXPECT_LE(rounds[1]["workers"].get<int>(), 3) << rounds.dump();
  EXPECT_GE(rounds[1]["first_step"].get<int64_t>(), 99) << "mid-epoch, after the kill";
  EXPECT_EQ(metrics["elastic"]["final_workers"], 3);
  EXPECT_NE(readFile(dir / "out").find("3 workers"), std::string::npos);
  expectEverySampleOnce(dir);
  const double accuracy = metrics["summary"]["final_test_accuracy"];
  EXPECT_NEAR(accuracy, unfailed, 0.01) << "pid " << victim;
  EXPECT_GT(accuracy, 0.80);
}

// Compression under --elastic: every round's compressors start afresh (error feedback's residuals
// at zero, the dense warm-up counted in the job's steps), and the job trains through a kill as
// a dense one does, ending no more than a point below the unfailed compressed run; its
// evaluations (--eval-every) outlive the round they were made in.
TEST_F(Elastic, ACompressedJobTrainsThroughAKill) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  // PowerSGD: both kinds of compressor state, error feedback's residuals and the shared Q.
  const std::vector<std::string> powersgd = {"--compress", "powersgd:4"};
  const double unfailed = unfailedAccuracy(powersgd);
  const fs::path dir = scratch("compressed");
  std::vector<std::string> flags = powersgd;
  flags.insert(flags.end(), {"--eval-every", "50", "--eval-samples", "1000"});
  const pid_t job = launch(dir, "3:4", 0, flags);
  killAfter(dir, 1, 110);  // well after step 100's evaluation, which a kill inside would cut
  const ExitStatus status = finish(job);
  const std::string err = readFile(dir / "err");
  ASSERT_TRUE(status.ok()) << status.describe() << "\n" << err;
  const nlohmann::json metrics = metricsOf(dir);
  ASSERT_GE(metrics["elastic"]["rounds"].size(), 2u) << metrics["elastic"].dump();
  EXPECT_EQ(metrics["elastic"]["final_workers"], 3);
  EXPECT_EQ(metrics["summary"]["compress_warmup_steps"], 23) << "a tenth of the 234 steps";
  // The evaluations of every round, in the shared progress: those before the kill survive it.
  const nlohmann::json& evaluations = metrics["evaluations"];
  ASSERT_EQ(evaluations.size(), 4u) << evaluations.dump();
  for (size_t i = 0; i < evaluations.size(); ++i) {
    EXPECT_EQ(evaluations[i]["step"], 50 * static_cast<int64_t>(i + 1));
    EXPECT_GT(evaluations[i]["test_accuracy"].get<double>(), 0.5) << evaluations.dump();
  }
  const nlohmann::json& perStep = metrics["per_step"];
  EXPECT_LT(perStep["bytes_sent"].get<double>(), 0.2 * perStep["dense_bytes"].get<double>())
      << perStep.dump();
  expectEverySampleOnce(dir);
  // Measured here: unfailed 82.65%, with the kill 82.44% (dense: 83.87%); a point is the bound.
  EXPECT_GE(metrics["summary"]["final_test_accuracy"].get<double>(), unfailed - 0.01);
}

TEST_F(Elastic, ARestartedWorkerRejoinsWithTheCurrentState) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const double unfailed = unfailedAccuracy();
  const fs::path dir = scratch("rejoined");
  const fs::path trace = dir / "trace.json";
  const pid_t job = launch(dir, "2:4", 1, {"--trace", trace.string(), "--trace-steps", "0:"});
  killAfter(dir, 2, 40);  // early: the restart (about 1-2 s here) must come before the end
  const ExitStatus status = finish(job);
  const std::string err = readFile(dir / "err");
  ASSERT_TRUE(status.ok()) << status.describe() << "\n" << err;
  EXPECT_NE(err.find("restarting worker 2 (restart 1 of 1)"), std::string::npos) << err;
  const nlohmann::json metrics = metricsOf(dir);
  const nlohmann::json& rounds = metrics["elastic"]["rounds"];
  ASSERT_GE(rounds.size(), 2u) << rounds.dump();
  EXPECT_EQ(metrics["elastic"]["final_workers"], 4);
  // The restarted process trained, from a round after the first, with the state it was given.
  const std::string restarted = readFile(dir / "samples" / "worker-2-1.txt");
  std::istringstream first(restarted.substr(restarted.find('\n') + 1));
  int64_t round = -1, step = -1;
  first >> round >> step;
  EXPECT_GE(round, 1) << restarted.substr(0, 200);
  EXPECT_GE(step, 39);
  expectEverySampleOnce(dir);
  expectTheRoundsTraced(trace, rounds);
  EXPECT_NEAR(metrics["summary"]["final_test_accuracy"].get<double>(), unfailed, 0.01);
}

// diloco under --elastic (docs/cluster.md, "Elastic workers"): a commit is an outer step. A worker
// killed between two (at step 111 or so of diloco:20) takes the survivors back to the last one,
// step 100, and the next round trains the steps since again; restarted, it rejoins at an outer step
// with the committed outer state. Every sample of the epoch once over the committed steps.
TEST_F(Elastic, DilocoGoesBackToItsLastOuterStepWhenAWorkerIsKilledAndTakesItBackAtOne) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const std::vector<std::string> diloco = {"--sync", "diloco:20"};
  const double unfailed = unfailedAccuracy(diloco);
  const fs::path dir = scratch("diloco");
  const pid_t job = launch(dir, "3:4", 1, diloco);
  killAfter(dir, 2, 110);
  const ExitStatus status = finish(job);
  const std::string err = readFile(dir / "err");
  ASSERT_TRUE(status.ok()) << status.describe() << "\n" << err;
  const nlohmann::json metrics = metricsOf(dir);
  const nlohmann::json& rounds = metrics["elastic"]["rounds"];
  // Usually 4, 3 then 4 workers; a restart quick enough to make the second round has 2 of 4.
  ASSERT_GE(rounds.size(), 2u) << rounds.dump();
  const int64_t back = rounds[1]["first_step"];  // 100 unless the kill came late
  EXPECT_GE(back, 100) << rounds.dump();
  const std::string rollback = "the job re-forms from the last outer step, step " +
                               std::to_string(back) + ": steps " + std::to_string(back + 1) + "-";
  EXPECT_NE(err.find(rollback), std::string::npos) << err;
  for (const nlohmann::json& round : rounds) {
    EXPECT_EQ(round["first_step"].get<int64_t>() % 20, 0) << "at an outer step: " << rounds.dump();
  }
  EXPECT_EQ(metrics["elastic"]["final_workers"], 4);
  expectEverySampleOnce(dir);
  // Measured here: unfailed 84.80%, killed and rejoined 84.83% (killed, no restart: 85.03%).
  EXPECT_NEAR(metrics["summary"]["final_test_accuracy"].get<double>(), unfailed, 0.01);
}

// The language model under --elastic with DiLoCo (AdamW, its warm-up and cosine schedule,
// clipping, the outer Nesterov step): without a failure, bitwise the fixed run (at MAX workers the
// elastic batches are DistributedSampler's); through a kill, within the 1% of held-out loss that
// issue 40 asks for.
TEST_F(Elastic, ALanguageModelUnderDilocoIsTheFixedRunAndTrainsThroughAKill) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const std::vector<std::string> gpt = {"--model", "gpt",      "--dataset",    "text",
                                        "--steps", "60",       "--batch-size", "8",
                                        "--sync",  "diloco:10"};
  const fs::path fixedDir = scratch("gpt-fixed");
  SpawnOptions spawn;
  spawn.argv = {GRADSYNC_BIN,
                "train",
                "--workers",
                "4",
                "--quiet",
                "--metrics",
                (fixedDir / "metrics.json").string()};
  spawn.argv.insert(spawn.argv.end(), gpt.begin(), gpt.end());
  spawn.stdoutPath = (fixedDir / "out").string();
  spawn.stderrPath = (fixedDir / "err").string();
  ASSERT_TRUE(finish(spawnProcess(spawn)).ok()) << readFile(fixedDir / "err");
  const double fixed = metricsOf(fixedDir)["summary"]["final_held_out_loss"];

  const fs::path unfailedDir = scratch("gpt-unfailed");
  ASSERT_TRUE(finish(launch(unfailedDir, "3:4", 0, gpt)).ok()) << readFile(unfailedDir / "err");
  EXPECT_DOUBLE_EQ(metricsOf(unfailedDir)["summary"]["final_held_out_loss"].get<double>(), fixed);

  // The rollback must not depend on the log level (it once ran among a warning's arguments, which
  // are not evaluated when warnings are off): this run logs errors only.
  const fs::path dir = scratch("gpt-killed");
  ::setenv("GRADSYNC_LOG_LEVEL", "error", 1);
  const pid_t job = launch(dir, "3:4", 0, gpt);
  ::unsetenv("GRADSYNC_LOG_LEVEL");
  killAfter(dir, 2, 35);
  const ExitStatus status = finish(job);
  ASSERT_TRUE(status.ok()) << status.describe() << "\n" << readFile(dir / "err");
  const nlohmann::json metrics = metricsOf(dir);
  const nlohmann::json& rounds = metrics["elastic"]["rounds"];
  ASSERT_GE(rounds.size(), 2u) << rounds.dump();
  EXPECT_EQ(rounds[1]["first_step"].get<int64_t>() % 10, 0) << rounds.dump();
  EXPECT_EQ(metrics["summary"]["steps"], 60);
  // Measured here: 3.1096 nats/token fixed and unfailed, 3.1137 (+0.13%) killed at step 35.
  EXPECT_LT(metrics["summary"]["final_held_out_loss"].get<double>(), fixed * 1.01);
}

// SIGTERM to one worker (a preempted node): it leaves at the next check with exit 75 and is
// not restarted; the others go on without it, and the run is the unfailed one's.
TEST_F(Elastic, AWorkerAskedToStopLeavesAndTheOthersGoOn) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const double unfailed = unfailedAccuracy();
  const fs::path dir = scratch("left");
  const pid_t job = launch(dir, "3:4", 1);
  const pid_t victim = killAfter(dir, 1, 50, SIGTERM);
  const ExitStatus status = finish(job);
  const std::string err = readFile(dir / "err");
  ASSERT_TRUE(status.ok()) << status.describe() << "\n" << err;
  EXPECT_NE(err.find("worker 1 exited with code 75"), std::string::npos) << err;
  EXPECT_EQ(err.find("restarting"), std::string::npos) << "a worker asked to stop is not restarted";
  const std::string out = readFile(dir / "out");
  EXPECT_NE(out.find("worker 1 left the job after step"), std::string::npos) << out;
  const nlohmann::json metrics = metricsOf(dir);
  EXPECT_EQ(metrics["elastic"]["final_workers"], 3) << "pid " << victim;
  expectEverySampleOnce(dir);
  EXPECT_NEAR(metrics["summary"]["final_test_accuracy"].get<double>(), unfailed, 0.01);
}

// A hung worker (SIGSTOP: alive, connected, silent) is evicted as a lost one is, within
// --hang-timeout (1 s here) however long --timeout is (60 s here): the member before it in the
// ring sees its heartbeats stop (job/hang_watch.h), names it and aborts the round, and the others
// go on without it. Woken (SIGCONT), it finds its round gone and comes back as a new member at
// the next round, with the current state; every sample of the two epochs is used once.
TEST_F(Elastic, AHungWorkerIsEvictedWithinTheHangTimeoutAndRejoinsWhenItWakes) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const fs::path dir = scratch("stopped");
  const pid_t job =
      launch(dir, "3:4", 0, {"--timeout", "60s", "--hang-timeout", "1s", "--epochs", "2"});
  const pid_t victim = killAfter(dir, 2, 30, SIGSTOP);
  const auto stopped = std::chrono::system_clock::now();
  std::this_thread::sleep_for(6s);
  ::kill(victim, SIGCONT);
  const ExitStatus status = finish(job);
  const std::string err = readFile(dir / "err");
  ASSERT_TRUE(status.ok()) << status.describe() << "\n" << err;
  const nlohmann::json metrics = metricsOf(dir);
  const nlohmann::json& rounds = metrics["elastic"]["rounds"];
  ASSERT_GE(rounds.size(), 3u) << "4, then 3 without the hung one, then 4 again: " << rounds.dump();
  EXPECT_EQ(rounds[1]["workers"], 3) << rounds.dump();
  EXPECT_EQ(metrics["elastic"]["final_workers"], 4) << rounds.dump();
  // The survivors' first report of the eviction, against the stop: the timeout and a margin.
  std::smatch at;
  ASSERT_TRUE(std::regex_search(
      err, at,
      std::regex(R"(([0-9]{2}):([0-9]{2}):([0-9.]+) \S+ pid [0-9]+: worker [0-9]: )"
                 R"(elastic round 0 (timed out|lost a worker))")))
      << err;
  double late = std::stoi(at[1]) * 3600.0 + std::stoi(at[2]) * 60.0 + std::stod(at[3]) -
                secondsOfDay(stopped);
  if (late < -43200) late += 86400;  // across midnight
  std::printf("the survivors reported the eviction %.2f s after the stop\n", late);
  EXPECT_LT(late, 1.0 + 1.5) << "evicted later than --hang-timeout allows";
  EXPECT_TRUE(
      std::regex_search(err, std::regex("rank [0-9] \\(worker 2, pid " + std::to_string(victim) +
                                        " on [^)]*\\) gave no sign of life for")))
      << err;
  // The woken worker trained again, in a round after the eviction.
  const std::string woken = readFile(dir / "samples" / "worker-2-0.txt");
  std::istringstream last(woken.substr(woken.rfind('\n', woken.size() - 2) + 1));
  int64_t round = -1;
  last >> round;
  EXPECT_GE(round, 2) << woken.substr(0, 200);
  expectEverySampleOnce(dir, 2);
}

// --elastic 4:4 cannot lose anyone: the survivors wait --timeout for a replacement, then fail,
// naming the lost rank and its process. (8 s: also the first round's wait for the 4 processes
// to start, which takes a few seconds on a loaded machine.) The job is not lost with it: its
// checkpoints go on with --resume on 3 workers (--elastic 3:4, the same MAX: the same global
// batch), from the last one before the kill, and the run ends as the unfailed one does.
TEST_F(Elastic, BelowTheMinimumTheJobFailsNamingTheLostRankAndResumesOnFewerWorkers) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const double unfailed = unfailedAccuracy();
  const fs::path dir = scratch("below");
  const std::string checkpoints = (dir / "checkpoints").string();
  const pid_t job =
      launch(dir, "4:4", 0,
             {"--timeout", "8s", "--checkpoint-dir", checkpoints, "--checkpoint-every", "10"});
  const pid_t victim = killAfter(dir, 1, 30);
  const auto killed = std::chrono::steady_clock::now();
  const ExitStatus status = finish(job, 60s);
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 40s) << "the survivors took too long";
  EXPECT_FALSE(status.ok());
  const std::string err = readFile(dir / "err");
  EXPECT_NE(err.find("fewer than the minimum of --elastic 4:4: lost rank 1 (worker 1, pid " +
                     std::to_string(victim)),
            std::string::npos)
      << err;
  for (int slot : {0, 2, 3}) {
    EXPECT_NE(err.find("worker " + std::to_string(slot) + " exited with code 1"), std::string::npos)
        << err;
  }

  const fs::path resumed = scratch("below-resumed");
  const ExitStatus again =
      finish(launch(resumed, "3:4", 0, {"--checkpoint-dir", checkpoints, "--resume"}, 3));
  ASSERT_TRUE(again.ok()) << again.describe() << "\n" << readFile(resumed / "err");
  const nlohmann::json metrics = metricsOf(resumed);
  const nlohmann::json& rounds = metrics["elastic"]["rounds"];
  ASSERT_EQ(rounds.size(), 2u) << "the checkpoint's round and the resumed one: " << rounds.dump();
  EXPECT_EQ(rounds[0]["workers"], 4);
  EXPECT_EQ(rounds[1]["workers"], 3);
  const int64_t from = rounds[1]["first_step"];
  EXPECT_EQ(from % 10, 0) << from;
  EXPECT_GE(from, 20);
  EXPECT_LE(from, 40);
  StepLines lines = sampleLines(dir / "samples", 0, from);
  lines.merge(sampleLines(resumed / "samples", from));
  expectEverySampleOnce(metrics, lines);
  EXPECT_NEAR(metrics["summary"]["final_test_accuracy"].get<double>(), unfailed, 0.01);
}

// Every worker holding the state lost at once (docs/cluster.md, "Membership"): the restarted
// workers wait --timeout for a member of the last round, then exit 76 (StateLostError), and the
// launcher restarts them no more, whatever --max-restarts allows: the job fails after one
// timeout, not ten, saying to resume from a checkpoint.
TEST_F(Elastic, WhenEveryStateHolderIsLostTheJobFailsOnceAndSaysSo) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const fs::path dir = scratch("state-lost");
  const pid_t job = launch(dir, "1:2", 10, {"--timeout", "4s"}, 2);
  killAfter(dir, 0, 30);
  killAfter(dir, 1, 30);
  const auto killed = std::chrono::steady_clock::now();
  const ExitStatus status = finish(job, 120s);
  // One restart each (a second or two) and one --timeout: far from ten restarts' 40 s and more.
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 25s);
  EXPECT_EQ(status.code, 76) << status.describe();
  const std::string err = readFile(dir / "err");
  EXPECT_NE(err.find("holds the job's state; a worker without it never starts the job over), "
                     "and none is left"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("resume the job from its checkpoint"), std::string::npos) << err;
  for (int slot : {0, 1}) {
    EXPECT_NE(err.find("worker " + std::to_string(slot) + " cannot rejoin"), std::string::npos)
        << err;
  }
  EXPECT_EQ(err.find("restart 3 of 10"), std::string::npos) << err;  // one each, 2 in all
}

}  // namespace
}  // namespace gradsync
