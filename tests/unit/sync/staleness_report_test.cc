// The staleness report: every worker's counts gathered over real rank threads and TCP, and how
// they are described.
#include "sync/staleness_report.h"

#include <gtest/gtest.h>

#include <mutex>

#include "common/tags.h"
#include "support/transports.h"

namespace gradsync {
namespace {

TEST(StalenessReport, GathersEveryRanksCountsOnEveryRankUnderAsgdAndSsp) {
  constexpr int kRanks = 3;
  for (const char* sync : {"asgd", "ssp:2"}) {
    std::mutex mutex;
    std::vector<std::vector<RankStaleness>> gathered(kRanks);
    testing::runWithTransports(testing::TransportKind::kTcp, kRanks, [&](Transport& t) {
      const auto r = static_cast<uint64_t>(t.rank());
      std::vector<RankStaleness> all =
          gatherStaleness(t, SyncStrategy::parse(sync), {10 + r, 7 * r, 3 * r}, tags::kTrainer);
      std::lock_guard lock(mutex);
      gathered[static_cast<size_t>(t.rank())] = all;
    });
    for (const auto& all : gathered) {
      ASSERT_EQ(all.size(), 3u) << sync;
      for (int r = 0; r < kRanks; ++r) {
        const RankStaleness& s = all[static_cast<size_t>(r)];
        EXPECT_EQ(s.rank, r);
        EXPECT_EQ(s.pushes, 10u + r);
        EXPECT_DOUBLE_EQ(s.mean, 7.0 * r / (10 + r));
        EXPECT_EQ(s.max, 3u * r);
      }
    }
  }
}

TEST(StalenessReport, OtherStrategiesGatherNothingAndExchangeNothing) {
  for (const char* sync : {"ssgd", "odsgd", "localsgd:2"}) {
    testing::runWithTransports(testing::TransportKind::kTcp, 2, [&](Transport& t) {
      // Only rank 0 calls: a collective would wait for rank 1 and time out.
      if (t.rank() == 0) {
        EXPECT_TRUE(gatherStaleness(t, SyncStrategy::parse(sync), {5, 5, 1}, 0).empty());
      }
    });
  }
}

TEST(StalenessReport, DescribesEveryRankForTheLogAndTheSummary) {
  const std::vector<RankStaleness> ranks = {{0, 100, 0.5, 3}, {1, 100, 2.25, 9}};
  const std::string text = describe(ranks);
  EXPECT_NE(text.find("rank 0 mean 0.50, max 3 over 100 pushes; rank 1 mean 2.25, max 9 over "
                      "100 pushes"),
            std::string::npos)
      << text;
  EXPECT_EQ(summarize(ranks), "0.50/3 2.25/9");
}

}  // namespace
}  // namespace gradsync
