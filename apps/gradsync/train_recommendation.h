// `gradsync train --model dlrm` (docs/recommendation.md): its flags, and how its workers and
// embedding servers are run (processes, respawned when killed, or threads).
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "torch/recommendation/recommendation.h"

namespace gradsync {

// The dlrm-only flags of `train`; --bottom-mlp and --top-mlp land in the given strings.
void addRecommendationFlags(CLI::App* train, RecommendationOptions& options,
                            std::shared_ptr<std::string> bottom, std::shared_ptr<std::string> top);
// Runs the job (options.train holds the shared flags); returns the exit code.
int runRecommendation(const RankFlags& flags, const CommandContext& context,
                      RecommendationOptions options, const std::string& bottom,
                      const std::string& top);

}  // namespace gradsync
