// gradsync profile: measures a model profile for the simulator (docs/cli.md, "gradsync profile").
#include <cstdio>
#include <fstream>

#include "commands.h"
#include "common/allocator.h"
#include "gradsync/error.h"
#include "torch/train/model_profiler.h"

namespace gradsync {
namespace {

struct ProfileFlags {
  ProfileOptions options;
  std::string output;  // "" = no JSON file
};

size_t elements(const LayerProfile& layer) {
  size_t count = 0;
  for (const TensorShape& tensor : layer.tensors) count += tensor.elements;
  return count;
}

void printTable(const ModelProfile& profile) {
  std::printf("%-24s %10s %12s %12s\n", "layer", "params", "forward ms", "backward ms");
  for (const LayerProfile& layer : profile.layers) {
    std::printf("%-24s %10zu %12.3f %12.3f\n", layer.name.c_str(), elements(layer),
                layer.forwardSeconds * 1e3, layer.backwardSeconds * 1e3);
  }
  std::printf("%-24s %10zu %12.3f %12.3f\n", "total", profile.parameterCount(),
              profile.forwardSeconds() * 1e3, profile.backwardSeconds() * 1e3);
  std::printf("update %.3f ms; batch %lld; %s\n", profile.updateSeconds * 1e3,
              static_cast<long long>(profile.batchSize), profile.device.c_str());
  std::fflush(stdout);
}

// Checked before measuring too (with empty text), so a bad path fails in a second, not after
// minutes of measurement.
void writeProfile(const std::string& json, const std::string& path) {
  std::ofstream out(path);
  out << json;
  if (!out.flush()) {
    throw ConfigError("cannot write the profile to --output " + path,
                      {.hint = "check that the directory exists and is writable"});
  }
}

void report(const ProfileFlags& flags, const ModelProfile& profile) {
  printTable(profile);
  if (!flags.output.empty()) writeProfile(profileToJson(profile) + "\n", flags.output);
}

}  // namespace

void addProfileCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<ProfileFlags>();
  ProfileOptions& o = flags->options;
  CLI::App* profile =
      app.add_subcommand("profile", "measure a model's per-layer compute times (for simulate)");
  profile->add_option("--model", o.model, "mlp | cnn | resnet20 | vgg11 | cnn-gn | vgg11-gn")
      ->required();
  profile->add_option("--batch-size", o.batchSize, "samples per step")->capture_default_str();
  profile->add_option("--threads", o.threads, "torch threads per worker")->capture_default_str();
  profile
      ->add_option("--workers", o.workers,
                   "processes measuring at once, as train --workers shares the cores")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  profile->add_option("--steps", o.steps, "measured steps")->capture_default_str();
  profile->add_option("--warmup", o.warmupSteps, "untimed steps first")->capture_default_str();
  profile->add_option("--seed", o.seed, "initialisation and data")->capture_default_str();
  profile->add_option("--output", flags->output, "write the profile as JSON");
  profile->callback([flags, &context] {
    keepFreedMemoryInHeap();  // as train does: its allocation pattern is part of compute time
    validateProfileOptions(flags->options);
    if (!flags->output.empty()) writeProfile("", flags->output);
    if (flags->options.workers == 1 && context.env.launcher.empty()) {
      report(*flags, profileModel(flags->options));
      return;
    }
    // The worker processes are started (and joined) the way train starts its ranks.
    RankFlags ranks{.workers = flags->options.workers};
    const ProfileOptions& o = flags->options;
    Settings settings = {{"--model", o.model},
                         {"--batch-size", std::to_string(o.batchSize)},
                         {"--steps", std::to_string(o.steps)},
                         {"--warmup", std::to_string(o.warmupSteps)},
                         {"--seed", std::to_string(o.seed)}};
    context.exitCode =
        runRanks(ranks, context.env, context.argv, settings, [&](Transport& transport) {
          ProfileOptions options = flags->options;
          options.workers = transport.size();  // under mpirun -n W the launcher decides
          ModelProfile measured = profileModel(transport, options);
          if (transport.rank() == 0) report(*flags, measured);
          return 0;
        });
  });
}

}  // namespace gradsync
