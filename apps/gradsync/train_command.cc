// gradsync train: data-parallel training of a real model (docs/cli.md, docs/trainer.md).
#include <cstdio>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "commands.h"
#include "common/allocator.h"
#include "compress/registry.h"
#include "gradsync/error.h"
#include "torch/elastic/trainer.h"
#include "torch/train/trainer.h"
#include "train_pipeline.h"
#include "train_recommendation.h"

namespace gradsync {
namespace {

struct TrainFlags {
  TrainOptions options;
  RankFlags ranks;
  RecommendationOptions recommendation;  // --model dlrm
  std::shared_ptr<std::string> bottomMlp = std::make_shared<std::string>("64,16");
  std::shared_ptr<std::string> topMlp = std::make_shared<std::string>("64");
};

// " asgd", " ssgd over 2 servers", ...; nothing for ring ssgd (the default).
std::string syncLabel(const TrainOptions& options) {
  const StrategyKnobs& knobs = options.strategy;
  std::string label = options.sync == "ssgd" ? "" : " " + options.sync;
  if (knobs.servers > 0) return label + fmt::format(" over {} parameter servers", knobs.servers);
  if (knobs.ps || SyncStrategy::parse(options.sync).needsServers()) {
    return label + " over co-located parameter servers";
  }
  return label;
}

// "cnn on fashion-mnist", or "emulated vgg19 (compute x 20)" with --compute emulate:vgg19.
std::string workload(const TrainOptions& options) {
  if (!emulatesCompute(options)) return options.model + " on " + options.dataset;
  return fmt::format("emulated {} (compute x {:g})", options.compute.substr(8),
                     options.computeScale);
}

void printSummary(const TrainOptions& options, int workers, const TrainResult& result) {
  const StepProfile& p = result.perStep;
  // --schedule auto: what it chose ("auto -> p3:slice=160000,window=2").
  const std::string schedule = result.scheduleTuning.empty()
                                   ? options.schedule
                                   : options.schedule + " -> " + result.schedule;
  std::string accuracy = emulatesCompute(options) ? ""
                                                  : fmt::format("test accuracy {:.2f}%, ",
                                                                100 * result.finalTestAccuracy);
  if (result.tokensPerSecond > 0) {  // a language model
    accuracy = fmt::format("held-out loss {:.4f} nats/token ({:.3f} bits/byte), {:.0f} tokens/s, ",
                           result.finalHeldOutLoss, bitsPerByte(result.finalHeldOutLoss),
                           result.tokensPerSecond);
  }
  std::printf(
      "gradsync train: %s, %d workers, %s%s, %lld steps in %.1f s: "
      "%s%.0f samples/s, step %.1f ms (compute %.1f, exposed "
      "communication %.1f), %.2f MB sent per step",
      workload(options).c_str(), workers, schedule.c_str(), syncLabel(options).c_str(),
      static_cast<long long>(result.steps), result.seconds, accuracy.c_str(),
      result.samplesPerSecond, p.stepMs, p.computeMs, p.exposedCommMs, p.bytesSent / 1e6);
  if (options.compression.spec != "none" && p.bytesSent > 0 && p.denseBytes == 0) {
    std::printf(" (%s on the pseudo-gradients)", options.compression.spec.c_str());  // diloco
  } else if (options.compression.spec != "none" && p.bytesSent > 0) {
    const std::string warmup =
        result.compressWarmupSteps > 0
            ? fmt::format(" after {} dense steps", result.compressWarmupSteps)
            : "";
    const std::string& spec =
        result.compressSpec.empty() ? options.compression.spec : result.compressSpec;
    std::printf(" (%s%s: %.1fx less than dense, encode %.1f ms, decode %.1f ms)", spec.c_str(),
                warmup.c_str(), p.denseBytes / p.bytesSent, p.encodeMs, p.decodeMs);
  }
  if (!result.staleness.empty()) {  // asgd, ssp
    std::printf("; staleness per rank (mean/max): %s", summarize(result.staleness).c_str());
  }
  if (result.dataCache) {  // --data-url
    const ShardCacheStats& c = *result.dataCache;
    std::string perEpoch;
    for (const EpochRecord& e : result.epochs)
      perEpoch += fmt::format("{}{:.2f}", perEpoch.empty() ? "" : "/", e.dataSeconds);
    std::printf(
        "; data per epoch %s s (rank 0's cache: %lld shards from the server, %.1f MB, "
        "%lld from disk, %lld reads from memory)",
        perEpoch.c_str(), static_cast<long long>(c.remoteFetches), c.remoteBytes / 1e6,
        static_cast<long long>(c.diskHits), static_cast<long long>(c.memoryHits));
  }
  if (result.rounds.size() > 1) {
    std::string sizes;
    for (const RoundRecord& r : result.rounds)
      sizes += (sizes.empty() ? "" : " -> ") + std::to_string(r.workers);
    std::printf("; elastic: %s workers in %zu rounds", sizes.c_str(), result.rounds.size());
  }
  if (result.stopped) {
    std::printf("; stopped early by a signal (exit %d%s)", kStoppedExitCode,
                options.elastic.empty() ? ": resume with --resume" : "");
  }
  std::printf("\n");
  std::fflush(stdout);
}

// What every rank must share: whatever changes the model, the data a rank reads, the traffic or
// the result. Per-rank choices (--metrics, --trace, --quiet, --threads, --data-dir) may differ.
Settings trainSettings(const TrainOptions& o, const std::string& transport) {
  const StrategyKnobs& k = o.strategy;
  const CompressionConfig& c = o.compression;
  auto text = [](auto value) { return fmt::format("{}", value); };
  return {{"--transport", transport},
          {"--model", o.model},
          {"--compute", o.compute},
          {"--compute-scale", text(o.computeScale)},
          {"--dataset", o.dataset},
          {"--epochs", text(o.epochs)},
          {"--steps", text(o.steps)},
          {"--batch-size", text(o.batchSize)},
          {"--lr", text(o.lr)},
          {"--momentum", text(o.momentum)},
          {"--optimizer", o.optimizer},
          {"--weight-decay", text(o.weightDecay)},
          {"--warmup-steps", text(o.warmupSteps)},
          {"--lr-schedule", o.lrSchedule},
          {"--clip-grad-norm", text(o.clipGradNorm)},
          {"--fused-update", text(o.fusedUpdate)},
          {"--lars", text(o.lars)},
          {"--seed", text(o.seed)},
          {"--schedule", o.schedule},
          {"--sync", o.sync},
          {"--ps", text(k.ps)},
          {"--servers", text(k.servers)},
          {"--delay-warmup", text(k.warmup)},
          {"--local-lr", text(k.localLr)},
          {"--local-momentum", text(k.localMomentum)},
          {"--glu", text(k.glu)},
          {"--cd-threshold", text(k.threshold)},
          {"--compress", c.spec},
          {"--compress-override", fmt::format("{}", fmt::join(c.overrides, " "))},
          {"--compress-min-elements", text(c.minElements)},
          {"--compress-warmup", warmupFlagText(c.warmupSteps)},
          {"--compress-warmup-codec", c.warmupCodec},
          {"--guard", c.guard ? "on" : "off"},
          {"--compress-momentum", text(c.momentum)},
          {"--eval-every", text(o.evalEvery)},
          {"--eval-samples", text(o.evalSamples)},
          {"--checkpoint-every", text(o.checkpointEvery)},
          {"--resume", text(o.resume)},
          {"--elastic", o.elastic},
          {"--waves", text(o.waves)},
          {"--wave-consistency", o.waveConsistency}};
}

// --elastic: every worker of the job (torch/elastic/trainer.h); rank 0 of the last round reports.
void runElastic(TrainFlags& flags, CommandContext& context) {
  validateElasticOptions(flags.options);
  Settings settings = trainSettings(flags.options, flags.ranks.transport);
  flags.options.stopOnSignal = true;  // the asked leave; all asked: exit 75
  context.exitCode =
      runElasticWorkers(flags.ranks, context.env, context.argv,
                        [&](const BootstrapConfig& config, const TransportOptions& link) {
                          ElasticOutcome outcome = runElasticTraining(
                              {config, link, settings, context.env.restartCount}, flags.options);
                          if (outcome.rank == 0)
                            printSummary(flags.options, outcome.workers, outcome.result);
                          return outcome.result.stopped ? kStoppedExitCode : 0;
                        });
}

}  // namespace

void addTrainCommand(CLI::App& app, CommandContext& context) {
  auto flags = std::make_shared<TrainFlags>();
  TrainOptions& o = flags->options;
  CLI::App* train = app.add_subcommand("train", "data-parallel training of a model");
  addRankFlags(train, flags->ranks, 2);
  train
      ->add_option("--model", o.model,
                   "mlp | cnn | resnet20 | vgg11 | cnn-gn | vgg11-gn | dlrm | "
                   "gpt[:layers=L,width=D,heads=A,context=T] (default 2, 128, 4, 64)")
      ->capture_default_str();
  train
      ->add_option("--dataset", o.dataset,
                   "fashion-mnist | synthetic | criteo (dlrm) | text[:PATH] (gpt: Debian's "
                   "fortunes, or a UTF-8 file or folder)")
      ->capture_default_str();
  train
      ->add_option("--compute", o.compute,
                   "real | emulate:PROFILE (accelerator compute emulated from a model profile: "
                   "resnet50, vgg19, transformer or a JSON file)")
      ->capture_default_str();
  train
      ->add_option("--compute-scale", o.computeScale,
                   "emulated compute: multiply the profile's times (a device X times slower)")
      ->capture_default_str();
  train->add_option("--data-dir", o.dataDir, "Fashion-MNIST files (criteo: train.txt, test.txt)")
      ->capture_default_str();
  train->add_option("--data-url", o.dataUrl,
                    "http://HOST:PORT/PATH: image shards from this store (gradsync shard), "
                    "cached on disk and in memory; each rank trains its own partition");
  train->add_option("--cache-dir", o.cacheDir,
                    "--data-url's disk cache (default ~/.cache/gradsync/data/<url>)");
  train->add_option("--cache-memory", o.cacheMemoryMiB, "--data-url's memory cache, MiB")
      ->capture_default_str();
  train->add_option("--epochs", o.epochs, "passes over the training set")->capture_default_str();
  train->add_option("--steps", o.steps, "stop after this many steps (overrides --epochs)");
  train->add_option("--batch-size", o.batchSize, "per worker")->capture_default_str();
  train->add_option("--lr", o.lr, "learning rate")->capture_default_str();
  train->add_option("--momentum", o.momentum, "SGD momentum")->capture_default_str();
  train->add_option("--optimizer", o.optimizer, "sgd | adamw | sign (DeMo's update)")
      ->capture_default_str();
  train->add_option("--weight-decay", o.weightDecay, "adamw's decoupled weight decay")
      ->capture_default_str();
  train->add_option("--warmup-steps", o.warmupSteps, "the learning rate rises over these steps")
      ->capture_default_str();
  train
      ->add_option("--lr-schedule", o.lrSchedule,
                   "constant | cosine (after the warm-up, down to a tenth of --lr at the end)")
      ->capture_default_str();
  train->add_option("--clip-grad-norm", o.clipGradNorm, "clip the gradients' L2 norm (0: off)")
      ->capture_default_str();
  train
      ->add_option("--fused-update", o.fusedUpdate,
                   "on | off: the optimizer steps each group through flat buffers (gradient mode)")
      ->capture_default_str();
  train->add_option("--lars", o.lars, "LARS trust coefficient (0: plain SGD; gradient mode)")
      ->capture_default_str();
  train->add_option("--seed", o.seed, "initialisation and data order")->capture_default_str();
  train->add_option("--inject-slow-rank", o.injectSlowRank,
                    "R:MS: rank R's compute takes MS ms longer per step (fault injection)");
  train->add_option("--threads", o.threads, "torch threads per rank")->capture_default_str();
  train
      ->add_option(
          "--schedule", o.schedule,
          "fifo | wfbp | fusion:MB | p3[:slice=N,window=W] | auto[:tune=p3|fusion,steps=N]")
      ->capture_default_str();
  train
      ->add_option("--sync", o.sync,
                   "ssgd | sharded | asgd | ssp:S | odsgd | ssdsgd:K | cdsgd:K | localsgd:H | "
                   "diloco:H[,outer_lr=X,outer_momentum=M,nesterov=on|off,quantize=int8|none,"
                   "fragments=P,delay=T,alpha=A,eager=on|off,group=rank|host]")
      ->capture_default_str();
  StrategyKnobs& k = o.strategy;
  train->add_flag("--ps", k.ps, "ssgd through parameter servers co-located with the workers");
  train->add_option("--servers", k.servers, "run K parameter servers as processes of their own")
      ->capture_default_str();
  train->add_option("--delay-warmup", k.warmup,
                    "odsgd/ssdsgd/cdsgd: plain ssgd steps first (default: 200/500/1000)");
  train->add_option("--local-lr", k.localLr, "delayed strategies' local step (default: --lr)");
  train->add_option("--local-momentum", k.localMomentum,
                    "delayed strategies' local momentum (default: --momentum)");
  train->add_option("--glu", k.glu, "ssdsgd: weight of the global direction")
      ->capture_default_str();
  train->add_option("--cd-threshold", k.threshold, "cdsgd: 2-bit quantization threshold")
      ->capture_default_str();
  train->add_option("--compress", o.compression.spec, "gradient compression: " + methodChoices())
      ->capture_default_str();
  train->add_option("--compress-override", o.compression.overrides,
                    "GLOB=SPEC: compression of the parameters whose names match (repeatable)");
  train
      ->add_option("--compress-min-elements", o.compression.minElements,
                   "smaller parameters go dense")
      ->capture_default_str();
  o.compression.warmupSteps = kAutoWarmup;  // train's default (docs/cli.md says why)
  train->add_option_function<std::string>(
      "--compress-warmup",
      [steps = &o.compression.warmupSteps](const std::string& v) { *steps = parseWarmupFlag(v); },
      "dense steps before compressing: N, or auto = a tenth of the first epoch (default auto)");
  train
      ->add_option("--compress-warmup-codec", o.compression.warmupCodec,
                   "how the warm-up sends what is compressed after it: none (float32), or the "
                   "near-lossless fp16 or int8")
      ->check(CLI::IsMember({"none", "fp16", "int8"}))
      ->capture_default_str();
  train
      ->add_option_function<std::string>(
          "--guard", [guard = &o.compression.guard](const std::string& v) { *guard = v == "on"; },
          "compression guardrail: a unit whose sent values stop pointing along its gradient, or "
          "whose residual or bursts grow past the thresholds, goes dense (default on)")
      ->check(CLI::IsMember({"on", "off"}));
  train->add_flag("--compress-momentum", o.compression.momentum,
                  "1-bit Adam: after the dense warm-up freeze Adam's second moment and compress "
                  "each rank's momentum instead of its gradient (--optimizer adamw)");
  train->add_option("--metrics", o.metricsPath, "write metrics as JSON");
  train->add_option("--eval-every", o.evalEvery, "also evaluate every N steps (0: per epoch)");
  train->add_option("--eval-samples", o.evalSamples,
                    "--eval-every evaluations use the first N test samples (0: all)");
  train->add_option("--trace", o.tracePath, "write a Chrome trace of every rank (Perfetto)");
  train->add_option("--trace-steps", o.traceSteps, "steps to trace, A:B (default 10:19)");
  train->add_option("--checkpoint-dir", o.checkpointDir, "where to keep checkpoints");
  train->add_option("--checkpoint-every", o.checkpointEvery, "steps between checkpoints");
  train->add_flag("--resume", o.resume,
                  "continue from the newest checkpoint (on any number of workers: "
                  "docs/checkpoints.md)");
  train->add_flag("--quiet", o.quiet, "no progress display");
  train->add_option("--elastic", o.elastic,
                    "MIN:MAX workers: go on without lost workers, take in new ones");
  train->add_option("--record-samples", o.recordSamples,
                    "--elastic: write each step's sample indices of every worker to DIR");
  train
      ->add_option("--hang-timeout", o.hangTimeout,
                   "--elastic: evict a worker silent this long (stopped, frozen; 0: off)")
      ->capture_default_str();
  train->add_option("--waves", o.waves, "Wavelet's tick-tock waves per worker (1: none)")
      ->capture_default_str();
  train
      ->add_option("--wave-consistency", o.waveConsistency,
                   "--waves' weights: shared (each wave's update at once) | accumulate (one "
                   "update per round of waves: SSGD at waves x batch)")
      ->capture_default_str();
  addRecommendationFlags(train, flags->recommendation, flags->bottomMlp, flags->topMlp);
  addPipelineFlags(train, o.pipeline);
  train->callback([flags, train, &context] {
    keepFreedMemoryInHeap();  // this process and the ranks it launches (they run this callback)
    // Data-parallel waves are threads whose peaks interleave; a pipeline's waves are processes
    // (and must allocate as the naive pipeline they are compared with does).
    if (flags->options.waves > 1 && !flags->options.pipeline.enabled()) shareOneHeapAcrossThreads();
    if (flags->options.resume && flags->options.checkpointDir.empty()) {
      throw ConfigError("--resume needs --checkpoint-dir");
    }
    if (flags->options.model == "dlrm" && !flags->options.elastic.empty()) {
      throw ConfigError("--elastic does not support --model dlrm",
                        {.hint = "dlrm's embedding servers recover on their own (--recovery, "
                                 "docs/recommendation.md); its workers are not elastic"});
    }
    if (flags->options.model == "dlrm") {  // its own trainer (docs/recommendation.md)
      if (flags->options.compute != "real") {
        throw ConfigError("--model dlrm computes on this host: --compute must be real");
      }
      RecommendationOptions recommendation = flags->recommendation;
      recommendation.train = flags->options;
      if (train->count("--dataset") == 0) recommendation.train.dataset = "synthetic";
      context.exitCode = runRecommendation(flags->ranks, context, recommendation, *flags->bottomMlp,
                                           *flags->topMlp);
      return;
    }
    flags->options = withModelDefaults(
        flags->options, [train](const std::string& flag) { return train->count(flag) > 0; });
    validateTrainOptions(flags->options);
    if (flags->options.pipeline.enabled() && !flags->options.elastic.empty()) {
      throw ConfigError("--elastic does not combine with --pipeline",
                        {.hint = "a pipeline's stages are fixed ranks; drop one of them"});
    }
    if (!flags->options.elastic.empty()) {
      if (flags->options.compute != "real") {
        throw ConfigError("--elastic trains with real compute: --compute must be real");
      }
      runElastic(*flags, context);
      return;
    }
    if (!flags->options.recordSamples.empty()) {
      throw ConfigError("--record-samples records elastic runs", {.hint = "add --elastic MIN:MAX"});
    }
    if (train->count("--hang-timeout") > 0) {
      throw ConfigError("--hang-timeout watches elastic runs",
                        {.hint = "add --elastic MIN:MAX; a fixed job's bound is --timeout"});
    }
    if (flags->options.pipeline.enabled()) {  // its own trainer (torch/pipeline/pipeline.h)
      if (flags->options.compute != "real") {
        throw ConfigError("--pipeline trains with real compute: --compute must be real");
      }
      Settings settings = trainSettings(flags->options, flags->ranks.transport);
      addPipelineSettings(flags->options.pipeline, settings);
      context.exitCode = runPipelineCommand(flags->ranks, train->count("--workers") > 0, context,
                                            flags->options, settings);
      return;
    }
    flags->options = resolveCompute(flags->options, flags->ranks.workers);
    RankFlags ranks = flags->ranks;
    ranks.workers += flags->options.strategy.servers;  // separate servers are ranks too
    Settings settings = trainSettings(flags->options, ranks.transport);
    flags->options.stopOnSignal = true;  // SIGTERM/SIGINT: finish the step, checkpoint, exit 75
    context.exitCode = runRanks(ranks, context.env, context.argv, settings, [&](Transport& t) {
      TrainResult result = runTraining(t, flags->options);
      int workers = t.size() - flags->options.strategy.servers;
      if (t.rank() == 0) printSummary(flags->options, workers, result);
      return result.stopped ? kStoppedExitCode : 0;
    });
  });
}

}  // namespace gradsync
