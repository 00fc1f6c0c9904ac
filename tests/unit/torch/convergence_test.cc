// Every compression method, with error feedback where the method uses it, trains the cnn on the
// real Fashion-MNIST to within 1.5 accuracy points of dense SSGD in the same number of steps
// (2 workers as threads over loopback; the data and initialisation are identical).
#include <gtest/gtest.h>

#include <cstdio>

#include "train_on_threads.h"

namespace gradsync::testing {
namespace {

constexpr int64_t kSteps = 400;  // global batch 128: 51,200 samples, 0.85 epochs

TrainOptions options(const std::string& compress) {
  TrainOptions o;
  o.model = "cnn";
  o.steps = kSteps;
  o.quiet = true;
  o.compression.spec = compress;
  return o;
}

double denseAccuracy() {
  static const double accuracy = train(2, options("none")).finalTestAccuracy;
  return accuracy;
}

class Convergence : public ::testing::TestWithParam<std::string> {};

TEST_P(Convergence, WithinOneAndAHalfPointsOfDense) {
  TrainResult result = train(2, options(GetParam()));
  double dense = denseAccuracy();
  std::printf("%-12s accuracy %.2f%% (dense %.2f%%), %.2f MB/step (%.1fx less than dense)\n",
              GetParam().c_str(), 100 * result.finalTestAccuracy, 100 * dense,
              result.perStep.bytesSent / 1e6, result.perStep.denseBytes / result.perStep.bytesSent);
  EXPECT_GE(result.finalTestAccuracy, dense - 0.015);
}

INSTANTIATE_TEST_SUITE_P(Methods, Convergence,
                         ::testing::Values("fp16", "topk:0.01", "mstopk:0.01", "gtopk:0.01",
                                           "randomk:0.01", "dgc:0.01", "qsgd:16", "terngrad",
                                           "onebit", "signsgd", "powersgd:4", "gradiveq:4"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace gradsync::testing
