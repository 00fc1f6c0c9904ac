// The gradsync command line: thin subcommands over the library (docs/cli.md).
#include <cstdio>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "common/logging.h"
#include "gradsync/error.h"
#include "launcher.h"

namespace gradsync {

void addLaunchCommand(CLI::App& app, CommandContext& context) {
  auto options = std::make_shared<LaunchOptions>();
  CLI::App* launch = app.add_subcommand("launch", "start N local processes with the job's env");
  launch->add_option("-n,--processes", options->processes, "processes")->required();
  launch->add_flag("--tls", options->tls, "encrypt the links between the processes (TLS 1.3)");
  launch
      ->add_option("--ranks-per-host", options->ranksPerHost,
                   "emulate hosts of N consecutive ranks (GRADSYNC_RANKS_PER_HOST)")
      ->check(CLI::PositiveNumber);
  auto respawn = std::make_shared<std::string>();
  launch->add_option("--respawn", *respawn,
                     "ranks to start again when a signal kills them, e.g. 4-5 (embedding servers)");
  launch->add_option("--max-respawns", options->maxRespawns, "respawns in all")
      ->capture_default_str();
  launch->add_flag("--elastic", options->elastic,
                   "elastic workers (train --elastic): serve the store here; a failure does not "
                   "end the others");
  launch
      ->add_option("--max-restarts", options->maxRestarts,
                   "restart failed workers, this many times in all (implies --elastic)")
      ->check(CLI::NonNegativeNumber);
  launch->add_option("command", options->command, "command to run")->required();
  launch->callback([options, respawn, &context] {
    if (!respawn->empty()) options->respawn = parseRankList(*respawn);
    context.exitCode = launchLocal(*options);
  });
}

namespace {

int run(int argc, char** argv) {
  CommandContext context{Env::fromProcess(), std::vector<std::string>(argv, argv + argc)};
  setLogLevel(context.env.logLevel);
  CLI::App app{"gradsync: communication-efficient data-parallel training"};
  app.require_subcommand(1);
#ifdef GRADSYNC_HAVE_TORCH
  addTrainCommand(app, context);
  addProfileCommand(app, context);
#endif
  addBenchCommand(app, context);
  addLaunchCommand(app, context);
  addSimulateCommand(app, context);
  addTuneCommand(app, context);
  addShardCommand(app, context);
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is not an error; bad flags are config errors
  }
  return context.exitCode;
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  try {
    return gradsync::run(argc, argv);
  } catch (const gradsync::ConfigError& e) {
    std::fprintf(stderr, "gradsync: error: %s\n", e.what());
    return 2;
  } catch (const gradsync::StateLostError& e) {
    std::fprintf(stderr, "gradsync: error: %s\n", e.what());
    return gradsync::kStateLostExitCode;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gradsync: error: %s\n", e.what());
    return 1;
  }
}
