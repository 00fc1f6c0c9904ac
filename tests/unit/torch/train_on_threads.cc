#include "train_on_threads.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

namespace gradsync::testing {

TrainResult train(int workers, TrainOptions options, TransportKind kind) {
  TrainResult rank0;
  std::mutex mutex;
  runWithTransports(kind, workers, [&](Transport& t) {
    TrainResult result = runTraining(t, options);
    if (t.rank() == 0) {
      std::lock_guard<std::mutex> lock(mutex);
      rank0 = std::move(result);
    }
  });
  return rank0;
}

TrainOptions quickOptions() {
  TrainOptions o;
  o.model = "mlp";
  o.dataset = "synthetic";
  o.syntheticSamples = 1024;
  o.steps = 6;
  o.lr = 0.05;
  o.quiet = true;
  return o;
}

std::string emulatedCompute(const ModelProfile& profile, const std::string& suite) {
  const std::string path = scratchDir(suite, profile.name) + ".json";
  std::ofstream(path) << profileToJson(profile);
  return "emulate:" + path;
}

std::string scratchDir(const std::string& suite, const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("gradsync-" + suite + "-" + std::to_string(::getpid()) + "-" + name);
  std::filesystem::remove_all(dir);
  return dir.string();
}

double maxRelativeDifference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    double scale = std::max({std::fabs(a[i]), std::fabs(b[i]), 1e-2f});
    worst = std::max(worst, std::fabs(a[i] - b[i]) / scale);
  }
  return worst;
}

}  // namespace gradsync::testing
