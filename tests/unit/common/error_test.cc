#include <gtest/gtest.h>

#include "common/check.h"
#include "gradsync/error.h"

namespace gradsync {

TEST(Error, MessageCarriesContext) {
  PeerLostError e(
      "connection reset",
      {.rank = 1, .peer = 2, .operation = "allreduce", .hint = "rank 2 probably crashed"});
  std::string what = e.what();
  EXPECT_NE(what.find("[rank 1]"), std::string::npos);
  EXPECT_NE(what.find("allreduce"), std::string::npos);
  EXPECT_NE(what.find("peer rank 2"), std::string::npos);
  EXPECT_NE(what.find("Hint: rank 2 probably crashed"), std::string::npos);
  EXPECT_EQ(e.detail(), "connection reset");
}

TEST(Error, FailureOriginIsTheRelayedOriginElseTheLostPeerElseTheRank) {
  EXPECT_EQ(failureOrigin(PeerLostError("rank 1 failed", {.rank = 0, .peer = 1, .origin = 2})), 2);
  EXPECT_EQ(failureOrigin(PeerLostError("lost connection", {.rank = 0, .peer = 1})), 1);
  // A timeout names the peer it waited for, but the failure is the waiting rank's own.
  EXPECT_EQ(failureOrigin(TimeoutError("no reply", {.rank = 0, .peer = 1})), 0);
  EXPECT_EQ(failureOrigin(ConfigError("bad flag")), -1);
}

TEST(Error, CheckThrowsInternalErrorWithOperands) {
  int a = 3;
  int b = 4;
  try {
    GS_CHECK_EQ(a, b);
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("3 vs 4"), std::string::npos);
  }
  EXPECT_NO_THROW(GS_CHECK(a < b));
}

}  // namespace gradsync
