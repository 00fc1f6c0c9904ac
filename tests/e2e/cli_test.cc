// The gradsync command line as users run it: real processes, real output.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/socket.h"
#include "common/subprocess.h"
#include "sim/model_profile.h"
#include "support/read_file.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::readFile;

struct Result {
  ExitStatus status;
  std::string out;
  std::string err;
};

fs::path scratch() {
  fs::path dir = fs::temp_directory_path() / ("gradsync-cli-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

// Runs `gradsync ARGS...` for every element of `runs`, up to `atOnce` processes at a time (each
// costs about 0.5 s of LibTorch start-up alone), and returns their results in order.
std::vector<Result> gradsyncEach(const std::vector<std::vector<std::string>>& runs, size_t atOnce) {
  const fs::path dir = scratch();
  auto output = [&](size_t run, const char* stream) {
    return dir / (std::to_string(run) + "." + stream);
  };
  std::vector<Result> results(runs.size(), Result{ExitStatus{.code = -1}, "", ""});
  std::vector<std::pair<pid_t, size_t>> running;  // pid, run
  size_t next = 0;
  while (next < runs.size() || !running.empty()) {
    for (; next < runs.size() && running.size() < atOnce; ++next) {
      SpawnOptions spawn;
      spawn.argv = {GRADSYNC_BIN};
      spawn.argv.insert(spawn.argv.end(), runs[next].begin(), runs[next].end());
      spawn.stdoutPath = output(next, "out").string();
      spawn.stderrPath = output(next, "err").string();
      running.emplace_back(spawnProcess(spawn), next);
    }
    std::vector<pid_t> pids;
    for (const auto& [pid, run] : running) pids.push_back(pid);
    auto ended = waitAny(pids, 240s);
    if (!ended) {
      ADD_FAILURE() << "gradsync hung";
      for (pid_t pid : pids) ::kill(pid, SIGKILL);
      return results;
    }
    auto done = std::find_if(running.begin(), running.end(),
                             [&](const auto& entry) { return entry.first == ended->first; });
    const size_t run = done->second;
    results[run] = {ended->second, readFile(output(run, "out")), readFile(output(run, "err"))};
    running.erase(done);
  }
  return results;
}

Result gradsync(std::vector<std::string> args) {
  return gradsyncEach({std::move(args)}, 1)[0];
}

TEST(Cli, BadFlagsGiveAOneLineErrorAndExitCode2) {
  Result r = gradsync({"bench", "allreduce", "--bandwidth", "fast"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("1gbit"), std::string::npos) << r.err;  // shows the valid forms

  r = gradsync({"bench", "allscatter"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("allreduce"), std::string::npos) << r.err;  // lists the valid choices

  r = gradsync({"bench", "allreduce", "--min-bytes", "8M", "--max-bytes", "1M"});
  EXPECT_EQ(r.status.code, 2);
}

TEST(Cli, BenchOverTcpProcessesWritesVerifiedJson) {
  fs::path json = scratch() / "bench.json";
  Result r = gradsync({"bench", "allreduce", "--workers", "3", "--min-bytes", "4K", "--max-bytes",
                       "64K", "--factor", "4", "--iters", "2", "--json", json.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("busbw"), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(json));
  EXPECT_EQ(doc["system"], "gradsync");
  EXPECT_EQ(doc["workers"], 3);
  ASSERT_EQ(doc["results"].size(), 3u);  // 4K, 16K, 64K
  for (const auto& row : doc["results"]) {
    EXPECT_EQ(row["wrong"], 0);
    EXPECT_GT(row["busbw_gbps"].get<double>(), 0.0);
  }
}

TEST(Cli, BenchEveryCollectiveOverLoopbackThreads) {
  for (std::string collective : {"allreduce", "allgather", "broadcast"}) {
    Result r =
        gradsync({"bench", collective, "--transport", "loopback", "--workers", "5", "--min-bytes",
                  "1K", "--max-bytes", "1M", "--factor", "32", "--iters", "2"});
    EXPECT_TRUE(r.status.ok()) << collective << ": " << r.err;
  }
}

TEST(Cli, LaunchSetsTheRendezvousEnvironment) {
  Result r = gradsync({"launch", "-n", "3", "--", "sh", "-c",
                       "test \"$WORLD_SIZE\" = 3 && test -n \"$GRADSYNC_JOB_TOKEN\" && "
                       "test -n \"$MASTER_PORT\" && echo rank=$RANK"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(r.out.find("rank=" + std::to_string(rank)), std::string::npos) << r.out;
  }
}

TEST(Cli, LaunchReportsTheFailedRankAndItsCode) {
  Result r = gradsync({"launch", "-n", "3", "--", "sh", "-c", "test \"$RANK\" != 1 || exit 7"});
  EXPECT_EQ(r.status.code, 7);
  EXPECT_NE(r.err.find("rank 1 exited with code 7"), std::string::npos) << r.err;
}

// --respawn and --max-restarts start a process again by one path: same slot, same command,
// GRADSYNC_RESTART_COUNT set. A fixed job's listed rank comes back after a SIGKILL (rank 0 waits,
// bounded, for the replacement's mark); an elastic job's worker after an error exit.
TEST(Cli, LaunchStartsAFailedProcessAgainInItsSlot) {
  const fs::path mark = scratch() / "respawned";
  fs::remove(mark);
  const std::string script =
      "if [ \"$RANK\" = 1 ]; then [ \"${GRADSYNC_RESTART_COUNT:-0}\" = 1 ] || kill -9 $$; "
      "touch " +
      mark.string() +
      "; exit 0; fi; "
      "for i in $(seq 600); do [ -e " +
      mark.string() + " ] && exit 0; sleep 0.1; done; exit 9";
  Result fixed = gradsync({"launch", "-n", "2", "--respawn", "1", "--", "sh", "-c", script});
  EXPECT_TRUE(fixed.status.ok()) << fixed.err;
  EXPECT_NE(fixed.err.find("rank 1 killed by signal 9 (Killed); respawning it (1 of at most 10)"),
            std::string::npos)
      << fixed.err;

  Result elastic =
      gradsync({"launch", "-n", "2", "--max-restarts", "1", "--", "sh", "-c",
                "[ \"$RANK\" != 1 ] || [ \"$GRADSYNC_RESTART_COUNT\" = 1 ] || exit 3"});
  EXPECT_TRUE(elastic.status.ok()) << elastic.err;
  EXPECT_NE(elastic.err.find("worker 1 exited with code 3"), std::string::npos) << elastic.err;
  EXPECT_NE(elastic.err.find("restarting worker 1 (restart 1 of 1)"), std::string::npos)
      << elastic.err;

  Result both = gradsync({"launch", "-n", "2", "--respawn", "1", "--elastic", "--", "true"});
  EXPECT_EQ(both.status.code, 2);
  EXPECT_NE(both.err.find("--respawn restarts the ranks it names"), std::string::npos) << both.err;
}

TEST(Cli, SimulateSweepsWritesJsonAndAPlot) {
  fs::path json = scratch() / "sim.json";
  fs::path svg = scratch() / "sim.svg";
  Result r = gradsync({"simulate", "--model-profile", "resnet50", "--gpus-per-host", "8",
                       "--bandwidth", "25gbit", "--latency", "5us", "--schedule", "p3", "--sweep",
                       "workers=8,64,4096", "--json", json.string(), "--plot", svg.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("resnet50 on 4096 workers (512 hosts x 8)"), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(json));
  ASSERT_EQ(doc["results"].size(), 3u);
  for (const auto& row : doc["results"]) {
    EXPECT_GT(row["step_ms"].get<double>(), row["compute_ms"].get<double>() * 0.99);
    EXPECT_GT(row["scaling_efficiency"].get<double>(), 0);
    EXPECT_LT(row["simulation_s"].get<double>(), 10);  // the issue's bound, with room
  }
  EXPECT_NE(readFile(svg).find("</svg>"), std::string::npos);
}

TEST(Cli, SimulateRefusesBadInputNamingIt) {
  Result r = gradsync({"simulate", "--model-profile", "alexnet"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("resnet50, vgg19, transformer"), std::string::npos) << r.err;
  r = gradsync({"simulate", "--model-profile", "vgg19", "--sync", "sharded", "--schedule", "p3"});
  EXPECT_EQ(r.status.code, 2) << r.err;
  r = gradsync({"simulate", "--model-profile", "vgg19", "--sweep", "depth=3"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("workers=N"), std::string::npos) << r.err;
}

// Wavelet in the simulator: the data-parallel memory comparison and the model-parallel waves,
// each one table and its JSON.
TEST(Cli, SimulateWavesPrintsATableAndWritesJson) {
  fs::path json = scratch() / "waves.json";
  fs::path svg = scratch() / "waves.svg";
  Result r = gradsync({"simulate", "--model-profile", "resnet50", "--waves", "2", "--device-memory",
                       "16GiB", "--saturation-batch", "64", "--json", json.string(), "--plot",
                       svg.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("2 tick-tock waves of 32 against one wave of 64"), std::string::npos)
      << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(json));
  EXPECT_LT(doc["waves"]["peak_bytes"].get<double>(), doc["one_wave"]["peak_bytes"].get<double>());
  EXPECT_GT(doc["capacity"]["waves"]["batch_per_wave"].get<int64_t>(), 0);
  EXPECT_FALSE(doc["waves_timeline"].empty());
  EXPECT_NE(readFile(svg).find("2 tick-tock waves of 32"), std::string::npos);

  r = gradsync({"simulate", "--model-profile", "vgg19", "--pipeline", "4", "--waves", "4", "--hop",
                "100us", "--json", json.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("rotated placement, 4 waves"), std::string::npos) << r.out;
  doc = nlohmann::json::parse(readFile(json));
  EXPECT_GT(doc["rotated"]["speed_up"].get<double>(), 3);
  EXPECT_DOUBLE_EQ(doc["naive"]["speed_up"].get<double>(), 1);
}

TEST(Cli, SimulateRefusesWavesThatMakeNoSense) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--waves", "0"}, "--waves must be at least 1"},
      {{"--waves", "-2"}, "--waves must be at least 1"},
      {{"--waves", "1"}, "one wave is nothing to compare"},
      {{"--waves", "2", "--sweep", "workers=2,4"}, "--sweep is not used with --waves"},
      {{"--waves", "2", "--schedule", "p3"}, "--schedule is not used with --waves"},
      {{"--waves", "2", "--hop", "5us"}, "--hop is the pipeline's"},
      {{"--waves", "2", "--wave-offset", "2"}, "--wave-offset must be within [0, 1]"},
      {{"--waves", "2", "--batch", "-1"}, "--batch must be at least 1"},
      {{"--pipeline", "4", "--waves", "2", "--wave-offset", "0.5"},
       "--wave-offset is the data-parallel waves'"},
      {{"--device-memory", "16GiB"}, "--device-memory needs --waves K"},
      {{"--pipeline", "2", "--waves", "3"}, "at most one wave per device"},
      {{"--pipeline", "4", "--waves", "4", "--pipeline-mode", "pb"},
       "--pipeline-mode is not used with --pipeline --waves"},
      {{"--pipeline", "4", "--waves", "2", "--device-memory", "1G"},
       "--device-memory is the data-parallel waves'"}};
  std::vector<std::vector<std::string>> runs;
  for (const auto& [flags, message] : cases) {
    runs.push_back({"simulate", "--model-profile", "resnet50"});
    runs.back().insert(runs.back().end(), flags.begin(), flags.end());
  }
  const std::vector<Result> results = gradsyncEach(runs, 4);
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(results[i].status.code, 2) << cases[i].second;
    EXPECT_NE(results[i].err.find(cases[i].second), std::string::npos) << results[i].err;
  }
}

// A small model profile (3 layers, 2.1 M parameters, 6 ms of compute): tune searches it in a
// second and `train --compute emulate:` runs it in a few.
fs::path smallProfile() {
  fs::path path = scratch() / "small-profile.json";
  nlohmann::json layers = nlohmann::json::array();
  for (auto [name, elements] : {std::pair{"conv1", 100000}, {"conv2", 400000}, {"fc", 1600000}})
    layers.push_back(
        {{"name", name},
         {"forward_s", 0.001},
         {"backward_s", 0.001},
         {"tensors", {{{"name", std::string(name) + ".weight"}, {"dims", {elements}}}}}});
  nlohmann::json doc = {{"name", "small"}, {"device", "test"}, {"source", "cli_test"},
                        {"batch_size", 8}, {"update_s", 0.0},  {"layers", layers}};
  std::ofstream(path) << doc.dump(1);
  return path;
}

TEST(Cli, TuneRanksCandidatesRecommendsFlagsAndWritesJsonAndAPlot) {
  fs::path json = scratch() / "tune.json";
  fs::path svg = scratch() / "tune.svg";
  Result r = gradsync({"tune", "--model-profile", smallProfile().string(), "--workers", "4",
                       "--bandwidth", "1gbit", "--servers", "2", "--top", "5", "--json",
                       json.string(), "--plot", svg.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("recommended: gradsync train --workers 4 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("onebit"), std::string::npos) << "excluded methods are shown: " << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(json));
  ASSERT_FALSE(doc["ranked"].empty());
  ASSERT_FALSE(doc["rejected"].empty());
  double last = 0;
  for (const auto& c : doc["ranked"]) {
    const double tta = c["time_to_accuracy_vs_best"].get<double>();
    EXPECT_GE(tta, last);
    last = tta;
    EXPECT_NEAR(
        tta * doc["ranked"][0]["step_ms"].get<double>() * doc["ranked"][0]["factor"].get<double>(),
        c["step_ms"].get<double>() * c["factor"].get<double>(), 1e-6);
    for (const auto& j : doc["rejected"])
      EXPECT_FALSE(c["schedule"] == j["schedule"] && c["compress"] == j["compress"] &&
                   c["sync"] == j["sync"]);
  }
  EXPECT_EQ(doc["recommended"]["factor_status"], "measured");
  EXPECT_NE(readFile(svg).find("</svg>"), std::string::npos);
}

TEST(Cli, TuneRefusesBadInputNamingTheFlag) {
  for (auto [flag, value] : {std::pair{"--top", "0"},
                             {"--bandwidth", "fast"},
                             {"--servers", "-1"},
                             {"--model-profile", "alexnet"}}) {
    std::vector<std::string> args{"tune", flag, value};
    if (std::string(flag) != "--model-profile")
      args.insert(args.end(), {"--model-profile", "resnet50"});
    Result r = gradsync(args);
    EXPECT_EQ(r.status.code, 2) << flag;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(std::string(flag) == "--model-profile" ? "alexnet" : flag),
              std::string::npos)
        << r.err;
  }
}

// `gradsync train` exists only in builds with LibTorch (not in the sanitizer builds).
class CliTrain : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef GRADSYNC_HAVE_TORCH
    GTEST_SKIP() << "built without LibTorch (GRADSYNC_WITH_TORCH=OFF): no gradsync train";
#endif
  }
};

// A separate parameter-server process killed mid-training: both workers fail promptly (not at
// their 30 s timeout) with an error naming the server, never hang.
TEST_F(CliTrain, KilledServerIsNamedByTheWorkers) {
  fs::path dir = scratch() / "killed-server";
  fs::create_directories(dir);
  Fd probe = listenTcp("127.0.0.1", 0);
  std::string port = std::to_string(boundPort(probe.get()));
  probe.reset();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 3; ++rank) {  // workers 0 and 1, server rank 2
    SpawnOptions spawn;
    spawn.argv = {GRADSYNC_BIN, "train",     "--model", "mlp",       "--dataset",
                  "synthetic",  "--steps",   "100000",  "--servers", "1",
                  "--quiet",    "--timeout", "30s"};
    spawn.env = {{"RANK", std::to_string(rank)},
                 {"WORLD_SIZE", "3"},
                 {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", port},
                 {"GRADSYNC_JOB_TOKEN", "cli"}};
    spawn.stderrPath = (dir / ("rank" + std::to_string(rank) + ".err")).string();
    pids.push_back(spawnProcess(spawn));
  }
  std::this_thread::sleep_for(5s);  // startup, then training
  ASSERT_FALSE(waitAny(pids, 0ms).has_value()) << readFile(dir / "rank0.err");
  ::kill(pids[2], SIGKILL);
  auto killed = std::chrono::steady_clock::now();
  for (int rank : {0, 1}) {
    auto ended = waitAny({pids[rank]}, 60s);
    ASSERT_TRUE(ended.has_value()) << "worker " << rank << " hung";
    EXPECT_EQ(ended->second.code, 1) << ended->second.describe();
    std::string err = readFile(dir / ("rank" + std::to_string(rank) + ".err"));
    EXPECT_NE(err.find("parameter server 0 (rank 2)"), std::string::npos) << err;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 10s) << "workers took too long to notice";
  waitAny({pids[2]}, 5s);
}

TEST_F(CliTrain, ShortRealRunOnFashionMnistLearnsAndWritesMetrics) {
  fs::path metrics = scratch() / "train.json";
  Result r = gradsync({"train", "--steps", "150", "--quiet", "--metrics", metrics.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("gradsync train: cnn on fashion-mnist, 2 workers"), std::string::npos)
      << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
  EXPECT_EQ(doc["config"]["workers"], 2);
  EXPECT_EQ(doc["summary"]["steps"], 150);
  // 150 steps of 128 images (a third of an epoch) already classify most of the test set.
  EXPECT_GT(doc["summary"]["final_test_accuracy"].get<double>(), 0.75);
  EXPECT_GT(doc["per_step"]["bytes_sent"].get<double>(), 6e6);  // the cnn's 6.65 MB of gradients
  for (const char* key : {"compute_ms", "comm_ms", "exposed_comm_ms", "step_ms"}) {
    EXPECT_GT(doc["per_step"][key].get<double>(), 0.0) << key;
  }
}

// --model gpt alone picks its data and optimizer (--dataset text, AdamW with a warm-up and a
// cosine); a corpus that is not there is named, and the run fails without hanging.
TEST_F(CliTrain, LanguageModelTrainsOnTextAndNamesAMissingCorpus) {
  const fs::path corpus = scratch() / "corpus.txt";
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  std::ofstream(corpus) << text;
  const fs::path metrics = scratch() / "gpt.json";
  Result r = gradsync({"train", "--model", "gpt:layers=1,width=32,heads=2,context=16", "--dataset",
                       "text:" + corpus.string(), "--steps", "150", "--batch-size", "8",
                       "--warmup-steps", "10", "--quiet", "--metrics", metrics.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("nats/token"), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
  EXPECT_EQ(doc["config"]["optimizer"], "adamw");
  EXPECT_EQ(doc["config"]["lr_schedule"], "cosine");
  // A sentence repeated, learnt within 150 steps (0.44 nats/token here, 1 s): far below what
  // its letter frequencies give (3.05) and uniform bytes' ln 256 = 5.55.
  EXPECT_LT(doc["summary"]["final_held_out_loss"].get<double>(), 1.0);
  EXPECT_GT(doc["summary"]["tokens_per_s"].get<double>(), 0);

  const std::string missing = (scratch() / "no-such-corpus.txt").string();
  r = gradsync(
      {"train", "--model", "gpt", "--dataset", "text:" + missing, "--steps", "5", "--quiet"});
  EXPECT_FALSE(r.status.ok());
  EXPECT_NE(r.err.find(missing + " does not exist"), std::string::npos) << r.err;
}

// --bandwidth makes every rank an emulated host of its own: worker processes on this one host
// talk over the shaped TCP links, not through shared memory, which would bypass the limit.
TEST_F(CliTrain, BandwidthShapesWorkersOnOneHost) {
  fs::path metrics = scratch() / "shaped.json";
  Result r = gradsync({"train", "--model", "mlp", "--dataset", "synthetic", "--bandwidth", "50mbit",
                       "--steps", "3", "--quiet", "--metrics", metrics.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
  const double bytes = doc["per_step"]["bytes_sent"].get<double>();
  ASSERT_GT(bytes, 1e6);  // mlp's gradients: 2.7 MB per rank per step
  // A step cannot be shorter than its bytes at 50 Mbit/s (the limiter lets a first burst of a
  // few milliseconds through unshaped).
  EXPECT_GT(doc["per_step"]["step_ms"].get<double>(), 0.9 * bytes * 8 / 50e6 * 1e3);
}

// ssp:1 with one worker slowed (100 ms more compute per step than mlp's few, even on a loaded
// host): the servers measure each push's staleness and the run reports every rank's. The fast
// workers wait for the slow one at the bound, so between its pull of a unit and its next push of
// it each of them pushes that unit exactly once: its staleness is W - 1 = 2, the others' less.
// (Not asgd: there the fast workers end their 30 steps long before it, and its later pushes
// would be fresh.)
TEST_F(CliTrain, SspReportsStalenessPerRank) {
  fs::path metrics = scratch() / "ssp.json";
  Result r = gradsync({"train", "--model", "mlp", "--dataset", "synthetic", "--workers", "3",
                       "--sync", "ssp:1", "--compensate", "sc", "--steps", "30",
                       "--inject-slow-rank", "2:100", "--quiet", "--metrics", metrics.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("; staleness per rank (mean/max): "), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
  ASSERT_EQ(doc["staleness"].size(), 3u) << doc.dump();
  const nlohmann::json& slow = doc["staleness"][2];
  const uint64_t pushes = slow["pushes"].get<uint64_t>();
  EXPECT_EQ(pushes % 30, 0u);  // every step pushes every unit once, and each is answered
  EXPECT_GE(slow["mean"].get<double>(), 1.8) << doc["staleness"].dump();
  for (int rank = 0; rank < 3; ++rank) {
    const nlohmann::json& s = doc["staleness"][rank];
    EXPECT_EQ(s["rank"], rank);
    EXPECT_EQ(s["pushes"].get<uint64_t>(), pushes);
    EXPECT_GE(s["max"].get<double>(), s["mean"].get<double>());
    if (rank < 2) {
      EXPECT_LT(s["mean"].get<double>(), slow["mean"].get<double>()) << rank;
    }
  }
}

TEST_F(CliTrain, CompressedRunReportsItsBytesAndEvaluations) {
  fs::path metrics = scratch() / "compressed.json";
  Result r = gradsync({"train", "--model", "mlp", "--dataset", "synthetic", "--steps", "6",
                       "--eval-every", "3", "--compress", "topk:0.01", "--compress-warmup", "1",
                       "--quiet", "--metrics", metrics.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("topk:0.01 after 1 dense steps: "), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
  EXPECT_EQ(doc["config"]["compress"], "topk:0.01");
  EXPECT_EQ(doc["config"]["compress_warmup"], 1);
  // 5 of 6 steps send 1% of the large tensors (as pairs, all-gathered): far less than dense.
  EXPECT_GT(doc["per_step"]["compression_ratio"].get<double>(), 3.0);
  EXPECT_GT(doc["per_step"]["encode_ms"].get<double>(), 0.0);
  ASSERT_EQ(doc["evaluations"].size(), 2u);  // after step 3, and at the end (step 6)
  EXPECT_EQ(doc["evaluations"][0]["step"], 3);
  EXPECT_EQ(doc["evaluations"][1]["step"], 6);
}

// --compress-warmup defaults to auto: a tenth of the first epoch dense (468 steps of 2 x 64
// Fashion-MNIST images: 47), none without compression.
TEST_F(CliTrain, CompressionWarmsUpDenseForATenthOfTheFirstEpochByDefault) {
  std::string ran;  // summary.compress of the last run
  int runs = 0;
  auto warmup = [&](const std::string& compress) {
    fs::path metrics = scratch() / ("warmup-" + std::to_string(runs++) + ".json");
    Result r = gradsync({"train", "--model", "mlp", "--steps", "2", "--compress", compress,
                         "--quiet", "--metrics", metrics.string()});
    EXPECT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
    nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
    EXPECT_EQ(doc["config"]["compress_warmup"], "auto");
    // Both steps dense: nothing saved.
    if (compress != "none") {
      EXPECT_NEAR(doc["per_step"]["compression_ratio"].get<double>(), 1, 1e-9);
    }
    ran = doc["summary"]["compress"];
    return doc["summary"]["compress_warmup_steps"].get<int64_t>();
  };
  EXPECT_EQ(warmup("topk:0.01"), 47);
  EXPECT_EQ(ran, "topk:0.01");
  EXPECT_EQ(warmup("none"), 0);
  // dgc also ramps its sparsity over half the first epoch (468 steps), unless it names a ramp.
  EXPECT_EQ(warmup("dgc:0.01"), 47);
  EXPECT_EQ(ran, "dgc:0.01,warmup=234");
  EXPECT_EQ(warmup("dgc:0.01,warmup=8"), 47);
  EXPECT_EQ(ran, "dgc:0.01,warmup=8");
  Result bad = gradsync({"train", "--compress-warmup", "-1"});
  EXPECT_EQ(bad.status.code, 2);
  EXPECT_NE(bad.err.find("--compress-warmup takes auto or a number of steps >= 0, not '-1'"),
            std::string::npos)
      << bad.err;
  // --compress-warmup-codec int8: the same dense steps, the weights through the int8 ring.
  fs::path metrics = scratch() / "warmup-int8.json";
  Result int8 =
      gradsync({"train", "--model", "mlp", "--steps", "2", "--compress", "topk:0.01",
                "--compress-warmup-codec", "int8", "--quiet", "--metrics", metrics.string()});
  ASSERT_TRUE(int8.status.ok()) << int8.status.describe() << "\n" << int8.err;
  nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
  EXPECT_EQ(doc["config"]["compress_warmup_codec"], "int8");
  EXPECT_GT(doc["per_step"]["compression_ratio"].get<double>(), 2.5);
  Result badCodec = gradsync({"train", "--compress-warmup-codec", "topk:0.1"});
  EXPECT_EQ(badCodec.status.code, 2);
  EXPECT_NE(badCodec.err.find("--compress-warmup-codec"), std::string::npos) << badCodec.err;
}

// Emulated accelerator compute over real processes and TCP: the profile's batch and shapes, its
// compute time, real traffic, no evaluation.
TEST_F(CliTrain, EmulatedComputeRunsTheProfileOverProcesses) {
  fs::path metrics = scratch() / "emulated.json";
  Result r =
      gradsync({"train", "--compute", "emulate:resnet50", "--compute-scale", "0.2", "--steps", "4",
                "--schedule", "p3", "--quiet", "--metrics", metrics.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("gradsync train: emulated resnet50 (compute x 0.2), 2 workers"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("accuracy"), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(metrics));
  EXPECT_EQ(doc["config"]["compute"], "emulate:resnet50");
  EXPECT_EQ(doc["config"]["batch_size"], 32);  // the profile's
  // ResNet-50's 25.6 M parameters, p3 slices: a ring allreduce sends about 102 MB per rank.
  EXPECT_GT(doc["per_step"]["bytes_sent"].get<double>(), 100e6);
  // The device ran forward + backward of the V100 profile times 0.2 each step (p3 updates in the
  // engine, not on the device); the host's view of it is never shorter.
  const double deviceMs =
      0.2 * 1e3 *
      (builtinProfile("resnet50").forwardSeconds() + builtinProfile("resnet50").backwardSeconds());
  EXPECT_NEAR(doc["per_step"]["device_ms"].get<double>(), deviceMs, 1e-6);
  EXPECT_GE(doc["per_step"]["compute_ms"].get<double>(), deviceMs - 0.1);
}

// tune's recommendation, as printed, is a command line train accepts and runs: --verify runs
// it (and the top candidate) in `gradsync train` with emulated compute and reads its metrics.
TEST_F(CliTrain, TuneVerifyRunsTheRecommendedFlagsInTrain) {
  fs::path json = scratch() / "tune-verify.json";
  Result r =
      gradsync({"tune", "--model-profile", smallProfile().string(), "--workers", "3", "--bandwidth",
                "1gbit", "--verify", "2", "--verify-top", "1", "--json", json.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("verified best: gradsync train --workers 3 "), std::string::npos) << r.out;
  nlohmann::json doc = nlohmann::json::parse(readFile(json));
  const std::string recommended = doc["recommended"]["train_flags"];
  bool ran = false;
  for (const auto& v : doc["verified"]) {
    EXPECT_GT(v["measured_step_ms"].get<double>(), 0);
    ran |= v["train_flags"] == recommended;
  }
  EXPECT_TRUE(ran) << recommended;
  EXPECT_NE(r.out.find("recommended: gradsync train " + recommended), std::string::npos);
}

// --verify-model verifies with the real model a profile was measured from, not its emulation.
TEST_F(CliTrain, TuneVerifyModelTrainsTheRealModel) {
  fs::path profile = scratch() / "mlp-verify-profile.json";
  Result r = gradsync({"profile", "--model", "mlp", "--workers", "2", "--steps", "2", "--warmup",
                       "1", "--output", profile.string()});
  ASSERT_TRUE(r.status.ok()) << r.err;
  fs::path json = scratch() / "tune-verify-model.json";
  r = gradsync({"tune", "--model-profile", profile.string(), "--workers", "2", "--bandwidth",
                "1gbit", "--verify", "2", "--verify-top", "1", "--verify-model", "mlp", "--json",
                json.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("verified (2 steps of gradsync train each, --model mlp)"), std::string::npos)
      << r.out;
  for (const auto& v : nlohmann::json::parse(readFile(json))["verified"])
    EXPECT_GT(v["measured_step_ms"].get<double>(), 0);

  r = gradsync({"tune", "--model-profile", profile.string(), "--verify", "2", "--verify-model",
                "mlp", "--compute-scale", "2"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("--verify-model"), std::string::npos) << r.err;
  r = gradsync(
      {"tune", "--model-profile", profile.string(), "--verify", "1", "--verify-model", "nope"});
  EXPECT_NE(r.status.code, 0);
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
}

TEST_F(CliTrain, ProfileWritesAModelProfileOrNamesTheModels) {
  fs::path json = scratch() / "mlp-profile.json";
  Result r = gradsync(
      {"profile", "--model", "mlp", "--steps", "2", "--warmup", "1", "--output", json.string()});
  ASSERT_TRUE(r.status.ok()) << r.status.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("fc1"), std::string::npos) << r.out;  // the table
  nlohmann::json doc = nlohmann::json::parse(readFile(json));
  EXPECT_EQ(doc["name"], "mlp");
  EXPECT_EQ(doc["layers"].size(), 3u);  // fc1, fc2, fc3
  EXPECT_NE(doc["source"].get<std::string>().find("gradsync profile --model mlp"),
            std::string::npos);

  // The measured profile is what simulate reads.
  r = gradsync({"simulate", "--model-profile", json.string(), "--workers", "2"});
  ASSERT_TRUE(r.status.ok()) << r.err;
  EXPECT_NE(r.out.find("mlp on 2 workers"), std::string::npos) << r.out;

  r = gradsync({"profile", "--model", "nope"});
  EXPECT_EQ(r.status.code, 2);
  EXPECT_NE(r.err.find("mlp, cnn, resnet20, vgg11"), std::string::npos) << r.err;
}

TEST_F(CliTrain, BadFlagsGiveAOneLineErrorWithTheChoices) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"train", "--model", "alexnet"}, "mlp, cnn, resnet20, vgg11"},
      {{"train", "--schedule", "p4"}, "fifo, wfbp, fusion:MB"},
      {{"train", "--schedule", "p3:slice=0"}, "p3:slice must be at least 1"},
      {{"train", "--sync", "sharded", "--schedule", "p3"}, "use fifo, wfbp or fusion:MB"},
      {{"train", "--sync", "sharded", "--compress", "topk:0.01"}, "--sync ssgd"},
      {{"train", "--sync", "gossip"},
       "ssgd, sharded[:fc=reduce|exchange|auto,concurrent=N], asgd, ssp:S"},
      {{"train", "--sync", "ssp"}, "needs a parameter (ssp:N)"},
      {{"train", "--sync", "asgd:3"}, "takes no parameter"},
      {{"train", "--compensate", "sc"}, "--compensate sc does not apply to --sync ssgd"},
      {{"train", "--compensate", "lwp"}, "no staleness for lwp to predict over"},
      {{"train", "--sync", "ssgd", "--ps", "--compensate", "lwp"},
       "--compensate lwp does not apply to --sync ssgd"},
      {{"train", "--sync", "odsgd", "--compensate", "lwp"},
       "--compensate lwp does not apply to --sync odsgd"},
      {{"train", "--sync", "cdsgd:5", "--compensate", "sc+lwp"},
       "already predicts the global model"},
      {{"train", "--sync", "localsgd:4", "--compensate", "lwp"}, "under asgd and ssp:S"},
      {{"train", "--sync", "asgd", "--compensate", "spike"}, "none, sc, lwp"},
      {{"train", "--sync", "asgd", "--compensate", "lwp", "--lwp-backward"},
       "--lwp-backward needs --pipeline"},
      {{"train", "--pipeline", "2", "--compensate", "sc", "--lwp-backward"},
       "--lwp-backward needs --pipeline with --compensate lwp"},
      {{"train", "--weight-stash"}, "--weight-stash applies to --pipeline S only"},
      {{"train", "--micro-batches", "4"}, "--micro-batches applies to --pipeline S only"},
      {{"train", "--pin-devices"}, "--pin-devices applies to --pipeline S only"},
      {{"train", "--waves", "2", "--wave-placement", "same"},
       "--wave-placement applies to --pipeline S only"},
      {{"train", "--sync", "ssdsgd:0"}, "not an integer >= 1"},
      {{"train", "--sync", "localsgd:4", "--servers", "2"}, "without servers"},
      {{"train", "--sync", "cdsgd:4", "--compress", "topk:0.01"}, "cdsgd pushes its own"},
      {{"train", "--sync", "odsgd", "--compress", "powersgd:2"},
       "does not apply through parameter servers"},
      {{"train", "--dataset", "cifar"}, "fashion-mnist, synthetic, text or text:PATH"},
      {{"train", "--model", "gpt", "--dataset", "synthetic"}, "trains on text"},
      {{"train", "--model", "gpt:width=30,heads=4"}, "must divide its width"},
      {{"train", "--model", "gpt:depth=3"}, "unknown gpt option 'depth=3'"},
      {{"train", "--optimizer", "adam"}, "choose sgd, adamw or sign"},
      {{"train", "--optimizer", "sign", "--sync", "asgd"}, "--optimizer sign with --sync asgd"},
      {{"train", "--model", "gpt", "--waves", "2"}, "--model gpt is not supported with"},
      {{"train", "--compress", "zip"}, "topk:R, mstopk:R"},
      {{"train", "--compress", "topk:2"}, "0 < R <= 1"},
      {{"train", "--compress", "qsgd,levels=3"}, "options are: ef, ef_decay, bucket, allreduce"},
      {{"train", "--compress", "topk:0.01,allreduce=on"}, "topk has no compressed all-reduce"},
      {{"train", "--sync", "diloco:4", "--compress-warmup-codec", "int8"},
       "--compress-warmup-codec does not apply to --sync diloco:4"},
      {{"train", "--compress-warmup-codec", "int8"}, "and --compress is none"},
      {{"train", "--compress-override", "fc*"}, "GLOB=SPEC"},
      {{"train", "--resume"}, "--checkpoint-dir"},
      {{"train", "--compute", "gpu"}, "real or emulate:PROFILE"},
      {{"train", "--compute", "emulate:"}, "real or emulate:PROFILE"},
      {{"train", "--compute", "emulate:alexnet"}, "resnet50, vgg19, transformer"},
      {{"train", "--compute", "emulate:resnet50", "--compute-scale", "0"},
       "--compute-scale must be positive"},
      {{"train", "--compute", "emulate:resnet50", "--elastic", "2:4"}, "--compute must be real"},
      {{"train", "--compute", "emulate:resnet50", "--model", "dlrm"}, "--compute must be real"},
      {{"train", "--elastic", "3"}, "--elastic 3 is not MIN:MAX"},
      {{"train", "--elastic", "4:3"}, "1 <= MIN <= MAX"},
      {{"train", "--elastic", "2:4", "--sync", "asgd"}, "--elastic does not support --sync"},
      {{"train", "--elastic", "2:4", "--ps"},
       "--elastic does not support --sync ssgd through servers"},
      {{"train", "--elastic", "2:4", "--sync", "diloco:20,fragments=2,eager=on"},
       "--elastic does not support diloco's eager=on"},
      {{"train", "--elastic", "2:4", "--sync", "diloco:20,group=host"},
       "--elastic does not support diloco's group=host"},
      {{"train", "--elastic", "2:4", "--transport", "loopback"},
       "processes on gradsync's own transport"},
      {{"train", "--record-samples", "/tmp/x"}, "--record-samples records elastic runs"},
      {{"train", "--hang-timeout", "2s"}, "--hang-timeout watches elastic runs"},
      {{"train", "--elastic", "2:4", "--hang-timeout", "-1s"}, "a duration such as"},
      {{"train", "--data-dir", "/nonexistent", "--steps", "1"}, "dataset-fashion-mnist"}};
  std::vector<std::vector<std::string>> runs;
  for (const Case& c : cases) runs.push_back(c.args);
  const std::vector<Result> results = gradsyncEach(runs, 4);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Result& r = results[i];
    EXPECT_NE(r.status.code, 0) << cases[i].args[1];
    EXPECT_NE(r.err.find(cases[i].expected), std::string::npos)
        << cases[i].args[1] << ": " << r.err;
  }
}

}  // namespace
}  // namespace gradsync
