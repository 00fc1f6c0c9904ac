// The subcommands of the gradsync CLI, and what they share: how ranks are run.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/env.h"
#include "gradsync/bootstrap.h"
#include "gradsync/transport.h"
#include "job/agreement.h"

namespace gradsync {

// Flags shared by every subcommand that runs ranks.
struct RankFlags {
  BootstrapFlags bootstrap;
  int workers = 2;
  std::string transport = "tcp";
  std::string bandwidth;
  std::string latency;
};

void addRankFlags(CLI::App* app, RankFlags& flags, int defaultWorkers);
// Link emulation from the flags (--bandwidth, --latency); the timeout is left to the caller.
TransportOptions parseLink(const RankFlags& flags);

// Runs `body` as the ranks of a job, in whichever of three ways fits: as threads over loopback,
// as this process's rank when a launcher (ours, torchrun-style env, mpirun) started us, or by
// launching --workers copies of this very command line. Before `body`, the ranks check that
// they agree on `settings` (and, over TCP, on the world size and job token), so that a
// misconfigured launch fails at startup naming the rank and setting. Returns the exit code.
int runRanks(const RankFlags& flags, const Env& env, const std::vector<std::string>& argv,
             const Settings& settings, const std::function<int(Transport&)>& body);

// As runRanks, for elastic workers (`train --elastic`): `body` gets the job's bootstrap
// configuration (this worker's slot, the store) and forms its own transports, round by round.
// Launched, this process is one worker; otherwise it launches --workers copies of the command
// line with the launcher serving the store (`gradsync launch --elastic`). TCP only.
int runElasticWorkers(
    const RankFlags& flags, const Env& env, const std::vector<std::string>& argv,
    const std::function<int(const BootstrapConfig&, const TransportOptions&)>& body);

// What a subcommand needs from main: the environment, the command line, where to put its exit
// code. Each add*Command registers its flags and a callback that runs after parsing.
struct CommandContext {
  Env env;
  std::vector<std::string> argv;
  int exitCode = 0;
};

void addBenchCommand(CLI::App& app, CommandContext& context);
void addTrainCommand(CLI::App& app, CommandContext& context);
void addProfileCommand(CLI::App& app, CommandContext& context);
void addLaunchCommand(CLI::App& app, CommandContext& context);
void addSimulateCommand(CLI::App& app, CommandContext& context);
void addTuneCommand(CLI::App& app, CommandContext& context);
void addShardCommand(CLI::App& app, CommandContext& context);

}  // namespace gradsync
