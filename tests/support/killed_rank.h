// A job of real `gradsync` processes with one of them SIGKILLed mid-run: the failure tests of the
// e2e suites (a killed pipeline stage, a killed Wavelet worker) share it.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace gradsync::testing {

struct KilledRankJob {
  std::vector<std::string> argv;  // one rank's command line (every rank but 0 adds --quiet)
  int ranks = 4;
  int victim = 2;
  std::string ready;  // rank 0's stdout shows this once the job trains
  std::string token;  // GRADSYNC_JOB_TOKEN
};

// Starts the ranks over TCP on a free port (their output in `dir`), waits up to 60 s for
// `ready`, lets them train for a second, SIGKILLs the victim, and expects every other rank to
// exit with status 1 within 10 s, its stderr naming "rank <victim>" (gtest failures otherwise;
// a rank that does not end within 60 s fails as hung). Blocking.
void expectKilledRankNamedByTheOthers(const KilledRankJob& job, const std::filesystem::path& dir);

}  // namespace gradsync::testing
