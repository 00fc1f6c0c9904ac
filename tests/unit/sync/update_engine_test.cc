// The engine's update mode (p3, sharded) against naive SGD on naively averaged gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "common/tags.h"
#include "gradsync/error.h"
#include "support/transports.h"
#include "sync/engine.h"

namespace gradsync::testing {
namespace {

// Sizes 0, 1, a non-divisible matrix cut into row slices, and a larger tensor.
const std::vector<TensorShape> kUpdateTensors = {
    tensorShape("conv.weight", {7, 3, 3, 3}), tensorShape("conv.bias", {1}),
    tensorShape("empty", {0}), tensorShape("fc.weight", {10, 1001}), tensorShape("fc.bias", {10})};
constexpr double kUpdateLr = 0.1;
constexpr double kUpdateMomentum = 0.9;

float updateGradient(int rank, size_t tensor, size_t i, int step) {
  return std::sin(static_cast<float>(i + 31 * tensor + 7 * rank + 13 * step)) / 4;
}

float initial(size_t tensor, size_t i) {
  return std::cos(static_cast<float>(i + 3 * tensor));
}

struct Model {
  std::vector<std::vector<float>> parameters;
  std::vector<std::vector<float>> velocity;
};

Model initialModel() {
  Model model;
  for (size_t t = 0; t < kUpdateTensors.size(); ++t) {
    model.parameters.emplace_back(kUpdateTensors[t].elements);
    model.velocity.emplace_back(kUpdateTensors[t].elements, 0.0f);
    for (size_t i = 0; i < kUpdateTensors[t].elements; ++i) model.parameters[t][i] = initial(t, i);
  }
  return model;
}

// SGD with momentum on the exact average, `steps` times.
Model reference(int ranks, int steps) {
  Model model = initialModel();
  for (int step = 0; step < steps; ++step) {
    for (size_t t = 0; t < kUpdateTensors.size(); ++t) {
      for (size_t i = 0; i < kUpdateTensors[t].elements; ++i) {
        double sum = 0;
        for (int r = 0; r < ranks; ++r) sum += updateGradient(r, t, i, step);
        float& v = model.velocity[t][i];
        v = static_cast<float>(kUpdateMomentum * v + sum / ranks);
        model.parameters[t][i] -= static_cast<float>(kUpdateLr * v);
      }
    }
  }
  return model;
}

void expectClose(const std::vector<float>& actual, const std::vector<float>& expected,
                 const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], 1e-5 + 1e-5 * std::fabs(expected[i])) << what << " " << i;
  }
}

using Param = std::tuple<std::string, std::string, int, TransportKind>;  // schedule, sync, P

class UpdateEngine : public ::testing::TestWithParam<Param> {
 protected:
  EngineOptions options() const {
    return {.schedule = ScheduleSpec::parse(std::get<0>(GetParam())),
            .update = UpdateRule::sgd(kUpdateLr, kUpdateMomentum),
            .sharded = std::get<1>(GetParam()) == "sharded"};
  }
  int ranks() const { return std::get<2>(GetParam()); }
};

// Three steps; each rank produces its gradients in its own order and the next step's "forward"
// waits tensor by tensor, input layer first, as the trainer's pre-hooks do.
TEST_P(UpdateEngine, AppliesSgdOnTheAverage) {
  constexpr int kSteps = 3;
  Model expected = reference(ranks(), kSteps);
  runWithTransports(std::get<3>(GetParam()), ranks(), [&](Transport& t) {
    Model model = initialModel();
    std::vector<std::span<float>> spans(model.parameters.begin(), model.parameters.end());
    Engine engine(t, kUpdateTensors, options(), spans);
    ASSERT_TRUE(Engine::updatesParameters(options()));
    std::vector<int> order = {4, 3, 2, 1, 0};
    if (t.rank() == 1) order = {1, 4, 0, 3, 2};
    for (int step = 0; step < kSteps; ++step) {
      for (int tensor = 0; tensor < 5; ++tensor) engine.waitFor(tensor);
      for (int tensor : order) {
        std::span<float> slot = engine.slot(tensor);
        for (size_t i = 0; i < slot.size(); ++i)
          slot[i] = updateGradient(t.rank(), tensor, i, step);
        engine.markReady(tensor);
      }
      engine.endBackward();
    }
    engine.drain();
    for (size_t tensor = 0; tensor < kUpdateTensors.size(); ++tensor) {
      expectClose(model.parameters[tensor], expected.parameters[tensor],
                  kUpdateTensors[tensor].name);
    }
    std::vector<float> velocity = engine.optimizerState();
    std::vector<float> expectedVelocity;
    for (const auto& v : expected.velocity)
      expectedVelocity.insert(expectedVelocity.end(), v.begin(), v.end());
    expectClose(velocity, expectedVelocity, "velocity");
    if (t.size() > 1) {
      EXPECT_GT(engine.totals().denseBytes, 0u);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Modes, UpdateEngine,
    ::testing::Values(Param{"p3:slice=1000,window=1", "ssgd", 3, TransportKind::kLoopback},
                      Param{"p3:slice=1000,window=3", "ssgd", 2, TransportKind::kTcp},
                      Param{"p3:slice=5", "ssgd", 1, TransportKind::kLoopback},
                      Param{"p3", "ssgd", 3, TransportKind::kTcp},
                      Param{"wfbp", "sharded", 3, TransportKind::kLoopback},
                      Param{"wfbp", "sharded", 2, TransportKind::kTcp},
                      Param{"fusion:0.01", "sharded", 3, TransportKind::kTcp},
                      Param{"fifo", "sharded", 1, TransportKind::kLoopback}),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_" + std::get<1>(info.param) + "_" +
                         std::to_string(std::get<2>(info.param)) + "_" +
                         kindName(std::get<3>(info.param));
      std::replace_if(
          name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
      return name;
    });

// Passes everything through to a transport and counts the messages a unit's stream
// (tags::kGradientUnits + u) started while another unit's stream still had one in flight: more
// than zero means two units' collectives ran at the same time.
// Counts the collectives started on one unit's stream while another unit's is unfinished. Its
// first sends on unit streams are held back, so that whether units can be in flight at once
// does not depend on how fast this machine's threads run: while the first unit's first message
// waits, the test marks the other units ready, and an engine that may run them concurrently
// starts them (without the wait, a quiet machine finished each tiny unit before the next was
// marked ready, and saw no overlap).
class StreamOverlaps final : public Transport {
 public:
  explicit StreamOverlaps(Transport& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  const TransportOptions& options() const override { return inner_.options(); }
  WorkPtr send(int peer, uint64_t tag, const void* data, size_t bytes) override {
    if (tag >= tags::kGradientUnits && heldBack_.fetch_add(1) < kHeldBack) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return note(tag, inner_.send(peer, tag, data, bytes));
  }
  WorkPtr recv(int peer, uint64_t tag, void* data, size_t bytes) override {
    return note(tag, inner_.recv(peer, tag, data, bytes));
  }
  void abort(std::exception_ptr error) override { inner_.abort(std::move(error)); }
  uint64_t bytesSent() const override { return inner_.bytesSent(); }
  size_t messageOverheadBytes() const override { return inner_.messageOverheadBytes(); }

  int overlaps() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return overlaps_;
  }

 private:
  WorkPtr note(uint64_t tag, WorkPtr work) {
    if (tag < tags::kGradientUnits) return work;
    std::lock_guard<std::mutex> lock(mutex_);
    bool others = false;
    for (auto& [other, works] : pending_) {
      std::erase_if(works, [](const WorkPtr& w) { return w->done(); });
      others = others || (other != tag && !works.empty());
    }
    overlaps_ += others;
    pending_[tag].push_back(work);
    return work;
  }
  static constexpr int kHeldBack = 2;
  Transport& inner_;
  std::atomic<int> heldBack_{0};
  mutable std::mutex mutex_;
  std::map<uint64_t, std::vector<WorkPtr>> pending_;  // by stream: started, maybe not done
  int overlaps_ = 0;
};

// p3's committed slices in flight at once (one communication thread per slice of the window, each
// on its unit's stream) end with the same bits as one slice at a time: each slice's collective
// and update are the same operations either way, dense and compressed (the compressors' seeds
// and top-k budgets do not depend on timing). And they do overlap, where serial ones never do.
TEST(UpdateEngine, ConcurrentSlicesGiveTheBitsOfOneAtATime) {
  constexpr int kSteps = 3;
  for (const char* compress : {"none", "topk:0.05", "qsgd:8"}) {
    for (TransportKind kind : {TransportKind::kLoopback, TransportKind::kTcp}) {
      std::map<std::string, std::vector<std::vector<float>>> results;  // by schedule
      for (const char* schedule :
           {"p3:slice=500,window=4,concurrent=1", "p3:slice=500,window=4,concurrent=0"}) {
        std::mutex mutex;
        const bool concurrent = std::string(schedule).ends_with("=1");
        runWithTransports(kind, 3, [&](Transport& real) {
          StreamOverlaps t(real);
          Model model = initialModel();
          std::vector<std::span<float>> spans(model.parameters.begin(), model.parameters.end());
          EngineOptions options{.schedule = ScheduleSpec::parse(schedule),
                                .compression = {.spec = compress, .minElements = 100},
                                .update = UpdateRule::sgd(kUpdateLr, kUpdateMomentum)};
          Engine engine(t, kUpdateTensors, options, spans);
          for (int step = 0; step < kSteps; ++step) {
            for (int tensor = 0; tensor < 5; ++tensor) engine.waitFor(tensor);
            for (int tensor = 4; tensor >= 0; --tensor) {
              std::span<float> slot = engine.slot(tensor);
              for (size_t i = 0; i < slot.size(); ++i)
                slot[i] = updateGradient(t.rank(), tensor, i, step);
              engine.markReady(tensor);
            }
            engine.endBackward();
          }
          engine.drain();
          if (concurrent) {
            EXPECT_GT(t.overlaps(), 0) << compress << " rank " << t.rank();
          } else {
            EXPECT_EQ(t.overlaps(), 0) << compress << " rank " << t.rank();
          }
          std::lock_guard<std::mutex> lock(mutex);
          if (t.rank() == 1) results[schedule] = model.parameters;
        });
      }
      const auto& a = results["p3:slice=500,window=4,concurrent=1"];
      const auto& b = results["p3:slice=500,window=4,concurrent=0"];
      ASSERT_EQ(a.size(), kUpdateTensors.size());
      for (size_t tensor = 0; tensor < kUpdateTensors.size(); ++tensor) {
        EXPECT_EQ(a[tensor], b[tensor])
            << compress << " " << kindName(kind) << " " << kUpdateTensors[tensor].name;
      }
    }
  }
}

// sharded with the FC exchange's weights: fc.weight (10 x 1001) arrives averaged over each
// rank's own columns (what the exchange computes; here the exact average, written by the test),
// is updated by columns and allgathered by columns: naive SGD on the average, as for every other
// sharded tensor; odd world sizes give uneven column blocks. The velocity gathered for a
// checkpoint (by columns) is the reference's, and goes back in.
TEST(UpdateEngine, ShardedExchangedWeightsAreUpdatedByColumns) {
  constexpr int kSteps = 3;
  constexpr int kWeight = 3;  // fc.weight
  for (int ranks : {1, 2, 3}) {
    Model expected = reference(ranks, kSteps);
    runWithTransports(TransportKind::kLoopback, ranks, [&](Transport& t) {
      Model model = initialModel();
      std::vector<std::span<float>> spans(model.parameters.begin(), model.parameters.end());
      EngineOptions options{.schedule = ScheduleSpec::parse("wfbp"),
                            .update = UpdateRule::sgd(kUpdateLr, kUpdateMomentum),
                            .sharded = true,
                            .exchanged = {{.tensor = kWeight, .columns = 1001}}};
      Engine engine(t, kUpdateTensors, options, spans);
      const Block own = blockOf(1001, t.size(), t.rank());
      for (int step = 0; step < kSteps; ++step) {
        for (int tensor = 0; tensor < 5; ++tensor) engine.waitFor(tensor);
        for (int tensor = 4; tensor >= 0; --tensor) {
          std::span<float> slot = engine.slot(tensor);
          for (size_t i = 0; i < slot.size(); ++i) {
            if (tensor != kWeight) {
              slot[i] = updateGradient(t.rank(), tensor, i, step);
              continue;
            }
            const size_t column = i % 1001;
            if (column < own.begin || column >= own.end) {
              slot[i] = std::nanf("");  // not ours: must never be read
              continue;
            }
            double sum = 0;
            for (int r = 0; r < t.size(); ++r) sum += updateGradient(r, tensor, i, step);
            slot[i] = static_cast<float>(sum / t.size());
          }
          engine.markReady(tensor);
        }
        engine.endBackward();
      }
      engine.drain();
      for (size_t tensor = 0; tensor < kUpdateTensors.size(); ++tensor) {
        expectClose(model.parameters[tensor], expected.parameters[tensor],
                    kUpdateTensors[tensor].name);
      }
      std::vector<float> velocity = engine.optimizerState();
      std::vector<float> expectedVelocity;
      for (const auto& v : expected.velocity)
        expectedVelocity.insert(expectedVelocity.end(), v.begin(), v.end());
      expectClose(velocity, expectedVelocity, "velocity");
      engine.setOptimizerState(velocity);
      EXPECT_EQ(engine.optimizerState(), velocity);
    });
  }
}

// sharded:concurrent=N: units' reduce-scatters and allgathers in flight at once (a unit's
// allgather still after its own reduce-scatter) end with the bits of one at a time, and do
// overlap somewhere in the job. Not necessarily on every rank: a rank whose left neighbour's
// messages of a unit have all arrived before it starts the next unit sees nothing pending
// (clean-clone runs saw ranks 0 and 1 overlap and rank 2 not, twice); one at a time, no rank may.
TEST(UpdateEngine, ConcurrentShardedGivesTheBitsOfOneAtATime) {
  constexpr int kSteps = 3;
  for (TransportKind kind : {TransportKind::kLoopback, TransportKind::kTcp}) {
    std::map<size_t, std::vector<std::vector<float>>> results;  // by concurrency
    for (size_t concurrent : {size_t{1}, size_t{3}}) {
      std::mutex mutex;
      int overlaps = 0;  // over every rank
      runWithTransports(kind, 3, [&](Transport& real) {
        StreamOverlaps t(real);
        Model model = initialModel();
        std::vector<std::span<float>> spans(model.parameters.begin(), model.parameters.end());
        EngineOptions options{.schedule = ScheduleSpec::parse("wfbp"),
                              .update = UpdateRule::sgd(kUpdateLr, kUpdateMomentum),
                              .sharded = true,
                              .concurrent = concurrent};
        Engine engine(t, kUpdateTensors, options, spans);
        for (int step = 0; step < kSteps; ++step) {
          for (int tensor = 0; tensor < 5; ++tensor) engine.waitFor(tensor);
          for (int tensor = 4; tensor >= 0; --tensor) {
            std::span<float> slot = engine.slot(tensor);
            for (size_t i = 0; i < slot.size(); ++i)
              slot[i] = updateGradient(t.rank(), tensor, i, step);
            engine.markReady(tensor);
          }
          engine.endBackward();
        }
        engine.drain();
        if (concurrent == 1) {
          EXPECT_EQ(t.overlaps(), 0) << "rank " << t.rank();
        }
        std::lock_guard<std::mutex> lock(mutex);
        overlaps += t.overlaps();
        if (t.rank() == 1) results[concurrent] = model.parameters;
      });
      if (concurrent > 1) {
        EXPECT_GT(overlaps, 0) << kindName(kind);
      }
    }
    for (size_t tensor = 0; tensor < kUpdateTensors.size(); ++tensor) {
      EXPECT_EQ(results[1][tensor], results[3][tensor])
          << kindName(kind) << " " << kUpdateTensors[tensor].name;
    }
  }
}

TEST(UpdateEngine, VelocityRoundTripsThroughACheckpoint) {
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& t) {
    Model model = initialModel();
    std::vector<std::span<float>> spans(model.parameters.begin(), model.parameters.end());
    EngineOptions options{.update = UpdateRule::sgd(kUpdateLr), .sharded = true};
    Engine engine(t, kUpdateTensors, options, spans);
    std::vector<float> saved(engine.layout().totalElements);
    for (size_t i = 0; i < saved.size(); ++i) saved[i] = static_cast<float>(i);
    engine.setOptimizerState(saved);
    EXPECT_EQ(engine.optimizerState(), saved);
  });
}

TEST(UpdateEngine, RefusesWhatShardedCannotRun) {
  runWithTransports(TransportKind::kLoopback, 1, [&](Transport& t) {
    Model model = initialModel();
    std::vector<std::span<float>> spans(model.parameters.begin(), model.parameters.end());
    EXPECT_THROW(
        Engine(t, kUpdateTensors, {.schedule = ScheduleSpec::parse("p3"), .sharded = true}, spans),
        ConfigError);
    EXPECT_THROW(
        Engine(t, kUpdateTensors,
               {.compression = {.spec = "topk", .minElements = 1}, .sharded = true}, spans),
        ConfigError);
  });
}

// A rank that leaves surfaces on the others' next wait, naming it: rank 0 (which picks p3's
// order) and a follower alike.
TEST(UpdateEngine, LostPeerIsRethrownNamingIt) {
  for (int leaver : {0, 1}) {
    TransportOptions options;
    options.timeout = std::chrono::milliseconds(5000);
    runWithTransports(
        TransportKind::kTcp, 2,
        [&](Transport& t) {
          if (t.rank() == leaver) return;
          Model model = initialModel();
          std::vector<std::span<float>> spans(model.parameters.begin(), model.parameters.end());
          Engine engine(
              t, kUpdateTensors,
              {.schedule = ScheduleSpec::parse("p3"), .update = UpdateRule::sgd(kUpdateLr)}, spans);
          try {
            for (int tensor = 4; tensor >= 0; --tensor) engine.markReady(tensor);
            engine.endBackward();
            engine.drain();
            FAIL() << "expected the lost peer to surface";
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(fmt::format("rank {}", leaver)), std::string::npos)
                << e.what();
          }
        },
        options);
  }
}

}  // namespace
}  // namespace gradsync::testing
