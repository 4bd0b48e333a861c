// Probabilities (Platt scaling) and brain-age bias correction: the fits, their metrics, and
// how nested CV fits them on inner out-of-fold predictions of each outer training set only.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "../learners/learner_fixtures.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/metrics/calibration.hpp"

using namespace neuromkl;

namespace {
cv::InnerSplitter Inner(int k, learners::Task task = learners::Task::Classification) {
  return [k, task](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({cv::Scheme::StratifiedKFold, k, 1}, task, y, {}, {}, 100 + f, "inner");
  };
}
}  // namespace

// Two distinct decision values make the logistic model saturated: its maximum-likelihood fit reproduces
// the mean Platt target at each value exactly, P(+1) = 1 / (1 + exp(A f + B)) = tbar(f), so with
// L(f) = log((1 - tbar) / tbar): A = (L(1) - L(-1)) / 2, B = (L(1) + L(-1)) / 2. Platt's targets are
// (N+ + 1) / (N+ + 2) for positives and 1 / (N- + 2) for negatives. The Newton iteration stops when the
// gradient is below 1e-5; with a Hessian whose smallest eigenvalue is about 2 here, the parameters are
// then within ~1e-5 of the optimum: 1e-4 is the tolerance.
TEST(Platt, SaturatedHandCaseMatchesTheClosedForm) {
  Eigen::VectorXd f(20), y(20);
  for (int i = 0; i < 10; ++i) f[i] = 1.0, y[i] = i < 8 ? 1.0 : -1.0;    // 8 positives, 2 negatives at f = +1
  for (int i = 10; i < 20; ++i) f[i] = -1.0, y[i] = i < 13 ? 1.0 : -1.0;  // 3 positives, 7 negatives at f = -1
  const double np = 11, nn = 9, hi = (np + 1) / (np + 2), lo = 1 / (nn + 2);
  const double t1 = (8 * hi + 2 * lo) / 10, t0 = (3 * hi + 7 * lo) / 10;
  const double L1 = std::log((1 - t1) / t1), L0 = std::log((1 - t0) / t0);
  const metrics::PlattScaling p = metrics::FitPlatt(f, y);
  ASSERT_TRUE(p.Valid());
  EXPECT_TRUE(p.converged);
  EXPECT_NEAR(p.a, (L1 - L0) / 2, 1e-4);
  EXPECT_NEAR(p.b, (L1 + L0) / 2, 1e-4);
  EXPECT_NEAR(metrics::PlattProbability(p, 1.0), t1, 1e-4);
  EXPECT_NEAR(metrics::PlattProbability(p, -1.0), t0, 1e-4);
  // Far-out decision values give probabilities in (0, 1) without overflow.
  EXPECT_GT(metrics::PlattProbability(p, 1e6), 0.999);
  EXPECT_LT(metrics::PlattProbability(p, -1e6), 1e-3);
  // One class only: no fit.
  EXPECT_FALSE(metrics::FitPlatt(f.head(8), y.head(8)).Valid());
  EXPECT_TRUE(std::isnan(metrics::PlattProbability(metrics::FitPlatt(f.head(8), y.head(8)), 0.0)));
}

TEST(Platt, BrierLogLossAndBinsByHand) {
  Eigen::VectorXd y(3), p(3);
  y << 1, -1, 1;
  p << 0.8, 0.3, std::nan("");  // the NaN (a failed fold) is left out
  EXPECT_NEAR(metrics::BrierScore(y, p), (0.04 + 0.09) / 2, 1e-15);
  EXPECT_NEAR(metrics::LogLoss(y, p), -(std::log(0.8) + std::log(0.7)) / 2, 1e-15);
  const auto bins = metrics::Reliability(y, p, 10);
  EXPECT_EQ(bins[8].count, 1);
  EXPECT_EQ(bins[3].count, 1);
  EXPECT_DOUBLE_EQ(bins[8].observed, 1.0);
  EXPECT_DOUBLE_EQ(bins[3].observed, 0.0);
}

TEST(BiasCorrection, RecoversALinearBiasAndRemovesTheGapSlope) {
  Eigen::VectorXd age(6), pred(6);
  age << 20, 30, 40, 50, 60, 70;
  pred = 0.5 * age.array() + 22.5;  // shrunk toward the mean 45: gap slope -0.5
  const metrics::BiasCorrection c = metrics::FitBiasCorrection(age, pred);
  ASSERT_TRUE(c.Valid());
  EXPECT_NEAR(c.slope, 0.5, 1e-12);
  EXPECT_NEAR(c.offset, 22.5, 1e-12);
  EXPECT_NEAR(metrics::GapSlope(age, pred), -0.5, 1e-12);
  const Eigen::VectorXd corrected = metrics::ApplyBiasCorrection(c, pred);
  EXPECT_LT((corrected - age).cwiseAbs().maxCoeff(), 1e-10);
  EXPECT_NEAR(metrics::GapSlope(age, corrected), 0.0, 1e-12);
  // A model that falls with the target cannot be inverted: no correction (NaN), never a sign flip.
  const metrics::BiasCorrection bad = metrics::FitBiasCorrection(age, Eigen::VectorXd(-pred));
  EXPECT_FALSE(bad.Valid());
  EXPECT_TRUE(std::isnan(metrics::ApplyBiasCorrection(bad, pred)[0]));
}

// No leakage: a fold's Platt scaling comes from its training subjects' inner out-of-fold decision values,
// so changing one of its test subjects (kernel row and label) leaves its coefficients and the other test
// subjects' probabilities bit for bit unchanged, while the folds that train on that subject change.
TEST(Platt, ATestSubjectNeverEntersItsFoldsCalibration) {
  auto p = neuromkl::testing::MakeMklProblem(60, 3, {0}, 0.7, 11);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, p.targets.y, {}, {}, 4, "outer");
  const std::vector<cv::LearnerPlan> plans = {{"svm", "svm", {{{"c", 1.0}}}},  // fixed: the inner CV runs for calibration only
                                              {"en", "enmkl_svm", cv::ExpandGrid({{"mu", 0.5}}, {{"c", {0.1, 10}}})}};
  cv::NestedCvOptions options;
  options.probabilities = true;
  const auto a = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), plans, options);
  const int s = outer[0].test[0];
  learners::KernelList changed = p.kernels;
  for (auto& K : changed) {
    K.row(s) *= 3.0;
    K.col(s) *= 3.0;
  }
  learners::Targets flipped = p.targets;
  flipped.y[s] = -flipped.y[s];
  const auto b = cv::RunNestedCv(changed, flipped, outer, Inner(3), plans, options);
  for (std::size_t l = 0; l < plans.size(); ++l) {
    ASSERT_TRUE(a[l].folds[0].platt.Valid());
    EXPECT_EQ(a[l].folds[0].platt.a, b[l].folds[0].platt.a) << plans[l].label;
    EXPECT_EQ(a[l].folds[0].platt.b, b[l].folds[0].platt.b) << plans[l].label;
    for (Eigen::Index i = 1; i < a[l].folds[0].probability.size(); ++i) EXPECT_EQ(a[l].folds[0].probability[i], b[l].folds[0].probability[i]);
    bool otherChanged = false;
    for (std::size_t f = 1; f < outer.size(); ++f) otherChanged |= a[l].folds[f].platt.a != b[l].folds[f].platt.a;
    EXPECT_TRUE(otherChanged) << plans[l].label << ": the subject trains the other folds, whose calibration must move";
    // The fixed-parameter learner ran its inner CV for the calibration: 3 outer x 3 inner + 3 refits.
    if (l == 0) {
      EXPECT_EQ(a[l].fits, 12);
    }
  }
  // Summaries carry the probability metrics; without the option nothing changes.
  EXPECT_TRUE(cv::Summarise(a[0], p.targets).pooled.count("brier"));
  const auto plain = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), plans, {});
  EXPECT_EQ(plain[0].folds[0].probability.size(), 0);
  EXPECT_FALSE(cv::Summarise(plain[0], p.targets).pooled.count("brier"));
  for (std::size_t f = 0; f < outer.size(); ++f) EXPECT_EQ((plain[1].folds[f].decision - a[1].folds[f].decision).norm(), 0.0);
}

// A large cohort whose labels follow a logistic model in one feature (P(+1) = sigmoid(1.5 x0), 4 noise
// features, 800 subjects): the pooled out-of-fold probabilities must be calibrated. Calibration slope
// (Cox) within 0.8-1.2, the criterion; the Brier score must beat the prevalence baseline
// p (1 - p). Measured: see docs/learners.md ("Calibration").
TEST(Platt, LargeCohortIsCalibratedAndBeatsThePrevalence) {
  const int n = 800;
  std::mt19937 rng(3);
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> uniform(0, 1);
  Eigen::MatrixXd X(n, 5);
  learners::Targets t{learners::Task::Classification, Eigen::VectorXd(n)};
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 5; ++j) X(i, j) = normal(rng);
    t.y[i] = uniform(rng) < 1.0 / (1.0 + std::exp(-1.5 * X(i, 0) + 0.8)) ? 1.0 : -1.0;  // prevalence ~ 0.33
  }
  const learners::KernelList kernels = {X * X.transpose()};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 5, 1}, learners::Task::Classification, t.y, {}, {}, 8, "outer");
  cv::NestedCvOptions options;
  options.probabilities = true;
  options.preprocessing.normalise = false;  // one linear kernel: keep the feature scale
  for (const auto& plan : {cv::LearnerPlan{"svm", "svm", cv::ExpandGrid({}, {{"c", {0.01, 1}}})}, cv::LearnerPlan{"kelm", "kelm", {{{"c", 1.0}}}}}) {
    const auto res = cv::RunNestedCv(kernels, t, outer, Inner(5), {plan}, options);
    Eigen::VectorXd y(n), prob(n);
    for (const auto& f : res[0].folds)
      for (std::size_t i = 0; i < f.test.size(); ++i) {
        y[f.test[i]] = t.y[f.test[i]];
        prob[f.test[i]] = f.probability[static_cast<Eigen::Index>(i)];
      }
    const double prevalence = (y.array() > 0).cast<double>().mean();
    const double slope = metrics::CalibrationSlope(y, prob), brier = metrics::BrierScore(y, prob);
    std::printf("%s: calibration slope %.3f, Brier %.4f vs prevalence baseline %.4f, log-loss %.4f\n", plan.label.c_str(), slope, brier,
                prevalence * (1 - prevalence), metrics::LogLoss(y, prob));
    EXPECT_GT(slope, 0.8) << plan.label;
    EXPECT_LT(slope, 1.2) << plan.label;
    EXPECT_LT(brier, prevalence * (1 - prevalence)) << plan.label;
  }
}

// Brain age: predictions of a regularised regression are shrunk toward the mean, so the gap
// (prediction - age) falls with age. The correction, fitted per outer fold on inner out-of-fold
// predictions, removes that slope on the test subjects up to sampling error: the tolerance is 3 standard
// errors of the least-squares slope of the corrected gap on age, se = sd(residual) / (sd(age) sqrt(n)).
TEST(BiasCorrection, NestedCvRemovesTheGapSlopeOnTestFolds) {
  const int n = 400;
  std::mt19937 rng(17);
  std::normal_distribution<double> normal(0, 1);
  Eigen::VectorXd age(n);
  Eigen::MatrixXd X(n, 20);
  for (int i = 0; i < n; ++i) {
    age[i] = 50 + 12 * normal(rng);
    for (int j = 0; j < 20; ++j) X(i, j) = normal(rng) * 2.0 + (j < 8 ? 0.1 * (age[i] - 50) : 0.0);
  }
  const learners::Targets t{learners::Task::Regression, age};
  const auto outer = cv::MakeFolds({cv::Scheme::KFold, 5, 1}, learners::Task::Regression, age, {}, {}, 2, "outer");
  cv::NestedCvOptions options;
  options.biasCorrection = true;
  const auto res = cv::RunNestedCv(learners::KernelList{X * X.transpose()}, t, outer, Inner(5, learners::Task::Regression),
                                   {{"krr", "krr", cv::ExpandGrid({}, {{"lambda", {1, 10, 100}}})}}, options);
  Eigen::VectorXd y(n), pred(n), corr(n);
  for (const auto& f : res[0].folds) {
    ASSERT_TRUE(f.bias.Valid());
    for (std::size_t i = 0; i < f.test.size(); ++i) {
      y[f.test[i]] = age[f.test[i]];
      pred[f.test[i]] = f.decision[static_cast<Eigen::Index>(i)];
      corr[f.test[i]] = f.corrected[static_cast<Eigen::Index>(i)];
    }
  }
  const double before = metrics::GapSlope(y, pred), after = metrics::GapSlope(y, corr);
  const Eigen::VectorXd gap = corr - y;
  const double sdAge = std::sqrt((y.array() - y.mean()).square().mean());
  const Eigen::VectorXd resid = gap.array() - gap.mean() - after * (y.array() - y.mean());
  const double se = std::sqrt(resid.squaredNorm() / (n - 2)) / (sdAge * std::sqrt(static_cast<double>(n)));
  std::printf("gap slope %.3f uncorrected, %.3f corrected (3 SE = %.3f)\n", before, after, 3 * se);
  EXPECT_LT(before, -0.2);  // the usual regression toward the mean
  EXPECT_LT(std::abs(after), 3 * se);
  const auto summary = cv::Summarise(res[0], t);
  EXPECT_NEAR(summary.pooled.at("gap_slope"), before, 1e-12);
  EXPECT_NEAR(summary.pooled.at("corrected_gap_slope"), after, 1e-12);
  EXPECT_TRUE(summary.pooled.count("corrected_mae"));
}
