#include "data/shard_cache.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "common/elapsed.h"
#include "common/logging.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using MonotonicClock = std::chrono::steady_clock;

std::optional<std::vector<uint8_t>> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Written under a name of its own, then renamed: readers (other ranks of the host, a later run)
// see the whole file or none. No fsync: a file torn by a power loss fails its checksum and is
// fetched again.
void writeFileAtomically(const std::string& path, std::span<const uint8_t> bytes) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw SystemError(fmt::format("cannot write the cache file '{}' (disk full?)", tmp),
                        {.operation = "cache dataset shard"});
    }
  }
  fs::rename(tmp, path);
}

std::span<const uint8_t> bytesOf(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

uint64_t decodedBytes(const ImageSet& set) {
  return set.pixels.size() + set.labels.size();
}

}  // namespace

struct ShardCache::State {
  ShardCacheOptions options;
  ShardManifest manifest;
  mutable std::mutex mutex;
  std::condition_variable loaded;
  std::set<std::string> loading;  // shards some thread is loading now
  // The memory level: least recently used first.
  std::list<std::pair<std::string, std::shared_ptr<const ImageSet>>> lru;
  std::map<std::string, decltype(lru)::iterator> memory;
  uint64_t memoryUsed = 0;
  ShardCacheStats stats;

  std::string diskPath(const std::string& name) const { return options.directory + "/" + name; }
  std::string urlOf(const std::string& name) const { return options.url + "/" + name; }

  void loadManifest();
  std::shared_ptr<const ImageSet> load(const ShardInfo& shard);
  std::optional<ImageSet> fromDisk(const ShardInfo& shard);
  ImageSet fromServer(const ShardInfo& shard);
  void remember(const std::string& name, std::shared_ptr<const ImageSet> set);
};

void ShardCache::State::loadManifest() {
  const std::string url = urlOf("manifest.txt");
  const std::string cached = diskPath("manifest.txt");
  std::string text;
  try {
    std::vector<uint8_t> body = httpGet(url, options.http);
    text.assign(body.begin(), body.end());
    parseManifest(text, url);  // only a valid manifest replaces the cached one
    writeFileAtomically(cached, bytesOf(text));
  } catch (const DataError& e) {
    std::optional<std::vector<uint8_t>> copy = readFile(cached);
    if (!copy) throw;
    GS_LOG(kWarn, "{}; using the manifest cached in {} from an earlier run", e.what(),
           options.directory);
    text.assign(copy->begin(), copy->end());
  }
  manifest = parseManifest(text, url);
}

std::optional<ImageSet> ShardCache::State::fromDisk(const ShardInfo& shard) {
  const auto start = MonotonicClock::now();
  std::optional<std::vector<uint8_t>> bytes = readFile(diskPath(shard.name));
  std::optional<ImageSet> set;
  if (bytes && matchesShard(*bytes, shard)) {
    set = decodeShard(*bytes, shard, manifest, diskPath(shard.name));
  } else if (bytes) {
    GS_LOG(kWarn,
           "cached shard {} is corrupt ({} bytes, checksum {:08x}; the manifest says {} "
           "bytes, {:08x}): fetching it again from {}",
           diskPath(shard.name), bytes->size(), crc32Of(*bytes), shard.bytes, shard.crc32,
           options.url);
    std::error_code ignored;
    fs::remove(diskPath(shard.name), ignored);
    std::lock_guard lock(mutex);
    ++stats.corruptShards;
  }
  std::lock_guard lock(mutex);
  stats.diskSeconds += secondsSince(start);
  if (set) ++stats.diskHits;
  return set;
}

ImageSet ShardCache::State::fromServer(const ShardInfo& shard) {
  const std::string url = urlOf(shard.name);
  for (int attempt = 1;; ++attempt) {
    const auto start = MonotonicClock::now();
    std::vector<uint8_t> bytes;
    try {
      bytes = httpGet(url, options.http);
    } catch (const DataError& e) {
      throw DataError(fmt::format("{}: {}", shard.name, e.detail()),
                      {.operation = "fetch dataset shard"});
    }
    {
      std::lock_guard lock(mutex);
      ++stats.remoteFetches;
      stats.remoteBytes += bytes.size();
      stats.remoteSeconds += secondsSince(start);
    }
    if (matchesShard(bytes, shard) || attempt == 2) {
      // A second corrupt copy fails here, naming the shard and the server.
      ImageSet set = decodeShard(bytes, shard, manifest, fmt::format("dataset shard {}", url));
      const auto written = MonotonicClock::now();
      writeFileAtomically(diskPath(shard.name), bytes);
      std::lock_guard lock(mutex);
      stats.diskSeconds += secondsSince(written);
      return set;
    }
    GS_LOG(kWarn, "dataset shard {} arrived corrupt from {}; fetching it once more", shard.name,
           options.url);
    std::lock_guard lock(mutex);
    ++stats.corruptShards;
  }
}

void ShardCache::State::remember(const std::string& name, std::shared_ptr<const ImageSet> set) {
  const uint64_t size = decodedBytes(*set);
  if (size > options.memoryBytes || memory.contains(name)) return;
  while (memoryUsed + size > options.memoryBytes) {
    memoryUsed -= decodedBytes(*lru.front().second);
    memory.erase(lru.front().first);
    lru.pop_front();
  }
  lru.emplace_back(name, std::move(set));
  memory.emplace(name, std::prev(lru.end()));
  memoryUsed += size;
}

std::shared_ptr<const ImageSet> ShardCache::State::load(const ShardInfo& shard) {
  std::optional<ImageSet> set = fromDisk(shard);
  if (!set) set = fromServer(shard);
  return std::make_shared<const ImageSet>(std::move(*set));
}

ShardCache::ShardCache(ShardCacheOptions options) : state_(std::make_unique<State>()) {
  while (!options.url.empty() && options.url.back() == '/') options.url.pop_back();
  if (options.url.empty()) {
    throw ConfigError("no data URL given", {.operation = "open the data cache"});
  }
  if (options.directory.empty()) options.directory = defaultCacheDirectory(options.url);
  fs::create_directories(options.directory);
  state_->options = std::move(options);
  state_->loadManifest();
}

ShardCache::~ShardCache() = default;

const ShardManifest& ShardCache::manifest() const {
  return state_->manifest;
}
ShardCacheStats ShardCache::stats() const {
  std::lock_guard lock(state_->mutex);
  return state_->stats;
}

std::shared_ptr<const ImageSet> ShardCache::get(const ShardInfo& shard) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  s.loaded.wait(lock, [&] { return !s.loading.contains(shard.name); });
  if (auto it = s.memory.find(shard.name); it != s.memory.end()) {
    s.lru.splice(s.lru.end(), s.lru, it->second);  // now the most recently used
    ++s.stats.memoryHits;
    return it->second->second;
  }
  s.loading.insert(shard.name);
  lock.unlock();
  std::shared_ptr<const ImageSet> set;
  try {
    set = s.load(shard);
  } catch (...) {
    lock.lock();
    s.loading.erase(shard.name);
    s.loaded.notify_all();
    throw;
  }
  lock.lock();
  s.remember(shard.name, set);
  s.loading.erase(shard.name);
  s.loaded.notify_all();
  return set;
}

std::string defaultCacheDirectory(const std::string& url) {
  std::string base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    base = std::string(home) + "/.cache";
  } else {
    base = "/tmp";
  }
  std::string name = url.substr(url.find("://") == std::string::npos ? 0 : url.find("://") + 3);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return base + "/gradsync/data/" + name;
}

}  // namespace gradsync
