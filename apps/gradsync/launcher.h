// Local multi-process launcher: `gradsync launch -n N -- CMD` and the `--workers N` of other
// subcommands. Starts N processes with the rendezvous environment set (RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT, GRADSYNC_JOB_ID, GRADSYNC_JOB_TOKEN with a fresh random
// token, GRADSYNC_TLS=1 with --tls, GRADSYNC_RANKS_PER_HOST with --ranks-per-host) and
// supervises them.
//
// For elastic workers (`gradsync train --elastic`), `--elastic` serves the rendezvous store in
// the launcher itself (GRADSYNC_EXTERNAL_STORE=1 tells the workers), so that the job outlives any
// worker, rank 0's included; a failed worker does not end the others; and `--max-restarts K`
// restarts failed workers, as torchrun's agent does, but only the failed one: it starts again
// with its RANK (its slot) and GRADSYNC_RESTART_COUNT, and joins the running job.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gradsync {

// The exit code of a process that failed with StateLostError (gradsync/error.h): every worker
// holding an elastic job's state was lost, so the elastic launcher restarts no worker that
// exits with it (each restart would only wait --timeout in vain again).
constexpr int kStateLostExitCode = 76;

struct LaunchOptions {
  int processes = 2;
  std::vector<std::string> command;
  // After one process fails, how long the others get to notice and report before they are
  // killed. Should exceed the job's own timeout so their errors name the real culprit.
  std::chrono::milliseconds grace{65'000};
  // --tls: sets GRADSYNC_TLS=1 for the processes, so every link between them is encrypted.
  bool tls = false;
  // --ranks-per-host N: the processes form hosts of N consecutive ranks (GRADSYNC_RANKS_PER_HOST,
  // and LOCAL_RANK / LOCAL_WORLD_SIZE within each); 0: one host of all of them.
  int ranksPerHost = 0;
  // Both restart policies start a process again in its slot the same way (same command line and
  // environment, GRADSYNC_RESTART_COUNT = the slot's restarts); they differ in the job around it.
  //
  // --respawn, for a fixed job: the listed ranks are started again when a signal kills them while
  // another rank still runs: embedding servers, whose replacements restore their shard
  // (docs/recommendation.md). A rank that exits with an error is not respawned (that is a failure
  // of its own, not a lost machine), and any other failure ends the job as without --respawn.
  std::vector<int> respawn;
  int maxRespawns = 10;  // in all, over every rank
  // --elastic: serve the store here; a failure does not end the other processes (no grace).
  bool elastic = false;
  // --max-restarts (implies elastic): how many failed processes are restarted, in all, any slot.
  // A process fails when a signal ends it or it exits with a code other than 0 and 75 (asked to
  // stop); the restarted one joins the running job (train --elastic) instead of replacing a rank.
  int maxRestarts = 0;
};

// "4", "4,5", "4-7" or "4-5,8": the ranks --respawn names. ConfigError otherwise.
std::vector<int> parseRankList(const std::string& text);

// Runs the processes to completion. Returns 0 if all succeeded (respawned ranks count by their
// last process), else the exit code of the first failure (128 + signal for a killed process)
// after reporting on stderr which rank failed how. Elastic: 0 if any slot's last process
// succeeded (the job finished), the failures reported. SIGINT and SIGTERM are forwarded to the
// children (and stop any restarting of elastic workers). --respawn and --elastic exclude each
// other (ConfigError).
int launchLocal(const LaunchOptions& options);

}  // namespace gradsync
