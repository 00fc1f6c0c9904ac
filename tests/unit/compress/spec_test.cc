// Spec parsing, the method table, and the per-tensor policy.
#include <gtest/gtest.h>

#include "compress/error_feedback.h"
#include "compress/policy.h"
#include "compress/registry.h"
#include "compress/spec.h"
#include "gradsync/error.h"

namespace gradsync {
namespace {

std::string configErrorOf(const std::string& text) {
  try {
    CompressSpec::parse(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(CompressSpec, ParsesValuesKeysAndErrorFeedback) {
  CompressSpec spec = CompressSpec::parse("topk:0.05");
  EXPECT_EQ(spec.method, "topk");
  EXPECT_DOUBLE_EQ(spec.args.value, 0.05);
  EXPECT_TRUE(spec.errorFeedback);  // the method's default
  EXPECT_EQ(spec.toString(), "topk:0.05");

  spec = CompressSpec::parse("qsgd:8,bucket=128");
  EXPECT_EQ(spec.args.number("bucket", 512), 128);
  EXPECT_FALSE(spec.errorFeedback);
  EXPECT_EQ(CompressSpec::parse("qsgd,ef=on").toString(), "qsgd:16,ef=on");
  EXPECT_FALSE(CompressSpec::parse("topk:0.1,ef=off").errorFeedback);
  EXPECT_TRUE(CompressSpec::parse("none").dense());
}

TEST(CompressSpec, EveryMethodParsesWithItsDefaults) {
  for (const MethodInfo& m : compressionMethods()) {
    CompressSpec spec = CompressSpec::parse(m.name);
    EXPECT_EQ(spec.method, m.name);
    EXPECT_EQ(CompressSpec::parse(spec.toString()).toString(), spec.toString()) << m.name;
  }
}

TEST(CompressSpec, BadInputIsAClearError) {
  EXPECT_NE(configErrorOf("zip").find("topk:R"), std::string::npos);  // lists the choices
  EXPECT_NE(configErrorOf("topk:abc").find("topk"), std::string::npos);
  EXPECT_NE(configErrorOf("topk:0").find("topk"), std::string::npos);    // out of range
  EXPECT_NE(configErrorOf("topk:1.5").find("topk"), std::string::npos);  // out of range
  EXPECT_NE(configErrorOf("qsgd:4,levels=3").find("bucket"), std::string::npos);
  EXPECT_NE(configErrorOf("fp16:3").find("no ':' value"), std::string::npos);
  EXPECT_NE(configErrorOf("topk,ef=maybe").find("on or off"), std::string::npos);
  EXPECT_NE(configErrorOf("topk,bucket").find("key=value"), std::string::npos);
}

TEST(CompressSpec, ErrorFeedbackWrapsOnlyWhenAsked) {
  TensorShape shape = tensorShape("w", {32, 32});
  auto wrapped = makeCompressor(CompressSpec::parse("topk:0.1"), {&shape, 1});
  EXPECT_NE(dynamic_cast<ErrorFeedback*>(wrapped.get()), nullptr);
  auto bare = makeCompressor(CompressSpec::parse("topk:0.1,ef=off"), {&shape, 1});
  EXPECT_EQ(dynamic_cast<ErrorFeedback*>(bare.get()), nullptr);
  EXPECT_EQ(makeCompressor(CompressSpec::parse("none"), {&shape, 1}), nullptr);
}

TEST(CompressSpec, ErrorFeedbackDecayIsParsedCheckedAndPassedOn) {
  const CompressSpec spec = CompressSpec::parse("sparseloco,ef_decay=0.95");
  EXPECT_DOUBLE_EQ(spec.errorFeedbackDecay, 0.95);
  EXPECT_EQ(CompressSpec::parse(spec.toString()).toString(), spec.toString());
  EXPECT_EQ(CompressSpec::parse("topk:0.1").errorFeedbackDecay, 1);
  EXPECT_NE(configErrorOf("topk,ef_decay=1.5").find("0 <= β <= 1"), std::string::npos);
  EXPECT_NE(configErrorOf("topk,ef_decay=-0.1").find("0 <= β <= 1"), std::string::npos);
  EXPECT_NE(configErrorOf("topk,ef=off,ef_decay=0.9").find("error feedback, which is off"),
            std::string::npos);
  EXPECT_NE(configErrorOf("hitopk,ef_decay=0.9").find("keeps its residual itself"),
            std::string::npos);
  EXPECT_NE(configErrorOf("topk,ef_decay=x").find("ef_decay"), std::string::npos);
}

const std::vector<TensorShape> kModel = {
    tensorShape("features.0.weight", {64, 1, 3, 3}), tensorShape("features.0.bias", {64}),
    tensorShape("classifier.0.weight", {128, 3136}), tensorShape("classifier.0.bias", {128}),
    tensorShape("classifier.2.weight", {10, 128})};

TEST(CompressionPolicy, SmallTensorsGoDenseAndOverridesWin) {
  CompressionConfig config{.spec = "topk:0.01",
                           .overrides = {"classifier.2.*=fp16", "*.0.bias=powersgd:2"},
                           .minElements = 1024};
  CompressionPlan plan = planCompression(config, kModel, 0.9);
  ASSERT_EQ(plan.perTensor.size(), kModel.size());
  EXPECT_TRUE(plan.perTensor[0].dense());           // 576 elements < 1024
  EXPECT_EQ(plan.perTensor[1].method, "powersgd");  // an override beats the size rule
  EXPECT_EQ(plan.perTensor[2].method, "topk");
  EXPECT_EQ(plan.perTensor[3].method, "powersgd");
  EXPECT_EQ(plan.perTensor[4].method, "fp16");
  EXPECT_TRUE(plan.any());
  std::vector<int> groups = plan.groups();
  EXPECT_EQ(groups[1], groups[3]);
  EXPECT_NE(groups[0], groups[2]);
}

TEST(CompressionPolicy, DgcAbsorbsTheMomentum) {
  CompressionPlan plan = planCompression({.spec = "dgc:0.01"}, kModel, 0.9);
  EXPECT_TRUE(plan.absorbsMomentum(2));
  EXPECT_FALSE(plan.absorbsMomentum(1));  // dense bias: the optimizer keeps its momentum
  EXPECT_DOUBLE_EQ(plan.perTensor[2].args.momentum, 0.9);
}

TEST(CompressionPolicy, BadOverridesAndWarmUpsAreRefused) {
  EXPECT_THROW(planCompression({.overrides = {"classifier.*"}}, kModel, 0), ConfigError);
  EXPECT_THROW(planCompression({.overrides = {"x=zip"}}, kModel, 0), ConfigError);
  EXPECT_THROW(planCompression({.warmupSteps = -1}, kModel, 0), ConfigError);
  EXPECT_FALSE(planCompression({}, kModel, 0).any());
}

// --compress-warmup auto: a tenth of the first epoch, only when anything is compressed.
TEST(CompressionPolicy, AutoWarmUpIsATenthOfTheFirstEpochWhenCompressing) {
  EXPECT_EQ(resolveWarmupSteps({.spec = "topk:0.01", .warmupSteps = kAutoWarmup}, 468), 47);
  EXPECT_EQ(resolveWarmupSteps({.spec = "topk:0.01", .warmupSteps = kAutoWarmup}, 234), 23);
  EXPECT_EQ(resolveWarmupSteps({.spec = "topk:0.01", .warmupSteps = kAutoWarmup}, 3), 1);
  EXPECT_EQ(resolveWarmupSteps({.spec = "none", .warmupSteps = kAutoWarmup}, 468), 0);
  EXPECT_EQ(resolveWarmupSteps({.overrides = {"fc*=qsgd:16"}, .warmupSteps = kAutoWarmup}, 100),
            10);
  EXPECT_EQ(resolveWarmupSteps({.spec = "topk:0.01", .warmupSteps = 5}, 468), 5);
  EXPECT_EQ(resolveWarmupSteps({.spec = "topk:0.01", .warmupSteps = 0}, 468), 0);
  EXPECT_THROW(resolveWarmupSteps({.spec = "topk:0.01", .warmupSteps = -2}, 468), ConfigError);
}

// Under auto, dgc without a warm-up of its own ramps its sparsity over the first half epoch;
// a given warm-up, another method, or an explicit --compress-warmup is left as it is.
TEST(CompressionPolicy, AutoGivesDgcItsSparsityRampOverHalfTheFirstEpoch) {
  CompressionConfig c = resolveAutoWarmups({.spec = "dgc:0.01", .warmupSteps = kAutoWarmup}, 468);
  EXPECT_EQ(c.spec, "dgc:0.01,warmup=234");
  EXPECT_EQ(c.warmupSteps, 47);
  EXPECT_EQ(resolveAutoWarmups({.spec = "dgc", .warmupSteps = kAutoWarmup}, 3).spec,
            "dgc,warmup=2");
  EXPECT_EQ(resolveAutoWarmups({.spec = "dgc:0.01,warmup=9", .warmupSteps = kAutoWarmup}, 468).spec,
            "dgc:0.01,warmup=9");
  EXPECT_EQ(resolveAutoWarmups({.spec = "topk:0.01", .warmupSteps = kAutoWarmup}, 468).spec,
            "topk:0.01");
  c = resolveAutoWarmups({.spec = "dgc:0.01", .warmupSteps = 5}, 468);
  EXPECT_EQ(c.spec, "dgc:0.01");
  EXPECT_EQ(c.warmupSteps, 5);
  c = resolveAutoWarmups(
      {.overrides = {"fc*=dgc:0.01,clip=1", "conv*=topk:0.01"}, .warmupSteps = kAutoWarmup}, 100);
  EXPECT_EQ(c.overrides,
            (std::vector<std::string>{"fc*=dgc:0.01,clip=1,warmup=50", "conv*=topk:0.01"}));
  EXPECT_EQ(c.warmupSteps, 10);
  // The ramped spec is one dgc accepts.
  EXPECT_NO_THROW(planCompression(
      resolveAutoWarmups({.spec = "dgc:0.01", .warmupSteps = kAutoWarmup}, 468), kModel, 0.9));
  EXPECT_THROW(resolveAutoWarmups({.spec = "dgc:2", .warmupSteps = kAutoWarmup}, 468), ConfigError);
}

TEST(CompressionPolicy, WarmUpFlagParsesAutoAndCounts) {
  EXPECT_EQ(parseWarmupFlag("auto"), kAutoWarmup);
  EXPECT_EQ(parseWarmupFlag("0"), 0);
  EXPECT_EQ(parseWarmupFlag("120"), 120);
  for (const char* bad : {"", "-1", "1.5", "12x", "Auto"}) {
    EXPECT_THROW(parseWarmupFlag(bad), ConfigError) << bad;
  }
  EXPECT_EQ(warmupFlagText(kAutoWarmup), "auto");
  EXPECT_EQ(warmupFlagText(47), "47");
}

}  // namespace
}  // namespace gradsync
