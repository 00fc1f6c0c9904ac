#include "tune_verify.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/subprocess.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::vector<std::string> trainArgv(const sim::TuneCandidate& c, const VerifyOptions& o,
                                   const fs::path& metrics) {
  std::vector<std::string> argv{selfExecutable(), "train"};
  std::istringstream words(sim::trainFlags(c, o.workers));
  for (std::string word; words >> word;) argv.push_back(word);
  if (o.model.empty())
    argv.insert(argv.end(), {"--compute", "emulate:" + o.profile, "--compute-scale",
                             fmt::format("{}", o.computeScale)});
  else
    argv.insert(argv.end(), {"--model", o.model});
  argv.insert(argv.end(), {"--steps", std::to_string(o.steps), "--bandwidth", o.bandwidth,
                           "--compress-warmup", "0", "--quiet", "--metrics", metrics.string()});
  if (o.latency != "0") argv.insert(argv.end(), {"--latency", o.latency});
  return argv;
}

std::string readAll(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

double runOne(const sim::TuneCandidate& c, const VerifyOptions& o, const fs::path& dir) {
  const fs::path metrics = dir / "metrics.json";
  SpawnOptions spawn{.argv = trainArgv(c, o, metrics),
                     .stdoutPath = (dir / "out").string(),
                     .stderrPath = (dir / "err").string()};
  const pid_t pid = spawnProcess(spawn);
  const auto ended = waitAny({pid}, 600s);
  const std::string flags = sim::trainFlags(c, o.workers);
  if (!ended) {
    ::kill(pid, SIGKILL);
    waitAny({pid}, 10s);
    throw Error(fmt::format("--verify: gradsync train {} did not end within 600 s", flags));
  }
  if (!ended->second.ok())
    throw Error(fmt::format("--verify: gradsync train {} {}: {}", flags, ended->second.describe(),
                            readAll(dir / "err")));
  return nlohmann::json::parse(readAll(metrics))["per_step"]["step_ms"].get<double>();
}

}  // namespace

std::vector<VerifiedCandidate> verifyCandidates(const sim::TuneResult& result,
                                                const std::vector<size_t>& ranks,
                                                const VerifyOptions& options) {
  // The runs' metrics and logs, removed however verification ends (a failed run's error
  // carries its stderr).
  struct RunDir {
    fs::path path = fs::temp_directory_path() / fmt::format("gradsync-tune-{}", ::getpid());
    RunDir() { fs::create_directories(path); }
    ~RunDir() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } dir;
  std::vector<VerifiedCandidate> verified;
  for (size_t i : ranks) {
    const sim::TuneCandidate& c = result.ranked.at(i);
    verified.push_back({&c, i + 1, runOne(c, options, dir.path)});
  }
  std::stable_sort(verified.begin(), verified.end(), [](const auto& a, const auto& b) {
    return a.measuredTimeToAccuracy() < b.measuredTimeToAccuracy();
  });
  return verified;
}

}  // namespace gradsync
