#include "data/shard_format.h"

#include <fmt/format.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gradsync/error.h"

namespace gradsync {
namespace {

constexpr char kMagic[8] = {'G', 'S', 'S', 'H', 'A', 'R', 'D', '1'};
constexpr size_t kHeaderBytes = sizeof(kMagic) + 4 + 2 + 2;
constexpr const char* kManifestHeader = "gradsync-shards 1";

[[noreturn]] void failShard(const std::string& what, const std::string& problem) {
  throw DataError(fmt::format("{}: {}", what, problem), {.operation = "read dataset shard"});
}

void putLe(std::vector<uint8_t>& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

uint64_t getLe(std::span<const uint8_t> in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{in[at + i]} << (8 * i);
  return value;
}

int64_t samplesOf(const std::vector<ShardInfo>& shards) {
  int64_t total = 0;
  for (const ShardInfo& s : shards) total += s.samples;
  return total;
}

void writeFile(const std::string& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw SystemError(fmt::format("cannot write '{}'", path), {.operation = "write shard"});
}

}  // namespace

int64_t ShardManifest::trainSamples() const {
  return samplesOf(train);
}
int64_t ShardManifest::testSamples() const {
  return samplesOf(test);
}

uint32_t crc32Of(std::span<const uint8_t> bytes) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed at most 1 GiB at a time.
  constexpr size_t kChunk = size_t{1} << 30;
  for (size_t at = 0; at < bytes.size(); at += kChunk) {
    const size_t n = std::min(kChunk, bytes.size() - at);
    crc = ::crc32(crc, bytes.data() + at, static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

std::vector<uint8_t> encodeShard(const ImageSet& set, int64_t first, int64_t count) {
  const size_t image = set.imageSize();
  std::vector<uint8_t> out(kMagic, kMagic + sizeof(kMagic));
  out.reserve(kHeaderBytes + static_cast<size_t>(count) * (1 + image));
  putLe(out, static_cast<uint64_t>(count), 4);
  putLe(out, static_cast<uint64_t>(set.rows), 2);
  putLe(out, static_cast<uint64_t>(set.cols), 2);
  auto labels = set.labels.begin() + first;
  out.insert(out.end(), labels, labels + count);
  auto pixels = set.pixels.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(first) * image);
  out.insert(out.end(), pixels,
             pixels + static_cast<ptrdiff_t>(static_cast<size_t>(count) * image));
  return out;
}

bool matchesShard(std::span<const uint8_t> bytes, const ShardInfo& info) {
  return bytes.size() == info.bytes && crc32Of(bytes) == info.crc32;
}

ImageSet decodeShard(std::span<const uint8_t> bytes, const ShardInfo& info,
                     const ShardManifest& manifest, const std::string& what) {
  if (bytes.size() != info.bytes) {
    failShard(what, fmt::format("{} bytes, the manifest says {}", bytes.size(), info.bytes));
  }
  if (uint32_t crc = crc32Of(bytes); crc != info.crc32) {
    failShard(what,
              fmt::format("checksum {:08x}, the manifest says {:08x} (corrupt)", crc, info.crc32));
  }
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    failShard(what, "not a gradsync shard (bad magic)");
  }
  ImageSet set;
  set.count = static_cast<int64_t>(getLe(bytes, 8, 4));
  set.rows = static_cast<int>(getLe(bytes, 12, 2));
  set.cols = static_cast<int>(getLe(bytes, 14, 2));
  if (set.count != info.samples || set.rows != manifest.rows || set.cols != manifest.cols) {
    failShard(what,
              fmt::format("holds {} images of {}x{}, the manifest says {} of {}x{}", set.count,
                          set.rows, set.cols, info.samples, manifest.rows, manifest.cols));
  }
  const size_t count = static_cast<size_t>(set.count);
  if (bytes.size() != kHeaderBytes + count * (1 + set.imageSize())) {
    failShard(what, "size does not match its header");
  }
  auto labels = bytes.subspan(kHeaderBytes, count);
  set.labels.assign(labels.begin(), labels.end());
  for (uint8_t label : set.labels) {
    if (label >= manifest.classes) failShard(what, fmt::format("label {} out of range", label));
  }
  auto pixels = bytes.subspan(kHeaderBytes + count);
  set.pixels.assign(pixels.begin(), pixels.end());
  return set;
}

std::string formatManifest(const ShardManifest& manifest) {
  std::string text = fmt::format("{}\nimages {} {} {}\n", kManifestHeader, manifest.rows,
                                 manifest.cols, manifest.classes);
  auto add = [&](const char* split, const std::vector<ShardInfo>& shards) {
    for (const ShardInfo& s : shards) {
      text += fmt::format("{} {} {} {} {:08x}\n", split, s.name, s.samples, s.bytes, s.crc32);
    }
  };
  add("train", manifest.train);
  add("test", manifest.test);
  return text;
}

ShardManifest parseManifest(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line) || line != kManifestHeader) {
    failShard(what, fmt::format("not a gradsync shard manifest (first line '{}', expected '{}')",
                                line.substr(0, 80), kManifestHeader));
  }
  ShardManifest manifest;
  int lineNo = 1;
  while (std::getline(in, line)) {
    ++lineNo;
    if (line.empty()) continue;
    std::istringstream fields(line);
    std::string kind;
    fields >> kind;
    bool ok = false;
    if (kind == "images") {
      ok = static_cast<bool>(fields >> manifest.rows >> manifest.cols >> manifest.classes) &&
           manifest.rows > 0 && manifest.cols > 0 && manifest.classes > 0 &&
           manifest.classes <= 256;
    } else if (kind == "train" || kind == "test") {
      ShardInfo s;
      ok = static_cast<bool>(fields >> s.name >> s.samples >> s.bytes >> std::hex >> s.crc32) &&
           s.samples > 0 && s.name.find('/') == std::string::npos && s.name != "..";
      (kind == "train" ? manifest.train : manifest.test).push_back(s);
    }
    if (!ok)
      failShard(what, fmt::format("line {} is malformed: '{}'", lineNo, line.substr(0, 120)));
  }
  if (manifest.rows == 0) failShard(what, "no 'images' line");
  if (manifest.train.empty()) failShard(what, "no training shard");
  return manifest;
}

ShardManifest writeShards(const ImageSet& train, const ImageSet& test, int classes,
                          int64_t samplesPerShard, const std::string& outDir) {
  if (samplesPerShard < 1) {
    throw ConfigError("samples per shard must be at least 1", {.operation = "write shards"});
  }
  std::filesystem::create_directories(outDir);
  ShardManifest manifest{.rows = train.rows, .cols = train.cols, .classes = classes};
  auto split = [&](const ImageSet& set, const char* prefix, std::vector<ShardInfo>& shards) {
    for (int64_t first = 0; first < set.count; first += samplesPerShard) {
      const int64_t count = std::min(samplesPerShard, set.count - first);
      std::vector<uint8_t> bytes = encodeShard(set, first, count);
      ShardInfo info{fmt::format("{}-{:05}.gss", prefix, shards.size()), count, bytes.size(),
                     crc32Of(bytes)};
      writeFile(outDir + "/" + info.name, bytes);
      shards.push_back(info);
    }
  };
  split(train, "train", manifest.train);
  split(test, "test", manifest.test);
  const std::string text = formatManifest(manifest);
  writeFile(outDir + "/manifest.txt",
            std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  return manifest;
}

}  // namespace gradsync
