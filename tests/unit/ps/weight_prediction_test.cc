// LWP on the workers of asgd and ssp (ps/weight_prediction.h) against hand computations.
#include "ps/weight_prediction.h"

#include <gtest/gtest.h>

#include <vector>

namespace gradsync {
namespace {

std::vector<float> predict(WeightPredictor& predictor, size_t unit, std::vector<float> pulled,
                           PsStaleness reply, double* horizon = nullptr) {
  std::vector<float> predicted(pulled.size(), -99.0f);
  const double used = predictor.predict(unit, pulled, reply, predicted);
  if (horizon) *horizon = used;
  return predicted;
}

// Unsmoothed (β = 0). The first reply has no previous one: trained on as it is. Then the horizon
// is a running mean of the staleness (weight 1/8 for the newest) and the direction the
// displacement per update since the previous reply:
//   reply 1  staleness 3, updates 4:  mean 3, no prediction
//   reply 2  staleness 0, updates 5:  mean 3 + (0 - 3)/8 = 2.625, over 1 update:
//            0.5 + 2.625 (0.5 - 1) = -0.8125,  -1 + 2.625 (-1 + 2) = 1.625
//   reply 3  staleness 3, updates 11 (ssp held the reply back: 6 updates, not staleness + 1):
//            mean 2.625 + (3 - 2.625)/8 = 2.671875, per update 2.671875/6 = 0.4453125:
//            0.1 + 0.4453125 (0.1 - 0.5) = -0.078125,  -0.2 + 0.4453125 (-0.2 + 1) = 0.15625
TEST(WeightPrediction, FirstReplyAsItIsThenARunningMeanOverTheUpdatesBetweenReplies) {
  WeightPredictor predictor({2}, 0);
  double horizon = -1;
  EXPECT_EQ(predict(predictor, 0, {1.0f, -2.0f}, {.staleness = 3, .updates = 4}, &horizon),
            (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(horizon, 0);
  EXPECT_EQ(predictor.horizon(0), 3);

  std::vector<float> second =
      predict(predictor, 0, {0.5f, -1.0f}, {.staleness = 0, .updates = 5}, &horizon);
  EXPECT_DOUBLE_EQ(horizon, 2.625);
  EXPECT_FLOAT_EQ(second[0], -0.8125f);
  EXPECT_FLOAT_EQ(second[1], 1.625f);

  std::vector<float> third =
      predict(predictor, 0, {0.1f, -0.2f}, {.staleness = 3, .updates = 11}, &horizon);
  EXPECT_DOUBLE_EQ(horizon, 2.671875);
  EXPECT_FLOAT_EQ(third[0], -0.078125f);
  EXPECT_FLOAT_EQ(third[1], 0.15625f);
  // What a checkpoint keeps: the reply, not the prediction.
  std::span<const float> pulled = predictor.pulled(0);
  EXPECT_EQ(std::vector<float>(pulled.begin(), pulled.end()), (std::vector<float>{0.1f, -0.2f}));
}

// Fresh pushes (staleness 0 every time: nobody else updated the unit) predict no movement: the
// worker trains on the replies exactly, as without LWP.
TEST(WeightPrediction, StalenessZeroPredictsNothing) {
  WeightPredictor predictor({3}, 0);
  for (uint64_t k = 1; k <= 4; ++k) {
    const float x = 1.0f / static_cast<float>(k);
    EXPECT_EQ(predict(predictor, 0, {x, 2 * x, -x}, {.staleness = 0, .updates = k}),
              (std::vector<float>{x, 2 * x, -x}));
  }
  EXPECT_EQ(predictor.horizon(0), 0);
}

// Staleness 3 every time (asgd with 4 equal workers): the mean stays 3 and each reply moved 4
// updates, so the prediction is w + 3/4 (w - w_prev). Units are independent, an empty one too.
TEST(WeightPrediction, SteadyStalenessThreeAndIndependentUnits) {
  WeightPredictor predictor({1, 0, 2}, 0);
  EXPECT_EQ(predictor.pulled(0).size(), 0u);  // before any reply
  predict(predictor, 0, {2.0f}, {.staleness = 3, .updates = 4});
  predict(predictor, 2, {5.0f, 6.0f}, {.staleness = 1, .updates = 2});
  EXPECT_TRUE(predict(predictor, 1, {}, {.staleness = 3, .updates = 4}).empty());
  std::vector<float> next = predict(predictor, 0, {1.0f}, {.staleness = 3, .updates = 8});
  EXPECT_FLOAT_EQ(next[0], 1.0f + 0.75f * (1.0f - 2.0f));
  EXPECT_EQ(predictor.horizon(0), 3);
  EXPECT_EQ(predictor.horizon(2), 1);  // untouched by unit 0's replies
  std::vector<float> other = predict(predictor, 2, {4.0f, 6.0f}, {.staleness = 1, .updates = 4});
  EXPECT_FLOAT_EQ(other[0], 4.0f + 0.5f * (4.0f - 5.0f));
  EXPECT_FLOAT_EQ(other[1], 6.0f);
}

// Smoothed (β = 0.5), staleness 2 every time, replies 3 updates apart: the direction d̄ averages
// the displacements per update d as a velocity does (d̄ = 0 before the second reply):
//   reply 2  w 0.5:  d = -1/6, d̄ = 0.5 (0) + 0.5 (-1/6) = -1/12,     ŵ = 0.5 + 2 (-1/12) = 1/3
//   reply 3  w 0:    d = -1/6, d̄ = 0.5 (-1/12) + 0.5 (-1/6) = -1/8,  ŵ = 0 + 2 (-1/8) = -1/4
//   reply 4  w 0.5:  d = +1/6, d̄ = 0.5 (-1/8) + 0.5 (1/6) = 1/48,    ŵ = 0.5 + 2/48
// An oscillation barely moves the prediction (unsmoothed, reply 4 would predict 0.5 + 2/6).
TEST(WeightPrediction, SmoothedDirectionAveragesTheDisplacements) {
  WeightPredictor predictor({1}, 0.5);
  EXPECT_EQ(predict(predictor, 0, {1.0f}, {.staleness = 2, .updates = 3})[0], 1.0f);
  EXPECT_FLOAT_EQ(predict(predictor, 0, {0.5f}, {.staleness = 2, .updates = 6})[0], 1.0f / 3);
  EXPECT_FLOAT_EQ(predict(predictor, 0, {0.0f}, {.staleness = 2, .updates = 9})[0], -0.25f);
  EXPECT_FLOAT_EQ(predict(predictor, 0, {0.5f}, {.staleness = 2, .updates = 12})[0],
                  0.5f + 2.0f / 48);
}

}  // namespace
}  // namespace gradsync
