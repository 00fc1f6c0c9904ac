// Local multi-process launcher: `gradsync launch -n N -- CMD` and the `--workers N` of other
// subcommands. Starts N processes with the rendezvous environment set (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT, GRADSYNC_JOB_ID, GRADSYNC_JOB_TOKEN with a fresh random
// token, and GRADSYNC_TLS=1 with --tls) and supervises them.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gradsync {

struct LaunchOptions {
  int processes = 2;
  std::vector<std::string> command;
  // After one process fails, how long the others get to notice and report before they are
  // killed. Should exceed the job's own timeout so their errors name the real culprit.
  std::chrono::milliseconds grace{65'000};
  // --tls: sets GRADSYNC_TLS=1 for the processes, so every link between them is encrypted.
  bool tls = false;
  // --respawn: ranks started again, with the same command and environment (and
  // GRADSYNC_RESPAWN=<count>), when a signal kills them while another rank still runs: embedding
  // servers, whose replacements restore their shard (docs/recommendation.md). A rank that exits
  // with an error is not respawned (that is a failure of its own, not a lost machine).
  std::vector<int> respawn;
  int maxRespawns = 10;  // in all, over every rank
};

// "4", "4,5", "4-7" or "4-5,8": the ranks --respawn names. ConfigError otherwise.
std::vector<int> parseRankList(const std::string& text);

// Runs the processes to completion. Returns 0 if all succeeded (respawned ranks count by their
// last process), else the exit code of the first failure (128 + signal for a killed process)
// after reporting on stderr which rank failed how. SIGINT and SIGTERM are forwarded to the
// children.
int launchLocal(const LaunchOptions& options);

}  // namespace gradsync
