// What the members of an elastic round share (torch/elastic/state.h): rank 0's model (its
// parameters kept in their storage), optimizer state and progress reach every member, whatever
// each held before (a joiner holds no momentum yet), to a joiner straight into its tensors; and
// a member whose round fails during the transfer keeps its own state whole. An elastic checkpoint
// (torch/elastic/checkpoint.h) holds the same state and refuses another run's.
#include "torch/elastic/state.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/tags.h"
#include "gradsync/collectives.h"
#include "gradsync/error.h"
#include "support/scratch_dir.h"
#include "support/transports.h"
#include "torch/elastic/checkpoint.h"
#include "torch/elastic/plain_state.h"
#include "torch/loop/checkpointing.h"

namespace gradsync::testing {
namespace {

using namespace std::chrono_literals;

struct Member {
  std::shared_ptr<Model> net = makeModel("cnn");  // BatchNorm: buffers travel too
  torch::optim::SGD optimizer{net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  ElasticProgress progress;

  // Each rank its own: another initialisation, a step taken or not, another position.
  explicit Member(int rank) {
    initializeParameters(*net, 10 + static_cast<uint64_t>(rank));
    if (rank != 2) {  // rank 2 joins without momentum buffers
      net->train();
      torch::Tensor x = torch::full({4, 1, 28, 28}, 0.1f * static_cast<float>(rank + 1));
      optimizer.zero_grad();
      net->forward(x).sum().backward();
      optimizer.step();
    }
    progress.step = 7 * rank;
    progress.samples = 100 * rank;
    progress.data = {rank, static_cast<size_t>(64 * rank)};
    progress.epochLossSum = 1.5 * rank;
    progress.epochs.push_back({rank, 0.5, 0.25, 2.0, 1e4});
    progress.rounds.push_back({rank, 4, 0, 0, 0});
    progress.evaluations.push_back({5 * rank, 1.5, 0.75, std::nan("")});
  }

  // The member's whole state as bytes: its progress, then every parameter, buffer and
  // momentum buffer (in the optimizer's parameter order; none where it has not stepped).
  std::vector<uint8_t> bytes() {
    std::vector<uint8_t> all = encodeProgress(progress);
    auto append = [&](const torch::Tensor& t) {
      const torch::Tensor c = t.contiguous();
      const auto* data = static_cast<const uint8_t*>(c.data_ptr());
      all.insert(all.end(), data, data + c.numel() * c.element_size());
    };
    for (const torch::Tensor& t : net->parameters()) append(t);
    for (const torch::Tensor& t : net->buffers()) append(t);
    for (const torch::Tensor& p : optimizer.param_groups()[0].params()) {
      auto found = optimizer.state().find(c10::guts::to_string(p.unsafeGetTensorImpl()));
      if (found == optimizer.state().end()) continue;
      append(static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer());
    }
    return all;
  }
};

TEST(ElasticState, ProgressRoundTrips) {
  Member member(3);
  EXPECT_EQ(encodeProgress(decodeProgress(encodeProgress(member.progress))),
            encodeProgress(member.progress));
  EXPECT_THROW(decodeProgress({'{', '}'}), DataError);
}

// Rank 1 receives rank 0's state whole before it replaces its own; rank 2, a joiner (in place:
// keepOwnOnFailure false), straight into its tensors, or as rank 1 does.
void expectEveryMemberGetsRankZerosState(bool joinerInPlace) {
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& t) {
    Member member(t.rank());
    std::vector<float*> storage;
    for (const torch::Tensor& p : member.net->parameters()) storage.push_back(p.data_ptr<float>());
    const std::vector<uint8_t> before = member.bytes();
    shareState(t, *member.net, member.optimizer, member.progress, nullptr,
               !(joinerInPlace && t.rank() == 2));
    const std::vector<std::vector<uint8_t>> all = allgatherBytes(t, member.bytes());
    for (int r = 0; r < t.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r;
    if (t.rank() == 0) {
      EXPECT_EQ(all[0], before) << "rank 0 keeps its own";
    }
    EXPECT_EQ(member.progress.step, 0);
    size_t i = 0;
    for (const torch::Tensor& p : member.net->parameters()) {
      EXPECT_EQ(p.data_ptr<float>(), storage[i++]) << "a parameter moved to new storage";
    }
  });
}

TEST(ElasticState, EveryMemberGetsRankZerosState) {
  expectEveryMemberGetsRankZerosState(false);
}

TEST(ElasticState, AJoinerGetsRankZerosStateInPlace) {
  expectEveryMemberGetsRankZerosState(true);
}

// Members that already hold rank 0's state (the survivors of a failure, rolled back to the same
// commit, at its step) take only its progress: rank 2 here receives nothing of the model (and
// forwards nothing), while rank 1, at the same step with other tensors (a survivor that lost a
// step's update), hashes what it holds and gets all of it, whole or in place.
void expectOnlyTheMembersThatLackTheStateReceiveIt(bool inPlace) {
  runWithTransports(TransportKind::kLoopback, 3, [&](Transport& t) {
    Member member(t.rank() == 2 ? 0 : t.rank());  // rank 2 holds rank 0's tensors
    member.progress.step = 0;                     // every member at rank 0's step
    const uint64_t sentBefore = t.bytesSent();
    shareState(t, *member.net, member.optimizer, member.progress, nullptr,
               !(inPlace && t.rank() == 1));
    const uint64_t sent = t.bytesSent() - sentBefore;
    const std::vector<std::vector<uint8_t>> all = allgatherBytes(t, member.bytes());
    for (int r = 0; r < t.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r;
    EXPECT_EQ(member.progress.samples, 0u);
    const size_t model = all[0].size() - encodeProgress(member.progress).size();
    if (t.rank() == 0) {
      EXPECT_GE(sent, model) << "rank 1 lacked it";
      EXPECT_LT(sent, model + model / 2) << "rank 2 held it";
    } else if (t.rank() == 2) {
      EXPECT_LT(sent, 4096u) << "rank 2 held it: " << model << " bytes of model";
    }
  });
}

TEST(ElasticState, OnlyTheMembersThatLackTheStateReceiveIt) {
  expectOnlyTheMembersThatLackTheStateReceiveIt(false);
}

TEST(ElasticState, OnlyTheMembersThatLackTheStateReceiveItInPlace) {
  expectOnlyTheMembersThatLackTheStateReceiveIt(true);
}

// After the transfer every member checks by hash that it holds rank 0's state (shareState
// does); a member whose hash differs is named on every member.
TEST(ElasticState, AMemberWhoseStateIsNotRankZerosIsNamedOnEveryMember) {
  runWithTransports(TransportKind::kLoopback, 3, [](Transport& t) {
    Member member(t.rank());
    const uint32_t mine = sharedStateHash(*member.net, member.optimizer, member.progress);
    Member one(1);
    checkSameState(t,
                   t.rank() == 1 ? mine : sharedStateHash(*one.net, one.optimizer, one.progress));
    try {
      checkSameState(t, mine);
      ADD_FAILURE() << "three different states passed the check";
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1's state at the round's start is not rank 0's"),
                std::string::npos)
          << e.what();
    }
  });
}

// localsgd's and diloco's committed synchronization state comes with the rest, rank 0's to all
// (to rank 2 in place).
TEST(ElasticState, TheSynchronizationStateIsRankZeros) {
  runWithTransports(TransportKind::kLoopback, 3, [](Transport& t) {
    Member member(t.rank());
    std::vector<uint8_t> sync(static_cast<size_t>(10 + t.rank()), static_cast<uint8_t>(t.rank()));
    shareState(t, *member.net, member.optimizer, member.progress, &sync, t.rank() != 2);
    EXPECT_EQ(sync, std::vector<uint8_t>(10, 0)) << "rank " << t.rank();
  });
}

// Rank 0 takes part in the standings (at step 0, so that both others are behind it), sends its
// progress, offers rank 1 a state of 1 MiB to take whole and rank 2 (a joiner) its own state in
// place, hears that both are ready for the bytes, and fails: the others give up waiting for them
// (time out, or hear of their neighbour's failure) with an error, and rank 1 keeps its own
// state, bitwise, progress included.
TEST(ElasticState, AFailedTransferLeavesAMembersStateWhole) {
  runWithTransports(
      TransportKind::kLoopback, 3,
      [](Transport& t) {
        Member member(t.rank());
        if (t.rank() == 0) {
          const CollectiveOptions options{.tag = tags::kModelState};
          allgatherBytes(t, std::vector<uint8_t>(9, 0), options);  // step 0, not in place
          broadcastBytes(t, encodeProgress(member.progress), 0, options);
          const uint64_t whole = 1 << 20;
          t.send(1, tags::kElasticState, &whole, sizeof whole)->wait();
          StateWriter gatherer = StateWriter::gatherer();
          EXPECT_TRUE(writeTrainingState(gatherer, *member.net, member.optimizer).empty());
          const uint64_t gathered = gatherer.size();
          t.send(2, tags::kElasticState, &gathered, sizeof gathered)->wait();
          t.send(2, tags::kElasticState, gatherer.bytes().data(), gathered)->wait();
          for (int rank : {1, 2}) {
            uint8_t ready = 0;
            t.recv(rank, tags::kElasticState, &ready, 1)->wait();
          }
          return;
        }
        const std::vector<uint8_t> before = member.bytes();
        EXPECT_THROW(
            shareState(t, *member.net, member.optimizer, member.progress, nullptr, t.rank() == 1),
            Error);
        if (t.rank() == 1) {
          EXPECT_EQ(member.bytes(), before);
        }
      },
      {.timeout = 300ms});
}

const ElasticIdentity kIdentity{"cnn", "fashion-mnist", 64, 4, 7, "ssgd", "none", 60000};

// What loadElasticCheckpoint refuses `from` with ("(loaded)" if it does not).
std::string elasticRefusal(const CheckpointDir& from, Member& member,
                           const ElasticIdentity& identity) {
  try {
    std::vector<uint8_t> sync;
    loadElasticCheckpoint(from, *member.net, member.optimizer, identity, sync);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST(ElasticCheckpoint, TheStateRoundTripsIntoAnotherMember) {
  const auto dir = scratchDir("gradsync-elastic-checkpoint", "round-trip");
  CheckpointDir checkpoints(dir.string());
  Member saved(1);
  saveElasticCheckpoint(checkpoints, *saved.net, saved.optimizer, kIdentity, saved.progress);
  Member joiner(2);  // another initialisation, no momentum yet
  std::vector<float*> storage;
  for (const torch::Tensor& p : joiner.net->parameters()) storage.push_back(p.data_ptr<float>());
  std::vector<uint8_t> sync = {9};
  std::optional<ElasticProgress> progress =
      loadElasticCheckpoint(checkpoints, *joiner.net, joiner.optimizer, kIdentity, sync);
  ASSERT_TRUE(progress.has_value());
  EXPECT_TRUE(sync.empty()) << "ssgd's checkpoint has no synchronization state";
  joiner.progress = *progress;
  EXPECT_EQ(joiner.bytes(), saved.bytes());
  size_t i = 0;
  for (const torch::Tensor& p : joiner.net->parameters()) {
    EXPECT_EQ(p.data_ptr<float>(), storage[i++]) << "a parameter moved to new storage";
  }
  removeScratch(dir);
}

// localsgd's and diloco's outer state travels in a section of its own, byte for byte.
TEST(ElasticCheckpoint, TheCommittedSynchronizationStateRoundTrips) {
  const auto dir = scratchDir("gradsync-elastic-checkpoint", "sync");
  CheckpointDir checkpoints(dir.string());
  Member saved(1);
  const std::vector<uint8_t> outer = {0, 1, 2, 254, 255, 7};
  saveElasticCheckpoint(checkpoints, *saved.net, saved.optimizer, kIdentity, saved.progress, outer);
  Member loaded(2);
  std::vector<uint8_t> sync;
  ASSERT_TRUE(loadElasticCheckpoint(checkpoints, *loaded.net, loaded.optimizer, kIdentity, sync));
  EXPECT_EQ(sync, outer);
  removeScratch(dir);
}

TEST(ElasticCheckpoint, AnEmptyDirectoryHasNone) {
  Member member(0);
  CheckpointDir checkpoints((std::filesystem::temp_directory_path() / "gradsync-none").string());
  std::vector<uint8_t> sync;
  EXPECT_FALSE(loadElasticCheckpoint(checkpoints, *member.net, member.optimizer, kIdentity, sync));
}

// Another global batch (MAX) or data order is refused naming the setting.
TEST(ElasticCheckpoint, AnotherRunsCheckpointIsRefusedNamingWhy) {
  const auto dir = scratchDir("gradsync-elastic-checkpoint", "refused");
  Member member(1);
  CheckpointDir elastic((dir / "elastic").string());
  saveElasticCheckpoint(elastic, *member.net, member.optimizer, kIdentity, member.progress);
  ElasticIdentity wider = kIdentity;
  wider.maxWorkers = 8;
  EXPECT_NE(elasticRefusal(elastic, member, wider).find("--elastic's MAX"), std::string::npos)
      << elasticRefusal(elastic, member, wider);
  ElasticIdentity reseeded = kIdentity;
  reseeded.seed = 8;
  EXPECT_NE(elasticRefusal(elastic, member, reseeded).find("seed 7 but this run has 8"),
            std::string::npos)
      << elasticRefusal(elastic, member, reseeded);
  removeScratch(dir);
}

// A fixed run's checkpoint resumes under --elastic at the data position of its step (at MAX
// workers an elastic step is DistributedSampler's global batch), its epoch's loss sums as the
// epoch's, rank 0's synchronization state as `sync`; another global batch or strategy is refused.
TEST(ElasticCheckpoint, AFixedRunsCheckpointIsTheElasticPositionOfItsStep) {
  const auto dir = scratchDir("gradsync-elastic-checkpoint", "from-fixed");
  Member member(1);
  const std::vector<EpochRecord> epochs = {{0, 0.75, 0.8, 3.0, 2e4}};
  CheckpointDir fixed((dir / "fixed").string());
  const int64_t step = 234 + 5;  // 60000 / 256 = 234 steps per epoch
  const RunIdentity run{"cnn", "fashion-mnist", 4, 4, 64, 7, "ssgd", "none", "wfbp"};
  saveCheckpoint(fixed, *member.net, member.optimizer, run, {.step = step, .epochs = epochs},
                 {1.0, 2.0, 3.0, 4.5}, {{9}, {8}, {7}, {6}});
  Member resumed(2);
  std::vector<uint8_t> sync;
  const std::optional<ElasticProgress> progress =
      loadElasticCheckpoint(fixed, *resumed.net, resumed.optimizer, kIdentity, sync);
  ASSERT_TRUE(progress.has_value());
  EXPECT_EQ(progress->step, step);
  EXPECT_EQ(progress->data, (EpochPosition{1, 5 * 256}));
  EXPECT_EQ(progress->samples, step * 256);
  EXPECT_EQ(progress->epochLossSum, 10.5);
  EXPECT_EQ(progress->epochLossCount, 4 * 5);
  ASSERT_EQ(progress->epochs.size(), 1u);
  EXPECT_EQ(progress->epochs[0].trainLoss, 0.75);
  EXPECT_EQ(sync, std::vector<uint8_t>{9});
  resumed.progress = member.progress;
  EXPECT_EQ(resumed.bytes(), member.bytes()) << "the model and the optimizer are the saved ones";

  CheckpointDir halfBatch((dir / "half").string());
  const RunIdentity two{"cnn", "fashion-mnist", 2, 2, 64, 7, "ssgd", "none", "wfbp"};
  saveCheckpoint(halfBatch, *member.net, member.optimizer, two, {.step = 3}, {0, 0}, {{}, {}});
  EXPECT_NE(elasticRefusal(halfBatch, member, kIdentity)
                .find("written with --elastic's MAX (the "
                      "global batch is MAX x batch size, "
                      "the fixed run's workers x batch "
                      "size) 2 but this run has 4"),
            std::string::npos)
      << elasticRefusal(halfBatch, member, kIdentity);
  ElasticIdentity local = kIdentity;
  local.sync = "localsgd:4";
  EXPECT_NE(elasticRefusal(fixed, member, local).find("sync \"ssgd\" but this run has"),
            std::string::npos)
      << elasticRefusal(fixed, member, local);
  removeScratch(dir);
}

// The other way: an elastic run's checkpoint resumes without --elastic, its MAX as the global
// batch's workers, the epoch's mean loss as every saved rank's and its data position as steps of
// the epoch; its synchronization state is the job's (none in gradient mode).
TEST(ElasticCheckpoint, AnElasticRunsCheckpointResumesWithoutElastic) {
  const auto dir = scratchDir("gradsync-elastic-checkpoint", "to-fixed");
  Member member(1);
  member.progress.step = 234 + 3;
  member.progress.data = {1, 3 * 256};
  member.progress.epochLossSum = 6.0;
  member.progress.epochLossCount = 12;  // 4 ranks x 3 steps: a mean of 0.5
  CheckpointDir elastic((dir / "elastic").string());
  saveElasticCheckpoint(elastic, *member.net, member.optimizer, kIdentity, member.progress, {5, 6});
  const RunIdentity run{"cnn", "fashion-mnist", 3, 3, 64, 7, "ssgd", "none", "wfbp"};
  const std::optional<ResumePoint> point = readResumePoint(elastic, run);
  ASSERT_TRUE(point.has_value());
  EXPECT_TRUE(point->fromElastic);
  EXPECT_EQ(point->workers, 4);
  EXPECT_EQ(point->batchWorkers, 4);
  EXPECT_EQ(point->step, 234 + 3);
  EXPECT_EQ(point->epoch, 1);
  EXPECT_EQ(point->epochStep, 3);
  EXPECT_EQ(point->lossSums, std::vector<double>(4, 1.5));
  Member resumed(2);
  const RunPosition position = loadResumePoint(*point, *resumed.net, resumed.optimizer, 0, 3, 234);
  EXPECT_EQ(position.syncState, (std::vector<uint8_t>{5, 6}));
  EXPECT_EQ(position.epochLossSum, 1.5);
  resumed.progress = member.progress;
  EXPECT_EQ(resumed.bytes(), member.bytes());

  RunIdentity other = run;
  other.compress = "topk:0.01";
  try {
    readResumePoint(elastic, other);
    ADD_FAILURE() << "another compressor loaded the checkpoint";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("compress \"none\" but this run has \"topk:0.01\""),
              std::string::npos)
        << e.what();
  }
  removeScratch(dir);
}

}  // namespace
}  // namespace gradsync::testing
