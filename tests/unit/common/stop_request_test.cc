// The stop signals' handler (common/stop_request.h): the first SIGTERM or SIGINT only raises the
// flag; a second one ends the process at once with 128 + the signal.
#include "common/stop_request.h"

#include <gtest/gtest.h>
#include <signal.h>

namespace gradsync {
namespace {

TEST(StopRequest, FirstSignalRaisesTheFlagSecondExitsAtOnce) {
  EXPECT_EXIT(
      {
        installStopHandlers();
        ::raise(SIGTERM);
        if (stopRequested() != SIGTERM) ::_exit(1);
        ::raise(SIGINT);  // the second stop signal, whichever it is
        ::_exit(2);       // not reached
      },
      ::testing::ExitedWithCode(128 + SIGINT), "second stop signal");
}

TEST(StopRequest, RequestAndClear) {
  clearStopRequest();
  EXPECT_EQ(stopRequested(), 0);
  requestStop(SIGTERM);
  EXPECT_EQ(stopRequested(), SIGTERM);
  clearStopRequest();
  EXPECT_EQ(stopRequested(), 0);
}

}  // namespace
}  // namespace gradsync
