// Elastic jobs on real processes for the e2e tests (tests/e2e/elastic*_test.cc): `gradsync launch
// --elastic` of `gradsync train --elastic` workers that record their samples and metrics in a
// scratch folder, a signal to one of them at a given step, and the wait for the job's end.
// GRADSYNC_BIN is the test target's compile definition.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "support/read_file.h"

namespace gradsync::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

inline fs::path scratch(const std::string& name) {
  fs::path dir =
      fs::temp_directory_path() / ("gradsync-elastic-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// `workers` workers of mlp on Fashion-MNIST for one epoch (234 steps of 4 x 64 samples whatever
// the number of workers: --elastic's MAX is 4) unless `extra` says otherwise (--model, --epochs,
// --steps), each a process started by `gradsync launch`, which serves the store.
inline pid_t launch(const fs::path& dir, const std::string& range, int restarts,
                    const std::vector<std::string>& extra = {}, int workers = 4) {
  SpawnOptions spawn;
  spawn.argv = {GRADSYNC_BIN,
                "launch",
                "-n",
                std::to_string(workers),
                "--elastic",
                "--max-restarts",
                std::to_string(restarts),
                "--",
                GRADSYNC_BIN,
                "train",
                "--elastic",
                range,
                "--quiet",
                "--record-samples",
                (dir / "samples").string(),
                "--metrics",
                (dir / "metrics.json").string()};
  spawn.argv.insert(spawn.argv.end(), extra.begin(), extra.end());
  if (std::find(extra.begin(), extra.end(), "--model") == extra.end()) {
    spawn.argv.insert(spawn.argv.end(), {"--model", "mlp"});
  }
  if (std::find(extra.begin(), extra.end(), "--epochs") == extra.end() &&
      std::find(extra.begin(), extra.end(), "--steps") == extra.end()) {
    spawn.argv.insert(spawn.argv.end(), {"--epochs", "1"});
  }
  spawn.stdoutPath = (dir / "out").string();
  spawn.stderrPath = (dir / "err").string();
  return spawnProcess(spawn);
}

inline ExitStatus finish(pid_t pid, std::chrono::seconds timeout = 240s) {
  auto ended = waitAny({pid}, timeout);
  EXPECT_TRUE(ended.has_value()) << "the elastic job hung";
  if (!ended) {
    ::kill(pid, SIGKILL);
    return {.code = -1};
  }
  return ended->second;
}

// Waits until worker `slot` (its first process) has trained `steps` steps, then sends it
// `signal`; returns its pid.
inline pid_t killAfter(const fs::path& dir, int slot, size_t steps, int signal = SIGKILL) {
  const fs::path file = dir / "samples" / ("worker-" + std::to_string(slot) + "-0.txt");
  for (int i = 0; i < 3000; ++i) {
    std::string text = readFile(file);
    if (static_cast<size_t>(std::count(text.begin(), text.end(), '\n')) > steps) {
      std::smatch pid;
      if (!std::regex_search(text, pid, std::regex("pid ([0-9]+)"))) break;
      const pid_t victim = std::stoi(pid[1]);
      ::kill(victim, signal);
      return victim;
    }
    std::this_thread::sleep_for(20ms);
  }
  ADD_FAILURE() << "worker " << slot << " did not reach step " << steps << "\n"
                << readFile(dir / "err");
  return -1;
}

inline nlohmann::json metricsOf(const fs::path& dir) {
  return nlohmann::json::parse(readFile(dir / "metrics.json"));
}

}  // namespace gradsync::testing
