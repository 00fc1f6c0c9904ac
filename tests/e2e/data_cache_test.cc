// The multi-level data cache against a real HTTP server: Debian's nginx, started by
// scripts/data_server.sh, serving shards written by the library; then `gradsync train
// --data-url` as users run it. Skipped (not failed) only where nginx is not installed.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "common/subprocess.h"
#include "data/shard_cache.h"
#include "gradsync/error.h"
#include "support/free_port.h"
#include "support/read_file.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::freePort;
using testing::readFile;

ExitStatus run(std::vector<std::string> argv, const fs::path& out, const fs::path& err,
               std::chrono::seconds timeout = 120s) {
  pid_t pid = spawnProcess(
      {.argv = std::move(argv), .env = {}, .stdoutPath = out.string(), .stderrPath = err.string()});
  auto ended = waitAny({pid}, timeout);
  EXPECT_TRUE(ended.has_value()) << "timed out: " << out;
  return ended ? ended->second : ExitStatus{.code = -1};
}

// One nginx serving `root`, stopped on destruction.
class DataServer {
 public:
  DataServer(const fs::path& root, const fs::path& work, const std::string& limitRate = "0")
      : work_(work), port_(freePort()) {
    ExitStatus s = run({"bash", GRADSYNC_DATA_SERVER, "start", "--root", root.string(), "--port",
                        std::to_string(port_), "--work", work.string(), "--limit-rate", limitRate},
                       work.string() + ".out", work.string() + ".err", 30s);
    EXPECT_TRUE(s.ok()) << readFile(work.string() + ".err");
  }
  ~DataServer() { stop(); }
  void stop() {
    run({"bash", GRADSYNC_DATA_SERVER, "stop", "--work", work_.string()}, "/dev/null", "/dev/null",
        30s);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // How many times the server answered a GET of `name` (200 or not); "" counts every shard.
  // nginx logs a request once it has sent the response, so the client may read the log a moment
  // early: this waits until the count holds for 200 ms.
  int gets(const std::string& name = "") const {
    int count = countGets(name);
    for (int last = -1; count != last; count = countGets(name)) {
      last = count;
      std::this_thread::sleep_for(200ms);
    }
    return count;
  }

 private:
  int countGets(const std::string& name) const {
    std::ifstream log(work_ / "access.log");
    int count = 0;
    for (std::string line; std::getline(log, line);) {
      count += name.empty() ? line.find(".gss ") != std::string::npos
                            : line.starts_with("GET /" + name + " ");
    }
    return count;
  }
  fs::path work_;
  int port_;
};

bool haveNginx() {
  return fs::exists("/usr/sbin/nginx");
}

// A fresh directory for the running test: gradsync-PREFIX-PID-TEST.
fs::path testDirectory(const std::string& prefix) {
  fs::path dir =
      fs::temp_directory_path() / ("gradsync-" + prefix + "-" + std::to_string(::getpid()) + "-" +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

class DataCache : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveNginx()) GTEST_SKIP() << "nginx is not installed (scripts/setup.sh installs it)";
    dir_ = testDirectory("datacache");
    ImageSet train{60, 4, 4, {}, {}};
    for (int64_t i = 0; i < train.count; ++i) {
      train.labels.push_back(static_cast<uint8_t>(i % 10));
      for (int p = 0; p < 16; ++p) train.pixels.push_back(static_cast<uint8_t>(i + p));
    }
    ImageSet test = train;
    manifest_ = writeShards(train, test, 10, 10, (dir_ / "store").string());  // 6 + 6 shards
    server_ = std::make_unique<DataServer>(dir_ / "store", dir_ / "server");
  }
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  ShardCacheOptions options(uint64_t memoryBytes = 1 << 20) const {
    return {.url = server_->url(),
            .directory = (dir_ / "cache").string(),
            .memoryBytes = memoryBytes,
            .http = {.connectTimeoutSeconds = 5, .stallSeconds = 5}};
  }
  std::vector<uint8_t> pixelsOf(ShardCache& cache, size_t shard) {
    return cache.get(manifest_.train[shard])->pixels;
  }

  fs::path dir_;
  ShardManifest manifest_;
  std::unique_ptr<DataServer> server_;
};

TEST_F(DataCache, EachShardIsFetchedOnceAndARestartReadsNothingFromTheServer) {
  const int manifestGets = server_->gets("manifest.txt");  // the start script's probe
  std::vector<std::vector<uint8_t>> first;
  {
    ShardCache cache(options());
    for (size_t s = 0; s < 6; ++s) first.push_back(pixelsOf(cache, s));
    for (size_t s = 0; s < 6; ++s) EXPECT_EQ(pixelsOf(cache, s), first[s]);
    ShardCacheStats stats = cache.stats();
    EXPECT_EQ(stats.remoteFetches, 6);
    EXPECT_EQ(stats.memoryHits, 6);
    EXPECT_EQ(stats.diskHits, 0);
  }
  EXPECT_EQ(server_->gets(), 6);
  ShardCache restarted(options());  // a new process would see the same directory
  for (size_t s = 0; s < 6; ++s) EXPECT_EQ(pixelsOf(restarted, s), first[s]);
  EXPECT_EQ(restarted.stats().diskHits, 6);
  EXPECT_EQ(restarted.stats().remoteFetches, 0);
  EXPECT_EQ(server_->gets(), 6) << "the restarted cache fetched shards again";
  EXPECT_EQ(server_->gets("manifest.txt"), manifestGets + 2);
}

TEST_F(DataCache, ACorruptedCachedShardIsDetectedAndFetchedAgain) {
  std::vector<uint8_t> good;
  {
    ShardCache cache(options());
    good = pixelsOf(cache, 2);
  }
  const fs::path cached = dir_ / "cache" / manifest_.train[2].name;
  {
    std::fstream f(cached, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x5a');
  }
  ShardCache cache(options());
  EXPECT_EQ(pixelsOf(cache, 2), good);
  EXPECT_EQ(cache.stats().corruptShards, 1);
  EXPECT_EQ(cache.stats().remoteFetches, 1);
  EXPECT_EQ(server_->gets(manifest_.train[2].name), 2);
  ShardCache again(options());  // the re-fetched copy replaced the corrupt one on disk
  EXPECT_EQ(pixelsOf(again, 2), good);
  EXPECT_EQ(again.stats().diskHits, 1);
}

TEST_F(DataCache, AShardCorruptOnTheServerFailsAfterOneRetryNamingIt) {
  const fs::path served = dir_ / "store" / manifest_.train[4].name;
  std::string bytes = readFile(served);
  bytes[bytes.size() / 2] ^= 0x01;
  std::ofstream(served, std::ios::binary | std::ios::trunc) << bytes;
  ShardCache cache(options());
  try {
    cache.get(manifest_.train[4]);
    FAIL() << "a corrupt shard was accepted";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(manifest_.train[4].name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server_->gets(manifest_.train[4].name), 2);
  EXPECT_FALSE(fs::exists(dir_ / "cache" / manifest_.train[4].name)) << "cached a corrupt copy";
}

TEST_F(DataCache, TheServerStoppedGivesAnErrorNamingItWhileCachedShardsStillServe) {
  std::vector<uint8_t> cachedPixels;
  {
    ShardCache cache(options());
    cachedPixels = pixelsOf(cache, 0);
  }
  server_->stop();
  ShardCache cache(options());  // the manifest cached by the first run
  EXPECT_EQ(pixelsOf(cache, 0), cachedPixels);
  try {
    cache.get(manifest_.train[1]);
    FAIL() << "no error with the server stopped";
  } catch (const DataError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(manifest_.train[1].name), std::string::npos) << what;
    EXPECT_NE(what.find(server_->url()), std::string::npos) << what;
  }
  fs::remove_all(dir_ / "cache");
  EXPECT_THROW(ShardCache{options()}, DataError) << "no server and nothing cached";
}

TEST_F(DataCache, ConcurrentReadersFetchAShardOnceAndTheMemoryBudgetEvictsToDisk) {
  ShardCache cache(options());
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) readers.emplace_back([&] { cache.get(manifest_.train[3]); });
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(server_->gets(manifest_.train[3].name), 1);
  EXPECT_EQ(cache.stats().remoteFetches, 1);
  EXPECT_EQ(cache.stats().memoryHits, 3);

  const uint64_t shardBytes = 10 * 16 + 10;       // decoded pixels and labels of one shard
  ShardCache small(options(shardBytes * 3 / 2));  // room for one shard
  pixelsOf(small, 3);                             // from disk, kept in memory
  pixelsOf(small, 5);                             // fetched; evicts shard 3
  pixelsOf(small, 5);                             // memory
  pixelsOf(small, 3);                             // disk again
  EXPECT_EQ(small.stats().diskHits, 2);
  EXPECT_EQ(small.stats().memoryHits, 1);
  EXPECT_EQ(small.stats().remoteFetches, 1);
}

TEST(TrainDataUrlFlags, BadValuesAndNoServerGiveClearErrors) {
#ifndef GRADSYNC_HAVE_TORCH
  GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
  const fs::path dir = testDirectory("dataurl");
  auto trainWith = [&](std::vector<std::string> extra) {
    std::vector<std::string> argv = {GRADSYNC_BIN, "train", "--steps", "1",
                                     "--workers",  "1",     "--quiet"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ExitStatus s = run(argv, dir / "out", dir / "err", 60s);
    return std::make_pair(s, readFile(dir / "err"));
  };
  auto [s1, e1] = trainWith({"--data-url", "ftp://host/data"});
  EXPECT_EQ(s1.code, 2);
  EXPECT_NE(e1.find("not an http:// or https:// URL"), std::string::npos) << e1;
  auto [s2, e2] = trainWith({"--data-url", "http://127.0.0.1:1", "--dataset", "synthetic"});
  EXPECT_EQ(s2.code, 2);
  EXPECT_NE(e2.find("--dataset"), std::string::npos) << e2;
  const std::string url = "http://127.0.0.1:" + std::to_string(freePort());  // nobody listens
  auto [s3, e3] = trainWith({"--data-url", url, "--cache-dir", (dir / "cache").string()});
  EXPECT_FALSE(s3.ok());
  EXPECT_NE(e3.find("cannot reach the data server at " + url), std::string::npos) << e3;
  fs::remove_all(dir);
}

// `gradsync train --data-url` on real Fashion-MNIST shards, as users run it.
class TrainDataUrl : public ::testing::Test {
 protected:
  void SetUp() override {
#ifndef GRADSYNC_HAVE_TORCH
    GTEST_SKIP() << "built without LibTorch: no gradsync train";
#endif
    if (!haveNginx()) GTEST_SKIP() << "nginx is not installed (scripts/setup.sh installs it)";
    dir_ = testDirectory("dataurl");
    ExitStatus s = run({GRADSYNC_BIN, "shard", "--output", (dir_ / "store").string(),
                        "--samples-per-shard", "2000"},
                       dir_ / "shard.out", dir_ / "shard.err");
    ASSERT_TRUE(s.ok()) << readFile(dir_ / "shard.err");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::vector<std::string> train(const std::string& url, int epochs) const {
    return {GRADSYNC_BIN,   "train",
            "--model",      "mlp",
            "--workers",    "2",
            "--epochs",     std::to_string(epochs),
            "--batch-size", "128",
            "--data-url",   url,
            "--cache-dir",  (dir_ / "cache").string(),
            "--quiet"};
  }
  fs::path dir_;
};

TEST_F(TrainDataUrl, EveryShardIsFetchedOnceSoLaterEpochsAndRestartsReadLocally) {
  DataServer server(dir_ / "store", dir_ / "server");
  ExitStatus s = run(train(server.url(), 2), dir_ / "out", dir_ / "err");
  const std::string out = readFile(dir_ / "out");
  ASSERT_TRUE(s.ok()) << s.describe() << readFile(dir_ / "err");
  for (int shard = 0; shard < 30; ++shard) {
    const std::string name =
        "train-000" + std::string(shard < 10 ? "0" : "") + std::to_string(shard) + ".gss";
    EXPECT_EQ(server.gets(name), 1) << name << " (each rank fetches only its own, once)";
  }
  EXPECT_LE(server.gets(), 30 + 2 * 5) << "the 5 test shards, at most once per rank";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(test accuracy ([0-9.]+)%)"))) << out;
  EXPECT_GT(std::stod(m[1]), 75.0) << out;
  EXPECT_NE(out.find("data per epoch"), std::string::npos) << out;

  const int before = server.gets();
  s = run(train(server.url(), 1), dir_ / "out2", dir_ / "err2");
  ASSERT_TRUE(s.ok()) << s.describe() << readFile(dir_ / "err2");
  EXPECT_EQ(server.gets(), before) << "a restart fetched shards that were cached";
  EXPECT_NE(readFile(dir_ / "out2").find("0 shards from the server"), std::string::npos)
      << readFile(dir_ / "out2");
}

TEST_F(TrainDataUrl, TheServerStoppedMidEpochGivesAnErrorNamingItNotAHang) {
  DataServer server(dir_ / "store", dir_ / "server", "200k");  // 1.6 MB shards: ~8 s each
  const int probes = server.gets("manifest.txt");
  pid_t pid = spawnProcess({.argv = train(server.url(), 1),
                            .env = {},
                            .stdoutPath = (dir_ / "out").string(),
                            .stderrPath = (dir_ / "err").string()});
  // Both ranks have the manifest: their first shards are on the way, each for seconds.
  for (int i = 0; i < 600 && server.gets("manifest.txt") < probes + 2; ++i) {
    std::this_thread::sleep_for(100ms);
  }
  std::this_thread::sleep_for(1s);
  server.stop();
  auto ended = waitAny({pid}, 90s);
  ASSERT_TRUE(ended.has_value()) << "gradsync train hung after the data server stopped";
  EXPECT_FALSE(ended->second.ok());
  const std::string err = readFile(dir_ / "err");
  EXPECT_NE(err.find("data server at " + server.url()), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(err, std::regex(R"(train-000[0-9][0-9]\.gss)"))) << err;
}

}  // namespace
}  // namespace gradsync
