#include "train_on_threads.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <mutex>

#include "gradsync/topology.h"

namespace gradsync::testing {
namespace {

// `inner` unchanged, with every send counted by the peer's host. Thread-safe as `inner` is.
class HostCountingTransport final : public Transport {
 public:
  explicit HostCountingTransport(Transport& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const TransportOptions& options() const override { return inner_.options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (peer != rank()) {
      const Topology* topology = inner_.topology();
      (topology != nullptr && topology->sameHost(rank(), peer) ? inside_ : across_) += bytes;
    }
    return inner_.send(peer, tag, data, bytes);
  }
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return inner_.recv(peer, tag, data, bytes);
  }
  void abort(std::exception_ptr error) override { inner_.abort(std::move(error)); }
  uint64_t bytesSent() const override { return inner_.bytesSent(); }
  size_t messageOverheadBytes() const override { return inner_.messageOverheadBytes(); }
  const Topology* topology() const override { return inner_.topology(); }

  HostTraffic traffic() const { return {inside_.load(), across_.load()}; }

 private:
  Transport& inner_;
  std::atomic<uint64_t> inside_{0}, across_{0};
};

}  // namespace

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

TrainResult train(int workers, TrainOptions options, TransportKind kind, HostTraffic& traffic) {
  TrainResult rank0;
  std::mutex mutex;
  runWithTransports(kind, workers, [&](Transport& t) {
    HostCountingTransport counted(t);
    TrainResult result = runTraining(counted, options);
    std::lock_guard<std::mutex> lock(mutex);
    traffic.inside += counted.traffic().inside;
    traffic.across += counted.traffic().across;
    if (t.rank() == 0) rank0 = std::move(result);
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
  const std::string path = scratchPath(suite, profile.name) + ".json";
  std::ofstream(path) << profileToJson(profile);
  return "emulate:" + path;
}

std::string scratchPath(const std::string& suite, const std::string& name) {
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

std::string testName(std::string name) {
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

}  // namespace gradsync::testing
