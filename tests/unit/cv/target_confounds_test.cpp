// The target's confounds regressed out inside the folds (cv::NestedCvOptions::targetConfounds): the adjusted targets
// against least squares solved independently here, fit_on rows, no leakage from held-out subjects, and the nested CV's
// fits and scores on exactly those targets.
#include <cmath>
#include <random>

#include <Eigen/QR>
#include <gtest/gtest.h>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/metrics/metrics.hpp"

using namespace neuromkl;

namespace {

/// n subjects: age, a two-level site dummy, a regression target y = 1 + 0.8 age - 0.5 site + brain + noise, and linear
/// kernels of two feature groups (the first carries `brain`, the second age).
struct Cohort {
  Eigen::VectorXd y, age, site, brain;
  learners::KernelList kernels;
  gram::Covariates confounds;
};

Cohort MakeCohort(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> z;
  Cohort c;
  c.y.resize(n);
  c.age.resize(n);
  c.site.resize(n);
  c.brain.resize(n);
  Eigen::MatrixXd A(n, 6), B(n, 4);
  for (int i = 0; i < n; ++i) {
    c.age[i] = 60 + 8 * z(rng);
    c.site[i] = i % 3 == 0 ? 1.0 : 0.0;
    c.brain[i] = z(rng);
    c.y[i] = 1 + 0.8 * c.age[i] - 0.5 * c.site[i] + 2 * c.brain[i] + 0.3 * z(rng);
    for (int j = 0; j < 6; ++j) A(i, j) = (j < 2 ? c.brain[i] : 0.0) + z(rng);
    for (int j = 0; j < 4; ++j) B(i, j) = (j < 2 ? (c.age[i] - 60) / 8 : 0.0) + z(rng);
  }
  c.kernels = {A * A.transpose(), B * B.transpose()};
  c.confounds.design.resize(n, 3);
  c.confounds.design << Eigen::VectorXd::Ones(n), c.age, c.site;
  return c;
}

/// Least squares of y on the design rows `fit` (Householder QR, independent of the library's pseudo-inverse).
Eigen::VectorXd LeastSquares(const Eigen::MatrixXd& design, const Eigen::VectorXd& y, const std::vector<int>& fit) {
  Eigen::MatrixXd C(static_cast<Eigen::Index>(fit.size()), design.cols());
  Eigen::VectorXd t(static_cast<Eigen::Index>(fit.size()));
  for (std::size_t k = 0; k < fit.size(); ++k) {
    C.row(static_cast<Eigen::Index>(k)) = design.row(fit[k]);
    t[static_cast<Eigen::Index>(k)] = y[fit[k]];
  }
  return C.householderQr().solve(t);
}

std::vector<int> Range(int from, int to) {
  std::vector<int> v;
  for (int i = from; i < to; ++i) v.push_back(i);
  return v;
}

cv::InnerSplitter RegressionInner(int k) {
  return [k](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({cv::Scheme::KFold, k, 1}, learners::Task::Regression, y, {}, {}, 50 + f, "inner");
  };
}

// Residuals with coefficients fitted on the training rows; the test rows use the same coefficients. Tolerance: both
// sides solve a 3-column least-squares problem with condition number ~1e3 (age ~ 60 beside the intercept), so they
// agree to ~1e-13 relative on targets of magnitude ~50.
TEST(TargetConfounds, AdjustedTargetsAreLeastSquaresResidualsOfTheTrainingFit) {
  const Cohort c = MakeCohort(40, 3);
  const std::vector<int> train = Range(0, 30), test = Range(30, 40);
  const Eigen::VectorXd b = LeastSquares(c.confounds.design, c.y, train);
  const Eigen::VectorXd adjustedTest = cv::AdjustedTargets(c.y, c.confounds, train, test);
  const Eigen::VectorXd adjustedTrain = cv::AdjustedTargets(c.y, c.confounds, train, train);
  for (int i = 30; i < 40; ++i) EXPECT_NEAR(adjustedTest[i - 30], c.y[i] - c.confounds.design.row(i).dot(b), 1e-10);
  for (int i = 0; i < 30; ++i) EXPECT_NEAR(adjustedTrain[i], c.y[i] - c.confounds.design.row(i).dot(b), 1e-10);
  EXPECT_NEAR(adjustedTrain.sum(), 0.0, 1e-9);  // the intercept: training residuals have mean zero
  const Eigen::VectorXd coefficients = cv::TargetConfoundCoefficients(c.y, c.confounds, train);
  ASSERT_EQ(coefficients.size(), 3);
  for (Eigen::Index j = 0; j < 3; ++j) EXPECT_NEAR(coefficients[j], b[j], 1e-9 * std::max(1.0, std::abs(b[j])));
  // Rows past the targets (unlabelled subjects) have no target to adjust.
  const Eigen::VectorXd withUnlabelled = cv::AdjustedTargets(c.y, c.confounds, train, {31, 40, 32});
  EXPECT_TRUE(std::isnan(withUnlabelled[1]));
  EXPECT_EQ(withUnlabelled[0], adjustedTest[1]);
  EXPECT_EQ(withUnlabelled[2], adjustedTest[2]);
}

TEST(TargetConfounds, FitOnRowsAloneFitTheCoefficients) {
  Cohort c = MakeCohort(40, 4);
  c.confounds.fitRow.assign(40, 0);
  std::vector<int> fitRows;
  for (int i = 0; i < 30; i += 2) {
    c.confounds.fitRow[static_cast<std::size_t>(i)] = 1;
    fitRows.push_back(i);
  }
  const Eigen::VectorXd b = LeastSquares(c.confounds.design, c.y, fitRows);
  const Eigen::VectorXd adjusted = cv::AdjustedTargets(c.y, c.confounds, Range(0, 30), Range(0, 40));
  for (int i = 0; i < 40; ++i) EXPECT_NEAR(adjusted[i], c.y[i] - c.confounds.design.row(i).dot(b), 1e-10);
}

// Nothing of a held-out subject enters the coefficients: changing its target and its confounds changes only its own
// adjusted target, bit for bit.
TEST(TargetConfounds, HeldOutSubjectsDoNotMoveTheFit) {
  const Cohort c = MakeCohort(40, 5);
  Cohort changed = c;
  changed.y[35] += 100;
  changed.confounds.design(35, 1) = 5;
  changed.confounds.design(35, 2) = 1 - c.confounds.design(35, 2);
  const std::vector<int> train = Range(0, 30), test = Range(30, 40);
  const Eigen::VectorXd a = cv::AdjustedTargets(c.y, c.confounds, train, test), b = cv::AdjustedTargets(changed.y, changed.confounds, train, test);
  for (int i = 0; i < 10; ++i) {
    if (i == 5) EXPECT_NE(a[i], b[i]);
    else EXPECT_EQ(a[i], b[i]);
  }
  EXPECT_EQ(cv::TargetConfoundCoefficients(c.y, c.confounds, train), cv::TargetConfoundCoefficients(changed.y, changed.confounds, train));
}

// With fixed parameters, each outer fold's model is the fit to its training set's adjusted targets: the same as a nested
// CV without confounds given those targets (bit for bit), and its decisions are scored against the adjusted test targets.
TEST(TargetConfounds, EachOuterFoldFitsAndScoresItsAdjustedTargets) {
  const Cohort c = MakeCohort(48, 6);
  const learners::Targets targets{learners::Task::Regression, c.y, 0};
  const auto outer = cv::MakeFolds({cv::Scheme::KFold, 4, 1}, learners::Task::Regression, c.y, {}, {}, 2, "outer");
  const std::vector<cv::LearnerPlan> plans = {{"krr", "krr", cv::ExpandGrid({{"lambda", 1.0}}, {})},
                                              {"en", "enmkl_krr", cv::ExpandGrid({{"lambda", 1.0}, {"mu", 0.5}}, {})}};
  cv::NestedCvOptions options;
  options.targetConfounds = std::make_shared<const gram::Covariates>(c.confounds);
  const auto adjusted = cv::RunNestedCv(c.kernels, targets, outer, RegressionInner(3), plans, options);
  for (std::size_t f = 0; f < outer.size(); ++f) {
    // The fold's training targets adjusted by hand; its test rows get anything (they are never fitted).
    const Eigen::VectorXd b = LeastSquares(c.confounds.design, c.y, outer[f].train);
    Eigen::VectorXd byHand = Eigen::VectorXd::Constant(c.y.size(), 1e6);
    for (int i : outer[f].train) byHand[i] = c.y[i] - c.confounds.design.row(i).dot(b);
    const Eigen::VectorXd exact = cv::AdjustedTargets(c.y, c.confounds, outer[f].train, outer[f].train);
    for (std::size_t k = 0; k < outer[f].train.size(); ++k) {
      EXPECT_NEAR(byHand[outer[f].train[k]], exact[static_cast<Eigen::Index>(k)], 1e-10);
      byHand[outer[f].train[k]] = exact[static_cast<Eigen::Index>(k)];  // the library's rounding: fits compare bit for bit
    }
    const auto plain = cv::RunNestedCv(c.kernels, {learners::Task::Regression, byHand, 0}, {outer[f]}, RegressionInner(3), plans, {});
    for (std::size_t l = 0; l < plans.size(); ++l) {
      const auto& fold = adjusted[l].folds[f];
      EXPECT_EQ(fold.model.coef, plain[l].folds[0].model.coef) << plans[l].label << " fold " << f;
      EXPECT_EQ(fold.decision, plain[l].folds[0].decision);
      ASSERT_EQ(fold.target.size(), static_cast<Eigen::Index>(outer[f].test.size()));
      for (std::size_t k = 0; k < outer[f].test.size(); ++k) {
        const int i = outer[f].test[k];
        EXPECT_NEAR(fold.target[static_cast<Eigen::Index>(k)], c.y[i] - c.confounds.design.row(i).dot(b), 1e-10);
      }
      EXPECT_EQ(cv::HeldOutTargets(fold, c.y), fold.target);
    }
  }
  // The pooled metrics score the adjusted targets: MSE over the out-of-fold predictions against fold.target.
  double squared = 0;
  int count = 0;
  for (const auto& fold : adjusted[0].folds)
    for (Eigen::Index k = 0; k < fold.decision.size(); ++k, ++count) squared += std::pow(fold.decision[k] - fold.target[k], 2);
  EXPECT_NEAR(cv::Summarise(adjusted[0], targets).pooled.at("mse"), squared / count, 1e-12 * squared / count);
}

// The confounds explain most of the target here (R^2 ~ 0.9): adjusted, the brain part is what is left to predict, and
// the kernel carrying it predicts the adjusted target far better than the raw-target fit's decisions do.
TEST(TargetConfounds, TheAdjustedTargetIsWhatTheBrainPartPredicts) {
  const Cohort c = MakeCohort(120, 7);
  const learners::Targets targets{learners::Task::Regression, c.y, 0};
  const auto outer = cv::MakeFolds({cv::Scheme::KFold, 5, 1}, learners::Task::Regression, c.y, {}, {}, 3, "outer");
  const std::vector<cv::LearnerPlan> plans = {{"krr", "krr", cv::ExpandGrid({{"lambda", 1.0}}, {})}};
  cv::NestedCvOptions options;
  options.targetConfounds = std::make_shared<const gram::Covariates>(c.confounds);
  const learners::KernelList brainOnly = {c.kernels[0]};
  const auto outcome = cv::RunNestedCv(brainOnly, targets, outer, RegressionInner(3), plans, options);
  const double r = cv::Summarise(outcome[0], targets).pooled.at("pearson_r");
  EXPECT_GT(r, 0.6);  // observed ~0.8: the brain part is 2 x N(0,1) beside 0.3 noise, seen through 2 of 6 noisy features
  // The adjusted targets are nearly uncorrelated with age (the training fits remove it; only fold-to-fold changes remain).
  Eigen::VectorXd pooledTarget(c.y.size()), pooledAge(c.y.size());
  Eigen::Index at = 0;
  for (const auto& fold : outcome[0].folds)
    for (std::size_t k = 0; k < fold.test.size(); ++k, ++at) {
      pooledTarget[at] = fold.target[static_cast<Eigen::Index>(k)];
      pooledAge[at] = c.age[fold.test[k]];
    }
  EXPECT_LT(std::abs(metrics::Regress(pooledTarget, pooledAge).pearsonR), 0.2);
}

}  // namespace
