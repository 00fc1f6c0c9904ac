// `gradsync train --pipeline S` (docs/cli.md, docs/trainer.md "Pipelines"): its flags, and how
// its stage ranks (or the single-process emulator) are run.
#pragma once

#include <CLI/CLI.hpp>

#include "commands.h"
#include "job/agreement.h"
#include "torch/train/trainer.h"

namespace gradsync {

void addPipelineFlags(CLI::App* train, PipelineOptions& options);
// The pipeline flags every rank must share, appended to `settings`.
void addPipelineSettings(const PipelineOptions& options, Settings& settings);
// Runs the job: the emulator in this process (--pipeline-emulate), or stages x replicas ranks
// (--workers; by default one pipeline, --workers S). Returns the exit code.
int runPipelineCommand(RankFlags ranks, bool workersGiven, const CommandContext& context,
                       const TrainOptions& options, const Settings& settings);

}  // namespace gradsync
