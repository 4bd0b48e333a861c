// Missing covariate values imputed inside the folds (gram/residualise.hpp): the fill from hand-derivable cases, the
// residualised fold equal to one of a design filled by hand, and nothing of a fold's fit depending on its test subjects.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/gram/residualise.hpp"

using namespace neuromkl;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Eigen::VectorXi Idx(std::initializer_list<int> v) {
  Eigen::VectorXi out(static_cast<Eigen::Index>(v.size()));
  Eigen::Index i = 0;
  for (const int x : v) out[i++] = x;
  return out;
}

/// Intercept, one numeric column, and a categorical covariate with three levels (reference "a"; dummies "b", "c").
gram::Covariates SmallDesign() {
  gram::Covariates cov;
  cov.design.resize(6, 4);
  // clang-format off
  cov.design << 1, 3,    0,    0,     // a
                1, 1,    1,    0,     // b
                1, kNaN, 1,    0,     // b
                1, 7,    kNaN, kNaN,  // (missing)
                1, 5,    0,    1,     // c
                1, kNaN, 0,    1;     // c
  // clang-format on
  cov.categoryOf = {-1, -1, 0, 0};
  return cov;
}

}  // namespace

// Medians and modes a reader can check by eye.
TEST(Imputation, FillIsTheTrainingMedianAndMostFrequentLevel) {
  const gram::Covariates cov = SmallDesign();
  // Training rows 0-3: ages 3, 1, 7 -> median 3; levels a, b, b -> b.
  Eigen::RowVectorXd fill = gram::ImputationFill(cov, Idx({0, 1, 2, 3}));
  EXPECT_TRUE(std::isnan(fill[0]));  // the intercept has nothing missing
  EXPECT_EQ(fill[1], 3.0);
  EXPECT_EQ(fill[2], 1.0);
  EXPECT_EQ(fill[3], 0.0);
  // Training rows 0, 1, 3, 4: ages 3, 1, 7, 5 -> (3 + 5) / 2 = 4; levels a, b, c tie -> the first, the reference a.
  fill = gram::ImputationFill(cov, Idx({0, 1, 3, 4}));
  EXPECT_EQ(fill[1], 4.0);
  EXPECT_EQ(fill[2], 0.0);
  EXPECT_EQ(fill[3], 0.0);
  // Training rows 2-5: age 7, 5 -> 6; levels b, c, c -> c.
  fill = gram::ImputationFill(cov, Idx({2, 3, 4, 5}));
  EXPECT_EQ(fill[1], 6.0);
  EXPECT_EQ(fill[2], 0.0);
  EXPECT_EQ(fill[3], 1.0);
  // Every column, as an exported model keeps them: the intercept's median is 1.
  EXPECT_EQ(gram::ImputationFill(cov, Idx({0, 1, 2, 3}), "fold", true)[0], 1.0);

  const Eigen::MatrixXd filled = gram::FilledRows(cov, Idx({2, 3}), gram::ImputationFill(cov, Idx({0, 1, 2, 3})));
  Eigen::MatrixXd expected(2, 4);
  expected << 1, 3, 1, 0, 1, 7, 1, 0;
  EXPECT_EQ(filled, expected);
}

TEST(Imputation, TrainingRowsWithoutAValueAreAnErrorNamingTheFold) {
  const gram::Covariates cov = SmallDesign();
  try {
    gram::ImputationFill(cov, Idx({2, 5}), "outer fold 2");
    FAIL() << "expected covariates:NothingToImpute";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "covariates:NothingToImpute");
    EXPECT_NE(std::string(e.what()).find("outer fold 2"), std::string::npos) << e.what();
  }
  // Only a column that is missing somewhere needs a training value: the category of rows 2 and 5 is known.
  gram::Covariates numericKnown = cov;
  numericKnown.design(2, 1) = 2;
  numericKnown.design(5, 1) = 4;
  EXPECT_NO_THROW(gram::ImputationFill(numericKnown, Idx({2, 5})));
}

// The fold residualised with missing values equals the fold of the design filled by hand with the training fill, and
// nothing of the training side depends on a test subject's covariates (missing or not). Tolerance 1e-12 relative:
// the same double operations on the same numbers (zero difference expected; headroom for a reordered sum).
TEST(Imputation, FoldEqualsTheHandFilledDesignAndIgnoresTestSubjects) {
  std::mt19937 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int n = 30, V = 12;
  Eigen::MatrixXd X(n, V);
  for (int i = 0; i < n; ++i)
    for (int v = 0; v < V; ++v) X(i, v) = normal(rng);
  gram::Covariates cov;
  cov.design.resize(n, 3);
  cov.categoryOf = {-1, -1, 0};
  for (int i = 0; i < n; ++i) cov.design.row(i) << 1.0, 50 + 10 * normal(rng), i % 3 == 0 ? 1.0 : 0.0;
  for (const int i : {2, 7, 11, 25}) cov.design(i, 1) = kNaN;  // 2, 7, 11 train; 25 test
  for (const int i : {4, 26}) cov.design(i, 2) = kNaN;
  std::vector<int> train, test;
  for (int i = 0; i < n; ++i) (i >= 24 ? test : train).push_back(i);
  const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size()));

  // The hand fill: the median of the 21 training ages with a value (odd: the middle one) and the training mode.
  std::vector<double> ages;
  int ones = 0, zeros = 0;
  for (const int i : train) {
    if (!std::isnan(cov.design(i, 1))) ages.push_back(cov.design(i, 1));
    if (!std::isnan(cov.design(i, 2))) (cov.design(i, 2) == 1.0 ? ones : zeros)++;
  }
  ASSERT_EQ(ages.size(), 21U);
  std::sort(ages.begin(), ages.end());
  gram::Covariates byHand = cov;
  for (int i = 0; i < n; ++i) {
    if (std::isnan(byHand.design(i, 1))) byHand.design(i, 1) = ages[10];
    if (std::isnan(byHand.design(i, 2))) byHand.design(i, 2) = ones > zeros ? 1.0 : 0.0;
  }
  ASSERT_FALSE(byHand.HasMissing());

  const Eigen::MatrixXd K = X * X.transpose();
  auto residualised = [&](const gram::Covariates& c) {
    gram::FoldKernel f = gram::SliceFold(K, tr, te);
    gram::ResidualiseFold(f, gram::MakeFoldResidualiser(c, tr, te));
    return f;
  };
  const gram::FoldKernel imputed = residualised(cov), hand = residualised(byHand);
  const double scale = K.cwiseAbs().maxCoeff();
  EXPECT_LE((imputed.train - hand.train).cwiseAbs().maxCoeff(), 1e-12 * scale);
  EXPECT_LE((imputed.testTrain - hand.testTrain).cwiseAbs().maxCoeff(), 1e-12 * scale);
  EXPECT_LE((imputed.testDiag - hand.testDiag).cwiseAbs().maxCoeff(), 1e-12 * scale);

  // Test subjects' covariates changed (a value given, another removed, the category flipped): the training block and
  // the coefficients are bit for bit the same; the changed test rows differ.
  gram::Covariates changed = cov;
  changed.design(25, 1) = 90;
  changed.design(24, 1) = kNaN;
  changed.design(26, 2) = 1;
  const gram::FoldResidualiser a = gram::MakeFoldResidualiser(cov, tr, te), b = gram::MakeFoldResidualiser(changed, tr, te);
  EXPECT_EQ(a.P, b.P);
  EXPECT_EQ(a.trainA, b.trainA);
  const gram::FoldKernel moved = residualised(changed);
  EXPECT_EQ(moved.train, imputed.train);
  EXPECT_GT((moved.testTrain - imputed.testTrain).cwiseAbs().maxCoeff(), 1e-6 * scale);
}
