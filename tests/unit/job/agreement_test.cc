// The startup agreement checks: the settings codec, the wording of a difference, and the
// collective check on rank threads (loopback and TCP) with odd world sizes.
#include "job/agreement.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "gradsync/error.h"
#include "gradsync/store.h"
#include "support/rank_threads.h"
#include "support/transports.h"

namespace gradsync::testing {
namespace {

using namespace std::chrono_literals;

const Settings kBase = {{"--model", "cnn"}, {"--compress", "topk:0.01"}, {"--override", ""}};

TEST(Agreement, SettingsRoundTripThroughTheCodec) {
  Settings odd = {{"", ""}, {"a=b", "line\nbreak"}, {"--x", std::string(1000, '\0')}};
  for (const Settings& settings : {Settings{}, kBase, odd}) {
    EXPECT_EQ(decodeSettings(encodeSettings(settings)), settings);
  }
  std::string bytes = encodeSettings(kBase);
  EXPECT_THROW(decodeSettings(bytes.substr(0, bytes.size() - 1)), ProtocolError);
  EXPECT_THROW(decodeSettings(bytes + "x"), ProtocolError);
}

TEST(Agreement, DescribesTheFirstDifference) {
  EXPECT_EQ(describeDifference(kBase, kBase, 3), "");
  Settings other = kBase;
  other[1].second = "none";
  other[2].second = "*=fp16";
  EXPECT_EQ(describeDifference(kBase, other, 3),
            "rank 3 has --compress none but rank 0 has topk:0.01");
  other = kBase;
  other[0].second = "";
  EXPECT_EQ(describeDifference(kBase, other, 1), "rank 1 has --model \"\" but rank 0 has cnn");
  EXPECT_EQ(describeDifference(kBase, {kBase[0], kBase[1]}, 2),
            "rank 2 has no setting --override but rank 0 has \"\"");
  other = kBase;
  other.push_back({"--new", "1"});
  EXPECT_EQ(describeDifference(kBase, other, 2),
            "rank 2 has the setting --new that rank 0 does not know");
}

// Set member by member: GCC 12 warns falsely (maybe-uninitialized) about the designated
// initializers of a BootstrapConfig that skip its strings.
BootstrapConfig job(int rank, int size, std::chrono::milliseconds timeout) {
  BootstrapConfig config;
  config.rank = rank;
  config.size = size;
  config.timeout = timeout;
  return config;
}

TEST(Agreement, WorldSizeDifferenceIsNamedThroughTheStore) {
  std::shared_ptr<Store> store = makeInMemoryStore();
  std::atomic<int> named{0};
  runRankThreads(3, [&](int rank) {
    BootstrapConfig config = job(rank, rank == 2 ? 4 : 3, 5s);
    try {
      checkSameWorldSize(*store, config);
      EXPECT_EQ(rank, 1);  // it agrees with rank 0
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.detail(), "rank 2 has world size 4 but rank 0 has 3");
      ++named;
    }
  });
  EXPECT_EQ(named, 2);  // rank 0 and rank 2
}

TEST(Agreement, AMissingRankIsNamedWhenTheWaitEnds) {
  std::shared_ptr<Store> store = makeInMemoryStore();
  store->setString("job/world_size/1", "3");
  BootstrapConfig config = job(0, 3, 100ms);
  try {
    checkSameWorldSize(*store, config);
    FAIL() << "expected a timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(e.detail().find("rank 2 did not join the job within 100 ms"), std::string::npos)
        << e.what();
  }
}

class AgreementOnRanks : public ::testing::TestWithParam<TransportKind> {};

TEST_P(AgreementOnRanks, SameSettingsPassAndADifferenceFailsEveryRankAlike) {
  for (int size : {1, 2, 5}) {
    runWithTransports(GetParam(), size, [](Transport& t) { checkSameSettings(t, kBase); });
  }
  std::atomic<int> failed{0};
  runWithTransports(GetParam(), 5, [&](Transport& t) {
    Settings mine = kBase;
    if (t.rank() == 2 || t.rank() == 4) mine[0].second = "vgg11";
    try {
      checkSameSettings(t, mine);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.detail(), "rank 2 has --model vgg11 but rank 0 has cnn");
      EXPECT_EQ(e.context().rank, t.rank());
      ++failed;
    }
  });
  EXPECT_EQ(failed, 5);
}

INSTANTIATE_TEST_SUITE_P(Transports, AgreementOnRanks,
                         ::testing::Values(TransportKind::kLoopback, TransportKind::kTcp),
                         [](const auto& info) { return kindName(info.param); });

}  // namespace
}  // namespace gradsync::testing
