// Writes the fuzzers' seed corpora: small valid inputs made by the project's own writers and
// encoders, so that the fuzzers start from inputs that get past the first checks, and the seeds
// follow a change of format. `make_seeds DIR` writes DIR/<fuzzer>/<seed>; the committed corpora
// are tests/fuzz/corpus (docs/testing.md, "Fuzzing"). Deterministic: the same build writes the
// same bytes.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "ckpt/checkpoint_file.h"
#include "codec_cases.h"
#include "data/criteo_tsv.h"
#include "data/idx.h"
#include "gzip.h"
#include "ps/embedding_shard.h"
#include "rendezvous/tcp_store_wire.h"
#include "sim/model_profile.h"
#include "transport/tcp/frame.h"

namespace fs = std::filesystem;
using namespace gradsync;
using Bytes = std::vector<uint8_t>;

namespace {

fs::path root;

void put(const std::string& fuzzer, const std::string& name, const Bytes& bytes) {
  fs::create_directories(root / fuzzer);
  std::ofstream out(root / fuzzer / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "make_seeds: cannot write %s/%s\n", fuzzer.c_str(), name.c_str());
    std::exit(1);
  }
}

fs::path scratchDir() {
  const fs::path dir = fs::temp_directory_path() / ("gradsync-seeds-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

Bytes prefixed(uint8_t first, const Bytes& rest) {
  Bytes out{first};
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

Bytes text(const std::string& s) {
  return Bytes(s.begin(), s.end());
}

// A spec as a file name without the characters shells and make treat specially.
std::string fileName(std::string name) {
  for (char& ch : name) {
    if (ch == ':' || ch == ',' || ch == '=') ch = '_';
  }
  return name;
}

// Values like a gradient's, without a random-number library: deterministic everywhere.
std::vector<float> gradient(size_t n, size_t salt) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] =
        static_cast<float>(std::sin(0.7 * static_cast<double>(i + 1) + static_cast<double>(salt)) *
                           std::exp(-static_cast<double>(i % 17) / 5.0));
  }
  return x;
}

// Files of 0, 1 and 2 sections, written by writeCheckpointFile itself. Flag byte 0: as written;
// 1: the fuzzer recomputes the CRCs after mutating (checkpoint_fuzz.cc).
void checkpointSeeds() {
  const fs::path dir = scratchDir();
  const std::vector<std::pair<std::string, std::vector<Section>>> files = {
      {"empty", {}},
      {"one-section", {{"meta", text(R"({"step":12,"epoch":1})")}}},
      {"two-sections", {{"model", Bytes(48, 0x3f)}, {"optimizer state\n", {}}}},
  };
  for (const auto& [name, sections] : files) {
    const fs::path path = dir / name;
    writeCheckpointFile(path.string(), sections);
    std::ifstream in(path, std::ios::binary);
    const Bytes file{std::istreambuf_iterator<char>(in), {}};
    put("checkpoint_fuzz", name, prefixed(0, file));
    if (!sections.empty()) put("checkpoint_fuzz", name + "-fixcrc", prefixed(1, file));
  }
  fs::remove_all(dir);
}

Bytes idx(uint8_t dims, const std::vector<uint32_t>& sizes, const Bytes& payload) {
  Bytes out{0, 0, 0x08, dims};
  for (uint32_t size : sizes) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(size >> shift));
  }
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

// The mode byte of idx_fuzz.cc: bit 0 images, bit 1 raw (the fuzzer gzips it), bit 2 a pair.
void idxSeeds() {
  Bytes pixels(2 * 3 * 4);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 11);
  const Bytes images = idx(3, {2, 3, 4}, pixels);
  const Bytes labels = idx(1, {2}, {3, 9});
  const Bytes gz = fuzz::gzip(images, 9), labelsGzBytes = fuzz::gzip(labels, 9);
  put("idx_fuzz", "images-gz", prefixed(1, gz));
  put("idx_fuzz", "labels-gz", prefixed(0, labelsGzBytes));
  put("idx_fuzz", "images-raw", prefixed(3, images));
  put("idx_fuzz", "labels-raw", prefixed(2, labels));
  put("idx_fuzz", "empty-set-raw", prefixed(3, idx(3, {0, 28, 28}, {})));
  Bytes pair{4, static_cast<uint8_t>(images.size()), static_cast<uint8_t>(images.size() >> 8)};
  pair.insert(pair.end(), images.begin(), images.end());
  pair.insert(pair.end(), labels.begin(), labels.end());
  put("idx_fuzz", "pair", pair);
  // The pair must read back (a seed must be valid: throws if not).
  const fs::path dir = scratchDir();
  const fs::path imagesGz = dir / "images.gz", labelsGz = dir / "labels.gz";
  std::ofstream(imagesGz, std::ios::binary) << std::string(gz.begin(), gz.end());
  std::ofstream(labelsGz, std::ios::binary)
      << std::string(labelsGzBytes.begin(), labelsGzBytes.end());
  readImageSet(imagesGz.string(), labelsGz.string(), 10);
  fs::remove_all(dir);
}

ModelProfile head(const std::string& builtin, size_t layers) {
  ModelProfile profile = builtinProfile(builtin);
  profile.layers.resize(layers);
  return profile;
}

void putProfile(const std::string& name, const std::string& json) {
  profileFromJson(json, name);  // a seed must be valid: throws if not
  put("profile_fuzz", name, text(json));
}

void profileSeeds() {
  ModelProfile small;
  small.name = "mlp";
  small.device = "CPU";
  small.source = "made_seeds";
  small.batchSize = 64;
  small.updateSeconds = 1.5e-4;
  small.layers = {
      {"fc1", {tensorShape("fc1.weight", {128, 784}), tensorShape("fc1.bias", {128})}, 2e-4, 4e-4},
      {"relu", {}, 1e-6, 2e-6},
      {"fc2", {tensorShape("fc2.weight", {10, 128})}, 1e-5, 2e-5}};
  putProfile("small.json", profileToJson(small));
  putProfile("resnet50-head.json", profileToJson(head("resnet50", 3)));
  putProfile("transformer-head.json", profileToJson(head("transformer", 2)));
  // The optional fields left out, on one line.
  putProfile("minimal.json",
             R"({"name":"m","device":"d","batch_size":1,"layers":[{"name":"l","forward_s":0,)"
             R"("backward_s":0,"tensors":[{"name":"t","dims":[3]}]}]})");
}

// Every ring codec, and the pushes of the linear methods (the other pushes decode as the ring
// codecs do), at a few sizes and unit layouts; two round trips (codec_cases.h). 4200 elements
// (past one chunk of bit-packed codes) where the encoding stays small, 300 otherwise.
void codecSeeds() {
  const auto& cases = fuzz::codecCases();
  constexpr size_t kSizes[] = {1, 7, 64, 300, 4200};
  constexpr size_t kMaxSeedBytes = 2048;
  for (size_t i = 0; i < cases.size(); ++i) {
    const fuzz::CodecCase& c = cases[i];
    if (c.push && fuzz::isCodec(c.spec)) continue;
    const int layout = static_cast<int>(i % 3);
    size_t n = kSizes[i % std::size(kSizes)];
    std::vector<TensorShape> unit = fuzz::unitFor(n, layout);
    if (fuzz::CodecUnderTest(c, unit).maxBytes(n) > kMaxSeedBytes) {
      n = 300;
      unit = fuzz::unitFor(n, layout);
    }
    fuzz::CodecUnderTest codec(c, unit);
    Bytes encoding;
    codec.encode(gradient(n, i), encoding, fuzz::kPushSeed);
    std::vector<float> decoded(n);
    codec.decodeAdd(encoding, decoded, fuzz::kPushSeed);  // a seed must be valid: throws if not
    const auto header = fuzz::codecHeader(i, n, layout, false, false);
    Bytes seed(header.begin(), header.end());
    seed.insert(seed.end(), encoding.begin(), encoding.end());
    put("codec_fuzz", fileName(c.label() + "-" + std::to_string(n)), seed);
  }
  for (size_t i : {size_t{0}, cases.size() / 2}) {
    const size_t n = 37;
    const auto header = fuzz::codecHeader(i, n, 1, false, true);
    Bytes seed(header.begin(), header.end());
    seed.insert(seed.end(), {1, 2, 3, 4, 5, 6, 7, 8});  // the encoder's seed
    const std::vector<float> x = gradient(n, 99);
    const auto* bytes = reinterpret_cast<const uint8_t*>(x.data());
    seed.insert(seed.end(), bytes, bytes + x.size() * sizeof(float));
    put("codec_fuzz", fileName("roundtrip-" + cases[i].label() + "-" + std::to_string(n)), seed);
  }
  // What the fuzzer found in the int8 codec: a chunk whose scale is subnormal (1 / scale is
  // infinite, and 0 * infinity is NaN).
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].text != "int8" || !cases[i].push) continue;
    const auto header = fuzz::codecHeader(i, 5, 0, false, true);
    Bytes seed(header.begin(), header.end());
    seed.insert(seed.end(), 8, 0);
    const std::vector<float> tiny = {std::numeric_limits<float>::min() * 2, 0, 0, 0, 0};
    const auto* bytes = reinterpret_cast<const uint8_t*>(tiny.data());
    seed.insert(seed.end(), bytes, bytes + tiny.size() * sizeof(float));
    put("codec_fuzz", "roundtrip-int8-subnormal-scale", seed);
  }
}

// frame_fuzz feeds one buffer to every decoder of the TCP handshake and frames.
void frameSeeds() {
  using namespace gradsync::tcp;
  Bytes header(kFrameHeaderBytes);
  encodeFrameHeader({FrameType::kData, 7, 4096}, header.data());
  put("frame_fuzz", "frame-header", header);
  encodeFrameHeader({FrameType::kAbort, 0, 32}, header.data());
  put("frame_fuzz", "abort-header", header);
  Hello hello{.rank = 1, .size = 4, .jobId = "job-7", .nonce = {}};
  for (size_t i = 0; i < hello.nonce.size(); ++i) hello.nonce[i] = static_cast<uint8_t>(i);
  put("frame_fuzz", "hello", encodeHello(hello));
  Bytes challenge(kChallengeBytes);
  encodeChallenge({AckStatus::kOk, hello.nonce, {}}, challenge.data());
  put("frame_fuzz", "challenge", challenge);
  Bytes proof(kProofMessageBytes);
  encodeProof({AckStatus::kWrongToken, {}}, proof.data());
  put("frame_fuzz", "proof", proof);
  Bytes ack(kAckBytes);
  encodeAck(AckStatus::kDuplicateRank, ack.data());
  put("frame_fuzz", "ack", ack);
}

void storeSeeds() {
  using namespace gradsync::rendezvous::wire;
  const std::vector<std::pair<std::string, Message>> messages = {
      {"hello", Hello{"job-7", {}}},
      {"set", SetRequest{"rank/0/address", text("10.0.0.1:29500")}},
      {"get", GetRequest{"rank/1/address", 30000}},
      {"add", AddRequest{"barrier/3", -1}},
      {"wait", WaitRequest{{"a", "bb", "ccc"}, 500}},
      {"value", ValueReply{text("payload")}},
      {"timed-out", TimedOutReply{{"rank/2/address"}}},
      {"proof-refused", Proof{{}, true}},
  };
  for (const auto& [name, message] : messages) put("store_wire_fuzz", name, encodeFrame(message));
}

}  // namespace

// recommendation_fuzz.cc's inputs: a Criteo line (mode 0), and shard 1's full and partial
// saves of its small embedding (modes 1, 2) in the harness's framing.
Bytes shardSeed(uint8_t mode, const std::vector<Section>& sections) {
  const Bytes& meta = sections.front().data;
  Bytes out{mode, static_cast<uint8_t>(meta.size() & 0xff), static_cast<uint8_t>(meta.size() >> 8)};
  out.insert(out.end(), meta.begin(), meta.end());
  for (size_t i = 1; i < sections.size(); ++i) {
    out.push_back(static_cast<uint8_t>(sections[i].data.size() / 4));
  }
  for (size_t i = 1; i < sections.size(); ++i) {
    out.insert(out.end(), sections[i].data.begin(), sections[i].data.end());
  }
  return out;
}

void recommendationSeeds() {
  ClickRecord record;
  record.label = 1;
  record.counts = {3, std::nullopt, 0, -2, 120, 7, 1, std::nullopt, 44, 0, 5, 2, 9};
  record.hashes.assign(26, std::nullopt);
  for (size_t t = 0; t < 26; t += 2)
    record.hashes[t] = static_cast<uint32_t>(0x9e3779b9u * (t + 1));
  put("recommendation_fuzz", "criteo-line", prefixed(0, text(formatCriteoLine(record))));
  const EmbeddingSpec spec{.tableRows = {5, 3}, .dim = 2, .shards = 2, .seed = 1};
  EmbeddingShard shard(spec, 1, UpdateRule::adagrad(0.1));
  const std::vector<uint64_t> rows = {0, 2};
  shard.apply(rows, std::vector<float>{0.5f, -1, 2, 0.25f}, std::vector<uint32_t>{3, 1}, 0);
  put("recommendation_fuzz", "shard-full", shardSeed(1, shard.saveFull(4)));
  put("recommendation_fuzz", "shard-partial", shardSeed(2, shard.savePartial(5, rows)));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR   (writes DIR/<fuzzer>/<seed>)\n", argv[0]);
    return 2;
  }
  root = argv[1];
  checkpointSeeds();
  idxSeeds();
  profileSeeds();
  codecSeeds();
  frameSeeds();
  storeSeeds();
  recommendationSeeds();
  return 0;
}
