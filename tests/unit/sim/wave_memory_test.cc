// Data-parallel Wavelet's device-memory timeline and throughput (sim/wave_memory.h) against hand
// computations on a 3-layer profile, and the properties that hold for any profile.
#include "sim/wave_memory.h"

#include <gtest/gtest.h>

#include <random>

#include "gradsync/error.h"

namespace gradsync::sim {
namespace {

// Three layers of forward 1 s and backward 2 s at a batch of 4; they keep 10, 20 and 30 bytes
// per sample; 10 parameters: 10 × 4 B × (weights, gradient, momentum) = 120 static bytes.
ModelProfile threeLayers() {
  ModelProfile p;
  p.name = "three";
  p.batchSize = 4;
  for (int i = 0; i < 3; ++i) {
    LayerProfile l;
    l.name = std::string{"abc"[i]};
    l.forwardSeconds = 1;
    l.backwardSeconds = 2;
    l.activationBytesPerSample = 10.0 * (i + 1);
    p.layers.push_back(l);
  }
  p.layers[0].tensors = {tensorShape("w", {10})};
  return p;
}

WaveMemoryOptions waves(int k, int64_t batch, int64_t steps = 8) {
  return {
      .waves = k, .batchPerWave = batch, .optimizerSlots = 1, .saturationBatch = 0, .steps = steps};
}

TEST(WaveMemory, OneWaveHoldsEveryActivationAtTheTurn) {
  const auto r = simulateWaveMemory(threeLayers(), waves(1, 8));
  EXPECT_DOUBLE_EQ(r.staticBytes, 120);
  EXPECT_DOUBLE_EQ(r.peakBytes, 120 + 8 * 60);
  // Forward 3 s and backward 6 s, twice the profile's batch: 18 s for 8 samples.
  EXPECT_DOUBLE_EQ(r.secondsPerIteration, 18);
  EXPECT_DOUBLE_EQ(r.samplesPerSecond, 8.0 / 18);
  // Rises in the forward, falls in the backward, back to the static bytes.
  ASSERT_EQ(r.timeline.size(), 8u * 6);
  EXPECT_DOUBLE_EQ(r.timeline[0].bytes, 120 + 80);
  EXPECT_DOUBLE_EQ(r.timeline[2].bytes, 600);
  EXPECT_FALSE(r.timeline[3].forward);
  EXPECT_EQ(r.timeline[3].layer, 2);
  EXPECT_DOUBLE_EQ(r.timeline[3].seconds, 3 * 2 + 2 * 2);  // twice the batch, twice the time
  EXPECT_DOUBLE_EQ(r.timeline.back().bytes, 120);
}

// By hand, two waves of 4: tick's forward alone (0-3 s); then tock's forward shares the device
// with tick's backward, each at half speed: tock's layer 0 ends at 5 s, its layer 1 at 7 s, when
// tick's last layer's backward frees its 30 × 4 bytes, and tock's layer 2 keeps as much. So the
// peak is static + 4 × (10 + 20 + 30) + 4 × (10 + 20) = 480, against 600 for one wave of 8.
TEST(WaveMemory, TwoOffsetWavesPeakBelowOneWaveOfTwiceTheBatch) {
  const auto one = simulateWaveMemory(threeLayers(), waves(2, 4, 1));
  EXPECT_DOUBLE_EQ(one.peakBytes, 480);
  EXPECT_DOUBLE_EQ(one.timeline.back().bytes, 120);
  const auto many = simulateWaveMemory(threeLayers(), waves(2, 4, 8));
  EXPECT_DOUBLE_EQ(many.peakBytes, 480);
  // Tock's forward of layer 1 starts at 5 s, when the device is at its peak.
  bool seen = false;
  for (const MemoryEvent& e : many.timeline)
    if (e.wave == 1 && e.layer == 1 && e.forward && e.seconds == 5) seen = e.bytes == 480;
  EXPECT_TRUE(seen);
}

// A minimum offset of 3/4 of an iteration alone (9 s, so 6.75 s) between the forwards, by hand:
// wave 0's backward has freed its last layer and most of its middle one when wave 1 starts;
// wave 1 keeps its last layer at 10.75 s while wave 0 still holds its first layer only:
// 120 + 4 × 60 + 4 × 10 = 400, against the gates' 480. A whole iteration apart, the waves never
// overlap: one wave of 4's peak.
TEST(WaveMemory, ALargerOffsetHoldsLess) {
  WaveMemoryOptions o = waves(2, 4, 1);
  o.minimumOffset = 0.75;
  const auto r = simulateWaveMemory(threeLayers(), o);
  EXPECT_DOUBLE_EQ(r.peakBytes, 400);
  bool seen = false;
  for (const MemoryEvent& e : r.timeline)
    if (e.wave == 1 && e.layer == 2 && e.forward) seen = e.seconds == 10.75 && e.bytes == 400;
  EXPECT_TRUE(seen);
  o.minimumOffset = 1;
  o.steps = 8;
  EXPECT_DOUBLE_EQ(simulateWaveMemory(threeLayers(), o).peakBytes, 120 + 4 * 60);
  o.minimumOffset = 1.5;
  EXPECT_THROW(simulateWaveMemory(threeLayers(), o), ConfigError);
}

// Without a saturation batch one wave already fills the device: the waves only share it, so
// the throughput is one wave's at twice the batch, no more.
TEST(WaveMemory, WavesGainNoThroughputOnAFullDevice) {
  const auto one = simulateWaveMemory(threeLayers(), waves(1, 8, 16));
  const auto two = simulateWaveMemory(threeLayers(), waves(2, 4, 16));
  EXPECT_NEAR(two.samplesPerSecond, one.samplesPerSecond, 1e-9);
}

// A device that a batch of 8 fills and 480 bytes of memory: one wave fits 6 samples
// (120 + 60 × 6 = 480) and takes as long as 8 would, 18 s; two waves fit 4 each
// (120 + 90 × 4 = 480), at half the device each. Backward phases take turns and each is twice a
// forward, so half the time a backward runs alone on half the device: 8 samples per 2 × 12 s,
// no better than the one wave. What the waves fit does not pay for the gates here.
TEST(WaveMemory, WavesCanFitLessThanTheGatesCost) {
  WaveMemoryOptions o = waves(1, 1, 16);
  o.saturationBatch = 8;
  EXPECT_EQ(largestFittingBatch(threeLayers(), o, 480), 6);
  EXPECT_EQ(largestFittingBatch(threeLayers(), o, 479), 5);
  o.batchPerWave = 6;
  const auto one = simulateWaveMemory(threeLayers(), o);
  EXPECT_DOUBLE_EQ(one.secondsPerIteration, 18);
  WaveMemoryOptions t = waves(2, 1, 16);
  t.saturationBatch = 8;
  EXPECT_EQ(largestFittingBatch(threeLayers(), t, 480), 4);
  t.batchPerWave = 4;
  const auto two = simulateWaveMemory(threeLayers(), t);
  EXPECT_LE(two.peakBytes, 480);
  EXPECT_DOUBLE_EQ(two.secondsPerIteration, 24);
  EXPECT_DOUBLE_EQ(two.samplesPerSecond, one.samplesPerSecond);
  EXPECT_EQ(largestFittingBatch(threeLayers(), t, 100), 0);  // below the static bytes
}

// The paper's case: activations mostly in the last layer, freed first, so a second wave costs
// little memory. On 732 bytes one wave fits 6 (120 + 102 × 6), two waves 5 each (tick full,
// 102 × 5, plus tock's first two layers, 2 × 5: 640; 6 would need 744). A batch of 16 fills the
// device, so the two waves run side by side at full speed: a round is two backward phases,
// 2 × 24 s for 10 samples, against 36 s for one wave's 6: 1.25×.
TEST(WaveMemory, OnAMemoryBoundDeviceWavesFitMoreWork) {
  ModelProfile p = threeLayers();
  p.layers[0].activationBytesPerSample = 1;
  p.layers[1].activationBytesPerSample = 1;
  p.layers[2].activationBytesPerSample = 100;
  WaveMemoryOptions o = waves(1, 1, 16);
  o.saturationBatch = 16;
  EXPECT_EQ(largestFittingBatch(p, o, 732), 6);
  o.batchPerWave = 6;
  const auto one = simulateWaveMemory(p, o);
  EXPECT_DOUBLE_EQ(one.samplesPerSecond, 6.0 / 36);
  o.waves = 2;
  EXPECT_EQ(largestFittingBatch(p, o, 732), 5);
  o.batchPerWave = 5;
  const auto two = simulateWaveMemory(p, o);
  EXPECT_DOUBLE_EQ(two.peakBytes, 640);
  EXPECT_DOUBLE_EQ(two.samplesPerSecond, 10.0 / 48);
  EXPECT_DOUBLE_EQ(two.samplesPerSecond / one.samplesPerSecond, 1.25);
}

// For any profile and offset, K waves of B share the static bytes and never hold more than one
// wave of K·B, nor less than one wave of B; when the static bytes dominate, the two peaks meet.
TEST(WaveMemory, WavesNeverPeakAboveOneWaveOfTheirSum) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> time(0.1, 3), bytes(1, 100);
  for (int trial = 0; trial < 200; ++trial) {
    ModelProfile p;
    p.name = "random";
    p.batchSize = 8;
    const int layers = 1 + trial % 6;
    for (int i = 0; i < layers; ++i)
      p.layers.push_back({.name = "l",
                          .tensors = {tensorShape("w", {1 + trial})},
                          .forwardSeconds = time(random),
                          .backwardSeconds = time(random),
                          .activationBytesPerSample = bytes(random)});
    p.updateSeconds = trial % 3 == 0 ? 0 : time(random);
    const int k = 2 + trial % 3;
    const double together = simulateWaveMemory(p, waves(1, 3 * k)).peakBytes;
    WaveMemoryOptions apartOptions = waves(k, 3);
    apartOptions.minimumOffset = (trial % 5) / 4.0;  // 0 (the gates alone) to a whole iteration
    const double apart = simulateWaveMemory(p, apartOptions).peakBytes;
    const double single = simulateWaveMemory(p, waves(1, 3)).peakBytes;
    EXPECT_LE(apart, together * (1 + 1e-12)) << trial;
    EXPECT_GE(apart, single * (1 - 1e-12)) << trial;
  }
  ModelProfile heavy = threeLayers();
  heavy.layers[0].tensors = {tensorShape("w", {1'000'000})};
  const double together = simulateWaveMemory(heavy, waves(1, 8)).peakBytes;
  EXPECT_NEAR(simulateWaveMemory(heavy, waves(2, 4)).peakBytes / together, 1.0, 1e-4);
}

TEST(WaveMemory, RefusesWhatItCannotModel) {
  ModelProfile bare = threeLayers();
  for (LayerProfile& l : bare.layers) l.activationBytesPerSample = 0;
  EXPECT_THROW(simulateWaveMemory(bare, waves(2, 4)), ConfigError);
  EXPECT_THROW(simulateWaveMemory(threeLayers(), waves(0, 4)), ConfigError);
  EXPECT_THROW(simulateWaveMemory(threeLayers(), waves(2, 0)), ConfigError);
  EXPECT_THROW(simulateWaveMemory(threeLayers(), waves(2, 4, 0)), ConfigError);
}

}  // namespace
}  // namespace gradsync::sim
