// Embedding tables on parameter servers: sparse rounds against a naive dense table, per-shard
// saves and restores (exact), CPR-MFU/SSU's rows, and recovery from a crashed server (partial:
// only its shard goes back, the lost updates counted exactly; full: the run repeats bitwise;
// a corrupt save is named and passed over). Servers and workers are threads; the servers' star
// transports are real TCP connections, the workers' ring is loopback.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <thread>

#include "common/random.h"
#include "gradsync/loopback.h"
#include "gradsync/store.h"
#include "ps/embedding_host.h"
#include "ps/embedding_session.h"
#include "support/rank_threads.h"

namespace gradsync {
namespace {

// A fresh directory, removed at the end.
class ScratchDir {
 public:
  ScratchDir() {
    std::string base = std::filesystem::temp_directory_path() / "gradsync-emb-XXXXXX";
    if (::mkdtemp(base.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = base;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

constexpr int kDim = 3;
constexpr size_t kBatch = 6;
constexpr double kLr = 0.1;

EmbeddingSpec smallSpec(int shards) {
  return {.tableRows = {5, 11, 1, 40}, .dim = kDim, .shards = shards, .seed = 7};
}

// The rows of worker `rank`'s batch at `step`: skewed, with repeats within a batch.
std::vector<int64_t> batchRows(const EmbeddingSpec& spec, uint64_t step, int rank) {
  std::vector<int64_t> rows;
  for (size_t i = 0; i < kBatch; ++i) {
    for (int t = 0; t < spec.tables(); ++t) {
      uint64_t h = rng::mixSeed(rng::mixSeed(step * 10 + rank, i), t);
      rows.push_back(static_cast<int64_t>((h % 3 == 0 ? h : h % 4) % spec.tableRows[t]));
    }
  }
  return rows;
}

// A gradient that depends on the pulled value (so a replay from another state differs).
float gradientOf(float value, uint64_t step, int rank, uint64_t key, int d, uint32_t uses) {
  const uint64_t h = rng::mixSeed(rng::mixSeed(step, rank), key * 8 + d);
  return 0.3f * value + static_cast<float>(uses) * (rng::unitFloat(h) - 0.5f);
}

// The naive reference: every row of every table in one map, rounds applied as the servers must.
struct Reference {
  EmbeddingSpec spec;
  UpdateRule rule = UpdateRule::adagrad(kLr);
  std::map<uint64_t, std::pair<std::vector<float>, std::vector<float>>> rows;  // value, sum
  std::map<uint64_t, uint64_t> accesses;

  explicit Reference(EmbeddingSpec s) : spec(std::move(s)) {
    for (int t = 0; t < spec.tables(); ++t) {
      for (uint64_t r = 0; r < spec.tableRows[t]; ++r) {
        std::vector<float> v(kDim);
        initialRow(spec, t, r, v);
        rows[rowKey(t, r)] = {v, std::vector<float>(kDim, 0.0f)};
      }
    }
  }
  // One round of every worker; `apply(key)`: whether the row's shard applies it.
  void round(uint64_t step, int workers, const std::function<bool(uint64_t)>& apply) {
    std::map<uint64_t, std::pair<std::vector<float>, uint32_t>> sums;
    for (int w = 0; w < workers; ++w) {
      EmbeddingBatch b = EmbeddingBatch::of(spec, batchRows(spec, step, w), kBatch);
      for (int t = 0; t < spec.tables(); ++t) {
        for (size_t i = 0; i < b.rows[t].size(); ++i) {
          const uint64_t key = rowKey(t, b.rows[t][i]);
          auto& [sum, uses] = sums[key];
          const bool first = sum.empty();  // the first worker (in worker order) with this row
          sum.resize(kDim, 0.0f);
          for (int d = 0; d < kDim; ++d) {
            const float g = gradientOf(rows[key].first[d], step, w, key, d, b.uses[t][i]);
            sum[d] = first ? g : sum[d] + g;
          }
          uses += b.uses[t][i];
        }
      }
    }
    for (auto& [key, entry] : sums) {
      if (!apply(key)) continue;
      for (float& g : entry.first) g *= 1.0f / static_cast<float>(workers);
      applyUpdate(rule, rows[key].first, entry.first, {rows[key].second, {}}, 1);
      accesses[key] += entry.second;
    }
  }
};

struct Plan {
  int workers = 2;
  int shards = 2;
  int steps = 10;
  RecoveryMode mode = RecoveryMode::kPartial;
  int saveEvery = 0;                        // 0: no checkpoints
  std::vector<std::vector<double>> deaths;  // per shard
  std::string root;
  std::function<void(int64_t)> beforeRecovery;  // worker 0, before it asks (e.g. corrupt a file)
};

struct Outcome {
  std::map<uint64_t, std::vector<float>> rows;  // worker 0's reads at the end
  RecoveryLedger ledger{0};
  std::vector<RecoveryEvent> events;
};

std::map<uint64_t, std::vector<float>> readAll(EmbeddingSession& session, const EmbeddingSpec& spec,
                                               uint64_t step) {
  std::vector<int64_t> all;
  uint64_t widest = 0;
  for (uint64_t n : spec.tableRows) widest = std::max(widest, n);
  for (uint64_t r = 0; r < widest; ++r) {
    for (int t = 0; t < spec.tables(); ++t)
      all.push_back(static_cast<int64_t>(r % spec.tableRows[t]));
  }
  EmbeddingBatch b = EmbeddingBatch::of(spec, all, widest);
  std::vector<std::vector<float>> values;
  session.client().read(step, session.epoch(), b, values);
  std::map<uint64_t, std::vector<float>> rows;
  for (int t = 0; t < spec.tables(); ++t) {
    for (size_t i = 0; i < b.rows[t].size(); ++i) {
      rows[rowKey(t, b.rows[t][i])].assign(values[t].begin() + i * kDim,
                                           values[t].begin() + (i + 1) * kDim);
    }
  }
  return rows;
}

void trainWorker(const Plan& run, const EmbeddingSpec& spec, Store& store, Transport& ring,
                 Outcome& outcome) {
  const int rank = ring.rank();
  TcpTransportOptions tcp;
  tcp.transport.timeout = std::chrono::seconds(20);
  EmbeddingLinks links(store, tcp, run.workers, rank);
  EmbeddingClient client(spec, run.workers, rank, links);
  RecoveryLedger ledger(run.shards);
  EmbeddingSession session(ring, client,
                           {run.mode, run.root, run.root + "/dense", kBatch * run.workers}, ledger);
  CheckpointDir dense(run.root.empty() ? "/nonexistent" : run.root + "/dense", 100);
  auto saveFlags = [&](uint64_t step) -> uint32_t {
    return run.saveEvery > 0 && step % run.saveEvery == 0 ? uint32_t{kSaveFull} : 0u;
  };
  if (rank == 0 && run.saveEvery > 0) dense.write(0, {});
  std::vector<std::vector<float>> values, gradients;
  for (uint64_t step = 0; step < static_cast<uint64_t>(run.steps);) {
    EmbeddingBatch batch = EmbeddingBatch::of(spec, batchRows(spec, step, rank), kBatch);
    auto agreement = session.pull(step, step == 0 ? saveFlags(0) : 0, batch, values, false);
    if (!agreement.failed.empty()) {
      if (rank == 0 && run.beforeRecovery) run.beforeRecovery(static_cast<int64_t>(step));
      RecoveryEvent e = isPartial(run.mode) ? session.resume(agreement.failed, step)
                                            : session.rollBack(agreement.failed, step,
                                                               [](int64_t) { return true; });
      if (rank == 0) outcome.events.push_back(e);  // every worker sees the same
      if (e.full) step = static_cast<uint64_t>(e.restoredTo);
      continue;
    }
    gradients.resize(values.size());
    for (int t = 0; t < spec.tables(); ++t) {
      gradients[t].resize(values[t].size());
      for (size_t i = 0; i < batch.rows[t].size(); ++i) {
        for (int d = 0; d < kDim; ++d) {
          gradients[t][i * kDim + d] = gradientOf(values[t][i * kDim + d], step, rank,
                                                  rowKey(t, batch.rows[t][i]), d, batch.uses[t][i]);
        }
      }
    }
    const uint32_t flags = saveFlags(step + 1);
    if (rank == 0 && flags) dense.write(static_cast<int64_t>(step + 1), {});
    session.push(step, flags, static_cast<double>(step), batch, gradients);
    ++step;
  }
  if (rank == 0) {
    outcome.rows = readAll(session, spec, static_cast<uint64_t>(run.steps));
    outcome.ledger = ledger;
  }
}

Outcome train(const Plan& run) {
  const EmbeddingSpec spec = smallSpec(run.shards);
  std::shared_ptr<Store> store = makeInMemoryStore();
  LoopbackFabric fabric(run.workers);
  Outcome outcome;
  std::vector<std::thread> servers;
  std::vector<std::exception_ptr> serverErrors(run.shards);
  for (int s = 0; s < run.shards; ++s) {
    servers.emplace_back([&, s] {
      try {
        TcpTransportOptions tcp;
        tcp.transport.timeout = std::chrono::seconds(20);
        EmbeddingLinks links(*store, tcp, run.workers, 0);
        EmbeddingHostOptions host;
        host.server = {.spec = spec,
                       .shard = s,
                       .workers = run.workers,
                       .rule = UpdateRule::adagrad(kLr),
                       .mode = run.mode,
                       .checkpointRoot = run.root,
                       .timeout = std::chrono::seconds(20)};
        if (static_cast<size_t>(s) < run.deaths.size()) host.deaths = run.deaths[s];
        hostEmbeddingThread(links, host, true);
      } catch (...) {
        serverErrors[s] = std::current_exception();
      }
    });
  }
  testing::runRankThreads(run.workers, [&](int rank) {
    auto ring = fabric.connect(rank);
    trainWorker(run, spec, *store, *ring, outcome);
  });
  for (auto& t : servers) t.join();
  for (auto& e : serverErrors) {
    if (e) std::rethrow_exception(e);
  }
  return outcome;
}

// The local rows a partial save holds.
std::vector<uint64_t> valuesOfRows(const LoadedCheckpoint& save) {
  const auto& bytes = findSection(save.sections, "rows").data;
  std::vector<uint64_t> rows(bytes.size() / sizeof(uint64_t));
  std::memcpy(rows.data(), bytes.data(), bytes.size());
  return rows;
}

void expectRowsEqual(const std::map<uint64_t, std::vector<float>>& got, const Reference& ref) {
  ASSERT_EQ(got.size(), ref.rows.size());
  for (const auto& [key, value] : ref.rows) {
    ASSERT_EQ(got.at(key), value.first) << "table " << tableOfKey(key) << " row " << rowOfKey(key);
  }
}

TEST(EmbeddingServers, SparseRoundsMatchANaiveTable) {
  for (auto [workers, shards] : {std::pair{1, 1}, {2, 3}, {3, 2}}) {
    SCOPED_TRACE(::testing::Message() << workers << " workers, " << shards << " servers");
    Outcome out = train({.workers = workers, .shards = shards, .steps = 6});
    Reference ref(smallSpec(shards));
    for (uint64_t step = 0; step < 6; ++step)
      ref.round(step, workers, [](uint64_t) { return true; });
    expectRowsEqual(out.rows, ref);
  }
}

// Server 1 crashes at the push of round 6 (clock = step); saves every 4 steps. The workers find it
// at round 7's pull; its replacement loads step 4's save: rounds 4-6 are lost on its rows only.
TEST(EmbeddingServers, PartialRecoveryRestoresOnlyTheFailedShard) {
  ScratchDir dir;
  Plan run{.workers = 2,
           .shards = 2,
           .steps = 11,
           .mode = RecoveryMode::kPartial,
           .saveEvery = 4,
           .deaths = {{}, {5.5}},
           .root = dir.path()};
  Outcome out = train(run);
  const EmbeddingSpec spec = smallSpec(2);
  Reference ref(spec);
  auto onShard1 = [](uint64_t key) { return rowOfKey(key) % 2 == 1; };
  std::map<uint64_t, std::pair<std::vector<float>, std::vector<float>>> saved;
  std::map<uint64_t, uint64_t> savedAccesses;
  uint64_t pushed = 0;  // accesses pushed to shard 1
  for (uint64_t step = 0; step < 11; ++step) {
    if (step == 4) {
      saved = ref.rows;
      savedAccesses = ref.accesses;
    }
    if (step == 7) {  // the replacement: shard 1's rows as saved at step 4
      for (auto& [key, row] : ref.rows) {
        if (onShard1(key)) row = saved[key];
      }
      for (auto& [key, a] : ref.accesses) {
        if (onShard1(key)) a = savedAccesses.count(key) ? savedAccesses[key] : 0;
      }
    }
    if (step <= 6) {
      for (int w = 0; w < 2; ++w) {
        EmbeddingBatch b = EmbeddingBatch::of(spec, batchRows(spec, step, w), kBatch);
        for (uint32_t a : b.accesses(1)) pushed += a;
      }
    }
    ref.round(step, 2, [&](uint64_t key) { return !(step == 6 && onShard1(key)); });
  }
  expectRowsEqual(out.rows, ref);
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_EQ(out.events[0].servers, std::vector<int>{1});
  EXPECT_EQ(out.events[0].step, 7);
  EXPECT_EQ(out.ledger.failures, 1);
  EXPECT_EQ(out.ledger.lostSamples, (std::vector<uint64_t>{0, 3 * 2 * kBatch}));  // rounds 4-6
  uint64_t held = 0;
  for (auto& [key, a] : savedAccesses) held += onShard1(key) ? a : 0;
  EXPECT_EQ(out.ledger.lostAccesses, (std::vector<uint64_t>{0, pushed - held}));
  EXPECT_GT(pushed - held, 0u);
}

// The same failure under full recovery: everyone goes back to step 4 and trains again, so the
// end is bitwise the run without a failure.
TEST(EmbeddingServers, FullRecoveryRepeatsTheRunBitwise) {
  ScratchDir dir;
  Plan run{.workers = 3,
           .shards = 2,
           .steps = 11,
           .mode = RecoveryMode::kFull,
           .saveEvery = 4,
           .deaths = {{}, {5.5}},
           .root = dir.path()};
  Outcome out = train(run);
  Reference ref(smallSpec(2));
  for (uint64_t step = 0; step < 11; ++step) ref.round(step, 3, [](uint64_t) { return true; });
  expectRowsEqual(out.rows, ref);
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_TRUE(out.events[0].full);
  EXPECT_EQ(out.events[0].restoredTo, 4);
  EXPECT_EQ(out.ledger.redoneSteps, 3u);
}

// Before the replacement loads, its newest save (step 4) is damaged: the error names the shard
// and the file, and step 0's save is used instead (rounds 0-6 lost on that shard).
TEST(EmbeddingServers, CorruptShardSaveIsNamedAndThePreviousOneUsed) {
  ScratchDir dir;
  std::string corrupted;
  Plan run{.workers = 2,
           .shards = 2,
           .steps = 9,
           .mode = RecoveryMode::kPartial,
           .saveEvery = 4,
           .deaths = {{}, {5.5}},
           .root = dir.path()};
  run.beforeRecovery = [&](int64_t) {
    corrupted = ShardCheckpoints(dir.path(), 1).fullPath(4);
    std::filesystem::resize_file(corrupted, std::filesystem::file_size(corrupted) - 3);
  };
  Outcome out = train(run);
  const EmbeddingSpec spec = smallSpec(2);
  Reference ref(spec);
  Reference initial(spec);
  for (uint64_t step = 0; step < 9; ++step) {
    if (step == 7) {
      for (auto& [key, row] : ref.rows) {
        if (rowOfKey(key) % 2 == 1) row = initial.rows[key];
      }
    }
    ref.round(step, 2, [&](uint64_t key) { return !(step == 6 && rowOfKey(key) % 2 == 1); });
  }
  expectRowsEqual(out.rows, ref);
  EXPECT_EQ(out.ledger.lostSamples[1], 7 * 2 * kBatch);  // since step 0's save
  ASSERT_FALSE(corrupted.empty());
  ASSERT_EQ(out.events.size(), 1u);
  EXPECT_NE(out.events[0].notes.find("shard 1"), std::string::npos) << out.events[0].notes;
  EXPECT_NE(out.events[0].notes.find(corrupted), std::string::npos) << out.events[0].notes;
}

// Per-shard saves restore exactly (values, Adagrad's sums, access counts); MFU and SSU write
// exactly the rows their rules pick.
TEST(EmbeddingShard, SavesRestoreExactlyAndPartialSavesHoldTheChosenRows) {
  ScratchDir dir;
  const EmbeddingSpec spec = smallSpec(2);
  EmbeddingShard shard(spec, 1, UpdateRule::adagrad(kLr));
  shard.enableSubSample(0.3, 5);
  std::vector<uint64_t> locals(shard.rows());
  std::iota(locals.begin(), locals.end(), 0);
  std::mt19937 random(3);
  auto update = [&](uint64_t round) {
    std::vector<uint64_t> rows;
    std::vector<uint32_t> accesses;
    std::vector<float> gradients;
    for (uint64_t r : locals) {
      if (random() % 3 == 0) continue;
      rows.push_back(r);
      accesses.push_back(1 + random() % (r < 4 ? 20 : 2));  // the first rows are hot
      for (int d = 0; d < kDim; ++d)
        gradients.push_back(static_cast<float>(random() % 100) / 50 - 1);
    }
    shard.apply(rows, gradients, accesses, round);
  };
  ShardCheckpoints files(dir.path(), 1);
  update(0);
  files.writeFull(1, shard.saveFull(1));
  update(1);
  update(2);
  // MFU: the quarter of the rows with the most accesses since their last save.
  std::vector<uint32_t> pending;
  for (uint64_t r : locals) pending.push_back(shard.pending(r));
  const std::vector<uint64_t> mfu = shard.mostUsed(0.25);
  EXPECT_EQ(mfu, mostUsedRows(pending, 0.25));
  files.writePartial(3, shard.savePartial(3, mfu));
  EXPECT_EQ(valuesOfRows(files.loadNewest().partials.at(0)), mfu);
  update(3);
  // SSU: the rows sampled since (each access at rate 0.3, by the hash of seed, round and row).
  std::vector<uint64_t> ssu = shard.takeSubSample();
  EXPECT_FALSE(ssu.empty());
  files.writePartial(4, shard.savePartial(4, ssu));
  EXPECT_EQ(valuesOfRows(files.loadNewest().partials.at(1)), ssu);
  // A fresh shard restored from the files equals the saved state exactly.
  std::vector<float> before(shard.rows() * kDim);
  shard.gather(locals, before);
  EmbeddingShard restored(spec, 1, UpdateRule::adagrad(kLr));
  ShardRestore r = files.loadNewest();
  restored.restore(r.full, r.partials);
  // Rows saved last (MFU's at 3, SSU's at 4) hold their newest values; the others step 1's.
  EmbeddingShard expected(spec, 1, UpdateRule::adagrad(kLr));
  expected.restore(files.loadFullAt(1), {});
  std::vector<float> got(shard.rows() * kDim), want(shard.rows() * kDim);
  restored.gather(locals, got);
  expected.gather(locals, want);
  for (uint64_t row : locals) {
    const bool newer = std::binary_search(mfu.begin(), mfu.end(), row) ||
                       std::binary_search(ssu.begin(), ssu.end(), row);
    if (newer) continue;
    for (int d = 0; d < kDim; ++d) EXPECT_EQ(got[row * kDim + d], want[row * kDim + d]) << row;
  }
  for (uint64_t row : ssu) {  // saved at 4, after the last update: equal to the live shard
    for (int d = 0; d < kDim; ++d) EXPECT_EQ(got[row * kDim + d], before[row * kDim + d]) << row;
  }
  // The optimizer state too: one more identical update keeps the two shards identical.
  EmbeddingShard live(spec, 1, UpdateRule::adagrad(kLr));
  live.restore(files.loadFullAt(1), {});
  std::vector<float> g(kDim, 0.5f);
  live.apply({&locals[0], 1}, g, std::vector<uint32_t>{1}, 9);
  expected.apply({&locals[0], 1}, g, std::vector<uint32_t>{1}, 9);
  std::vector<float> a(kDim), b(kDim);
  live.gather({&locals[0], 1}, a);
  expected.gather({&locals[0], 1}, b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(live.accessesHeld(), expected.accessesHeld());
}

TEST(EmbeddingShard, RefusesASaveOfAnotherEmbedding) {
  ScratchDir dir;
  EmbeddingShard shard(smallSpec(2), 1, UpdateRule::adagrad(kLr));
  ShardCheckpoints files(dir.path(), 1);
  files.writeFull(1, shard.saveFull(1));
  EmbeddingSpec wider = smallSpec(2);
  wider.dim = kDim + 1;
  EmbeddingShard other(wider, 1, UpdateRule::adagrad(kLr));
  try {
    other.restore(files.loadFullAt(1), {});
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("shard 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("dim"), std::string::npos) << e.what();
  }
  EmbeddingShard sgd(smallSpec(2), 1, UpdateRule::sgd(kLr));
  EXPECT_THROW(sgd.restore(files.loadFullAt(1), {}), DataError);
}

}  // namespace
}  // namespace gradsync
