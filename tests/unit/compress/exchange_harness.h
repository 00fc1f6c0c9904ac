// Runs one compressor per rank thread over loopback and returns what each rank ended with, so
// method tests compare a real exchange with a naive reference.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "compress/compressor.h"

namespace gradsync::testing {

struct RankExchange {
  std::vector<float> result;  // the average the exchange left in the gradient
  std::vector<float> sent;    // this rank's decoded contribution
};

// Builds one compressor per rank with `make`, then runs `steps` exchanges: at step s rank r
// feeds inputs(s, r). Returns the last step's outputs, indexed by rank.
std::vector<RankExchange> runExchange(
    int ranks, const std::function<std::unique_ptr<Compressor>()>& make,
    const std::function<std::vector<float>(int step, int rank)>& inputs, int steps = 1,
    uint64_t seed = 7);

// One tensor of `elements` values (dims default to a vector).
TensorShape tensorShape(size_t elements, std::vector<int64_t> dims = {});

// Arguments with one ",key=value" option, as CompressSpec::parse would give them.
MethodArgs withOption(const std::string& key, double value);
// Arguments with the ":value" (a density, a threshold...), as CompressSpec::parse gives them.
MethodArgs withValue(double value);

// Bitwise equality with the first difference named (gtest would print a million elements).
::testing::AssertionResult sameBits(const std::vector<float>& got,
                                    const std::vector<float>& expected);

// Deterministic pseudo-random normal values (mean 0, standard deviation `scale`).
std::vector<float> gaussian(size_t count, uint64_t seed, float scale = 1.0f);

// The largest magnitude in `v` (0 for none), for tolerances relative to an input.
double maxAbs(const std::vector<float>& v);

}  // namespace gradsync::testing
