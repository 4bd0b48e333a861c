#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "neuromkl/metrics/metrics.hpp"

using namespace neuromkl;

namespace {
Eigen::VectorXd V(std::initializer_list<double> v) {
  Eigen::VectorXd x(static_cast<Eigen::Index>(v.size()));
  Eigen::Index i = 0;
  for (double a : v) x[i++] = a;
  return x;
}
}  // namespace

TEST(Metrics, AucByHandAndWithTies) {
  // Positive-negative pairs ranked correctly: (0.9 > 0.5), (0.9 > 0.1), (0.4 < 0.5), (0.4 > 0.1): 3 / 4.
  EXPECT_DOUBLE_EQ(metrics::Auc(V({1, 1, -1, -1}), V({0.9, 0.4, 0.5, 0.1})), 0.75);
  EXPECT_DOUBLE_EQ(metrics::Auc(V({1, 1, -1, -1}), V({1, 1, 1, 1})), 0.5);  // all tied: 1/2 each
  EXPECT_DOUBLE_EQ(metrics::Auc(V({1, -1, -1}), V({0.2, 0.2, 0.1})), 0.75);  // one tie (1/2) + one win, over 2 pairs
  EXPECT_TRUE(std::isnan(metrics::Auc(V({1, 1}), V({0.3, 0.4}))));
}

TEST(Metrics, RocCurveByHandWithTies) {
  using Points = std::vector<std::pair<double, double>>;
  auto points = [](const std::vector<metrics::RocPoint>& curve) {
    Points p;
    for (const auto& q : curve) p.emplace_back(q.falsePositiveRate, q.truePositiveRate);
    return p;
  };
  // Decision values in descending order: 0.9 (+), 0.5 (-), 0.4 (+), 0.1 (-); 2 positives, 2 negatives, so every
  // subject moves the curve by 1/2 up (positive) or right (negative).
  EXPECT_EQ(points(metrics::RocCurve(V({1, 1, -1, -1}), V({0.9, 0.4, 0.5, 0.1}))), (Points{{0, 0}, {0, 0.5}, {0.5, 0.5}, {0.5, 1}, {1, 1}}));
  // A positive and a negative tied at 0.2 move the curve diagonally, from (0, 0) to (1/2, 1) in one step; then 0.1 (-).
  EXPECT_EQ(points(metrics::RocCurve(V({1, -1, -1}), V({0.2, 0.2, 0.1}))), (Points{{0, 0}, {0.5, 1}, {1, 1}}));
  // Every value tied: the diagonal.
  EXPECT_EQ(points(metrics::RocCurve(V({1, 1, -1, -1}), V({1, 1, 1, 1}))), (Points{{0, 0}, {1, 1}}));
  // A NaN or infinite decision is left out, as in Auc; one class only: no curve.
  const double nan = std::nan("");
  EXPECT_EQ(points(metrics::RocCurve(V({1, -1, 1, -1}), V({nan, 0.9, 0.8, INFINITY}))), (Points{{0, 0}, {1, 0}, {1, 1}}));
  EXPECT_TRUE(metrics::RocCurve(V({1, 1}), V({0.3, 0.4})).empty());
  EXPECT_TRUE(metrics::RocCurve(V({-1, -1, 1}), V({0.3, 0.4, nan})).empty());
}

TEST(Metrics, RocCurveEnclosesTheAuc) {
  // The trapezoids under the curve (ties diagonal) are the Mann-Whitney AUC with ties counted 1/2, for any data:
  // decision values rounded to one decimal so that ties between the classes occur.
  std::mt19937 rng(11);
  std::normal_distribution<double> noise;
  for (int trial = 0; trial < 20; ++trial) {
    const Eigen::Index n = 15 + trial;
    Eigen::VectorXd y(n), f(n);
    for (Eigen::Index i = 0; i < n; ++i) {
      y[i] = i % 3 == 0 ? 1 : -1;
      f[i] = std::round(10 * (noise(rng) + 0.8 * y[i])) / 10;
    }
    const auto curve = metrics::RocCurve(y, f);
    ASSERT_GE(curve.size(), 2u);
    EXPECT_EQ(curve.back().falsePositiveRate, 1.0);
    EXPECT_EQ(curve.back().truePositiveRate, 1.0);
    double area = 0;
    for (std::size_t k = 1; k < curve.size(); ++k) {
      EXPECT_GE(curve[k].falsePositiveRate, curve[k - 1].falsePositiveRate);
      EXPECT_GE(curve[k].truePositiveRate, curve[k - 1].truePositiveRate);
      area += (curve[k].falsePositiveRate - curve[k - 1].falsePositiveRate) * (curve[k].truePositiveRate + curve[k - 1].truePositiveRate) / 2;
    }
    EXPECT_NEAR(area, metrics::Auc(y, f), 1e-12) << "trial " << trial;  // the same fractions summed otherwise: rounding only
  }
}

TEST(Metrics, ClassificationByHand) {
  // truth  + + + + - -    predicted (sign) + + + - + -
  const auto m = metrics::Classify(V({1, 1, 1, 1, -1, -1}), V({2, 1, 0.5, -1, 0.2, -3}));
  EXPECT_EQ(m.tp, 3);
  EXPECT_EQ(m.fn, 1);
  EXPECT_EQ(m.fp, 1);
  EXPECT_EQ(m.tn, 1);
  EXPECT_DOUBLE_EQ(m.accuracy, 4.0 / 6);
  EXPECT_DOUBLE_EQ(m.recallPositive, 0.75);
  EXPECT_DOUBLE_EQ(m.recallNegative, 0.5);
  EXPECT_DOUBLE_EQ(m.balancedAccuracy, 0.625);
  EXPECT_DOUBLE_EQ(m.precisionPositive, 0.75);
  EXPECT_DOUBLE_EQ(m.precisionNegative, 0.5);
}

TEST(Metrics, WilsonIntervalByHand) {
  // p = 0.5, n = 10, z = 1.96: centre 0.5, half width 1.96 sqrt(0.025 + 0.0096040) / 1.38416 = 0.26340.
  const auto m = metrics::Classify(V({1, 1, 1, 1, 1, -1, -1, -1, -1, -1}), V({1, 1, 1, -1, -1, -1, -1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(m.accuracy, 0.5);
  EXPECT_NEAR(m.accuracyLow, 0.236593, 1e-5);
  EXPECT_NEAR(m.accuracyHigh, 0.763407, 1e-5);
}

TEST(Metrics, RegressionByHandWithHonestNames) {
  // y = (1, 2, 3), f = (1, 2, 4): MSE = MAE = 1/3; r = 3 / sqrt(2 * 42/9); R^2 = 1 - 1/2; NMSE = (1/3)/(2/3).
  const auto m = metrics::Regress(V({1, 2, 3}), V({1, 2, 4}));
  EXPECT_DOUBLE_EQ(m.mse, 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.mae, 1.0 / 3);
  EXPECT_NEAR(m.pearsonR, 3.0 / std::sqrt(2.0 * 42.0 / 9.0), 1e-15);
  EXPECT_DOUBLE_EQ(m.r2, 0.5);
  EXPECT_DOUBLE_EQ(m.nmse, 0.5);
  // Perfectly correlated but shifted predictions: r = 1, yet R^2 (coefficient of determination) is negative.
  const auto shifted = metrics::Regress(V({1, 2, 3}), V({11, 12, 13}));
  EXPECT_NEAR(shifted.pearsonR, 1.0, 1e-15);
  EXPECT_NEAR(shifted.rSquared, 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(shifted.r2, 1.0 - 300.0 / 2.0);
  const auto names = metrics::AsMap(m);
  EXPECT_TRUE(names.count("r2") && names.count("r_squared_pearson") && names.count("pearson_r"));
}

// A failed fit's decision values are NaN. Counted as the negative class (NaN >= 0 is false) and sorted by `<` in
// the AUC, they would let a learner whose fits failed score perfectly.
TEST(Metrics, NaNDecisionsAreNeverScored) {
  const double nan = std::nan("");
  // Two scored pairs (one right, one wrong) and four failed ones on the negative class.
  const auto m = metrics::Classify(V({1, -1, -1, -1, -1, -1}), V({0.5, 0.3, nan, nan, nan, nan}));
  EXPECT_EQ(m.n, 2);
  EXPECT_EQ(m.unscored, 4);
  EXPECT_EQ(m.tn, 0);  // before: 4 true negatives from the NaNs
  EXPECT_DOUBLE_EQ(m.accuracy, 0.5);
  EXPECT_DOUBLE_EQ(m.balancedAccuracy, 0.5);
  EXPECT_DOUBLE_EQ(m.auc, 1.0);  // the one scored pair is ranked correctly
  // Every decision NaN: nothing is scored, every rate is NaN (before: balanced accuracy 0.5, AUC of the sort order).
  const auto none = metrics::Classify(V({1, 1, -1, -1}), V({nan, nan, nan, nan}));
  EXPECT_EQ(none.n, 0);
  EXPECT_EQ(none.unscored, 4);
  for (double v : {none.accuracy, none.balancedAccuracy, none.auc, none.recallPositive, none.accuracyLow}) EXPECT_TRUE(std::isnan(v));
  // AUC with NaNs interleaved: the NaN pairs are left out, not ranked.
  EXPECT_DOUBLE_EQ(metrics::Auc(V({1, -1, 1, -1}), V({nan, 0.9, 0.8, nan})), 0.0);
  const auto r = metrics::Regress(V({1, 2, 3, 4}), V({1, 2, nan, INFINITY}));
  EXPECT_EQ(r.n, 2);
  EXPECT_EQ(r.unscored, 2);
  EXPECT_DOUBLE_EQ(r.mse, 0.0);
  EXPECT_TRUE(std::isnan(metrics::Regress(V({1, 2}), V({nan, nan})).mse));
}

TEST(Metrics, MulticlassByHand) {
  // labels 0 0 1 1 2 2; predictions (arg max) 0 1 1 2 2 0, plus a failed row (NaN) and a tie.
  Eigen::VectorXd y(8);
  y << 0, 0, 1, 1, 2, 2, 1, 0;
  Eigen::MatrixXd s(8, 3);
  s << 0.9, 0.1, 0.0,  //
      0.2, 0.5, 0.3,   //
      0.1, 0.8, 0.1,   //
      0.3, 0.2, 0.5,   //
      0.0, 0.1, 0.9,   //
      0.6, 0.3, 0.1,   //
      NAN, 0.1, 0.2,   // failed fit: never scored
      0.4, 0.4, 0.2;   // tie between classes 0 and 1: class 0 (lower index)
  EXPECT_EQ(metrics::PredictedClasses(s)[7], 0.0);
  EXPECT_TRUE(std::isnan(metrics::PredictedClasses(s)[6]));
  const auto six = metrics::MultiClassify(y.head(6), s.topRows(6), 3);
  // Confusion (rows true, columns predicted): [1 1 0; 0 1 1; 1 0 1].
  Eigen::MatrixXd confusion(3, 3);
  confusion << 1, 1, 0, 0, 1, 1, 1, 0, 1;
  EXPECT_EQ(six.confusion, confusion);
  EXPECT_DOUBLE_EQ(six.accuracy, 0.5);
  EXPECT_DOUBLE_EQ(six.balancedAccuracy, 0.5);  // recalls 1/2, 1/2, 1/2
  for (int c = 0; c < 3; ++c) EXPECT_DOUBLE_EQ(six.precision[c], 0.5);
  // kappa: p_o = 1/2, p_e = (2*2 + 2*2 + 2*2) / 36 = 1/3, (1/2 - 1/3) / (2/3) = 1/4.
  EXPECT_DOUBLE_EQ(six.kappa, 0.25);
  // One-vs-rest AUC: class 0 scores {0.9, 0.2} vs {0.1, 0.3, 0.0, 0.6}: 6 of 8 pairs; class 1 likewise 6/8;
  // class 2 {0.9, 0.1} vs {0.0, 0.3, 0.1, 0.5}: 4 + 1 + 1/2 (tie) = 5.5 of 8.
  EXPECT_DOUBLE_EQ(six.auc[0], 0.75);
  EXPECT_DOUBLE_EQ(six.auc[1], 0.75);
  EXPECT_DOUBLE_EQ(six.auc[2], 0.6875);
  EXPECT_DOUBLE_EQ(six.macroAuc, (0.75 + 0.75 + 0.6875) / 3);
  const auto all = metrics::MultiClassify(y, s, 3);
  EXPECT_EQ(all.n, 7);
  EXPECT_EQ(all.unscored, 1);
  EXPECT_DOUBLE_EQ(all.recall[0], 2.0 / 3);  // the tie row (true 0) is predicted 0
  const auto map = metrics::AsMap(six);
  EXPECT_DOUBLE_EQ(map.at("confusion_2_0"), 1);
  EXPECT_DOUBLE_EQ(map.at("recall_1"), 0.5);
  EXPECT_DOUBLE_EQ(map.at("kappa"), 0.25);
  // A class absent from the labels has NaN recall and AUC and stays out of the macro means.
  Eigen::VectorXd y2(4);
  y2 << 0, 0, 1, 1;
  Eigen::MatrixXd s2(4, 3);
  s2 << 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 1;
  const auto absent = metrics::MultiClassify(y2, s2, 3);
  EXPECT_TRUE(std::isnan(absent.recall[2]));
  EXPECT_DOUBLE_EQ(absent.balancedAccuracy, (0.5 + 0.5) / 2);  // recalls 1/2, 1/2; counting class 2 as 0 would give 1/3
}
