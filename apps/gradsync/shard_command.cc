// gradsync shard: writes a dataset as shards for a remote store (docs/data.md, "Remote data").
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "data/idx.h"
#include "data/shard_format.h"

namespace gradsync {

void addShardCommand(CLI::App& app, CommandContext& context) {
  struct Flags {
    std::string dataDir = kFashionMnistDir;
    std::string output;
    int64_t samplesPerShard = 1000;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "shard", "write Fashion-MNIST as shards and a manifest for a data server (train --data-url)");
  cmd->add_option("--data-dir", flags->dataDir, "Fashion-MNIST files")->capture_default_str();
  cmd->add_option("--output", flags->output, "directory to write (served as --data-url)")
      ->required();
  cmd->add_option("--samples-per-shard", flags->samplesPerShard, "images per shard file")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([flags, &context] {
    const ImageSet train = loadFashionMnist(flags->dataDir, true);
    const ImageSet test = loadFashionMnist(flags->dataDir, false);
    const ShardManifest manifest =
        writeShards(train, test, kFashionMnistClasses, flags->samplesPerShard, flags->output);
    std::printf("%zu training and %zu test shards (%lld and %lld images) in %s\n",
                manifest.train.size(), manifest.test.size(),
                static_cast<long long>(manifest.trainSamples()),
                static_cast<long long>(manifest.testSamples()), flags->output.c_str());
    context.exitCode = 0;
  });
}

}  // namespace gradsync
