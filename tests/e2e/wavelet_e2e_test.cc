// `gradsync train --waves 2` as users run it: worker processes over TCP, one killed mid-training,
// and a refusal from the command line.
#include <gtest/gtest.h>

#include <filesystem>

#include "common/subprocess.h"
#include "support/killed_rank.h"
#include "support/read_file.h"
#include "support/scratch_dir.h"

namespace gradsync {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::readFile;

fs::path scratch(const std::string& name) {
  return testing::scratchDir("gradsync-wavelet-e2e", name);
}
using testing::removeScratch;

// A worker process killed while both waves of every worker train: the other workers fail
// promptly (not at their 30 s timeout) with an error naming the killed rank, never hang; no
// wave is left waiting at a gate or for the master.
TEST(WaveletCli, KilledWorkerIsNamedByEveryOtherWorker) {
  const fs::path dir = scratch("killed");
  testing::expectKilledRankNamedByTheOthers(
      {.argv = {GRADSYNC_BIN, "train", "--model", "mlp", "--dataset", "synthetic", "--waves", "2",
                "--steps", "1000000", "--timeout", "30s", "--wave-consistency", "shared"},
       .ready = "waves: 2",  // rank 0 prints the waves once every worker's engines are up
       .token = "wavelet"},
      dir);
  if (!HasFailure()) removeScratch(dir);
}

// The command line refuses an unsupported combination before starting any worker.
TEST(WaveletCli, UnsupportedScheduleIsRefusedUpFront) {
  const fs::path dir = scratch("refused");
  SpawnOptions spawn;
  spawn.argv = {GRADSYNC_BIN, "train",     "--model", "mlp",     "--dataset",
                "synthetic",  "--workers", "2",       "--waves", "2",
                "--schedule", "p3",        "--steps", "4"};
  spawn.stdoutPath = (dir / "out").string();
  spawn.stderrPath = (dir / "err").string();
  auto ended = waitAny({spawnProcess(spawn)}, 60s);
  ASSERT_TRUE(ended.has_value()) << "gradsync hung";
  EXPECT_NE(ended->second.code, 0);
  const std::string err = readFile(dir / "err");
  EXPECT_NE(err.find("--waves 2 does not support --schedule p3"), std::string::npos) << err;
  if (!HasFailure()) removeScratch(dir);
}

}  // namespace
}  // namespace gradsync
