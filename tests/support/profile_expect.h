// GoogleTest checks that two model profiles are the same, field by field, naming the layer and
// tensor that differ (JSON round trips of built-in and measured profiles).
#pragma once

#include <gtest/gtest.h>

#include "sim/model_profile.h"

namespace gradsync::testing {

inline void expectSameTensors(const std::vector<TensorShape>& actual,
                              const std::vector<TensorShape>& expected, const std::string& where) {
  ASSERT_EQ(actual.size(), expected.size()) << where;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_EQ(actual[i].name, expected[i].name) << where << " tensor " << i;
    EXPECT_EQ(actual[i].dims, expected[i].dims) << where << " tensor " << i;
    EXPECT_EQ(actual[i].elements, expected[i].elements) << where << " tensor " << i;
  }
}

inline void expectSameProfile(const ModelProfile& actual, const ModelProfile& expected) {
  EXPECT_EQ(actual.name, expected.name);
  EXPECT_EQ(actual.device, expected.device);
  EXPECT_EQ(actual.source, expected.source);
  EXPECT_EQ(actual.batchSize, expected.batchSize);
  EXPECT_DOUBLE_EQ(actual.updateSeconds, expected.updateSeconds);
  ASSERT_EQ(actual.layers.size(), expected.layers.size()) << expected.name;
  for (size_t i = 0; i < expected.layers.size(); ++i) {
    const LayerProfile& a = actual.layers[i];
    const LayerProfile& e = expected.layers[i];
    EXPECT_EQ(a.name, e.name) << expected.name << " layer " << i;
    EXPECT_DOUBLE_EQ(a.forwardSeconds, e.forwardSeconds) << e.name;
    EXPECT_DOUBLE_EQ(a.backwardSeconds, e.backwardSeconds) << e.name;
    EXPECT_DOUBLE_EQ(a.activationBytesPerSample, e.activationBytesPerSample) << e.name;
    expectSameTensors(a.tensors, e.tensors, expected.name + " layer " + e.name);
  }
}

}  // namespace gradsync::testing
