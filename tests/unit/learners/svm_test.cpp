#include <gtest/gtest.h>

#include "learner_fixtures.hpp"
#include "neuromkl/learners/learner.hpp"
#include "testing.hpp"

using namespace neuromkl;
using learners::KernelList;
using learners::MakeLearner;
using learners::Targets;
using learners::Task;

namespace {

Eigen::MatrixXd Linear(const Eigen::MatrixXd& X) { return X * X.transpose(); }

TEST(Svm, TwoPointsHardMargin) {
  // x = +1 (class +1) and x = -1 (class -1): w = 1, b = 0, alpha = 1/2 each (|w|^2 = sum alpha).
  Eigen::MatrixXd X(2, 1);
  X << 1, -1;
  Targets t{Task::Classification, Eigen::Vector2d(1, -1)};
  const auto model = MakeLearner("svm", {{"c", 10}, {"tolerance", 1e-10}})->Fit({Linear(X)}, t);
  EXPECT_NEAR(model.alpha[0], 0.5, 1e-9);
  EXPECT_NEAR(model.alpha[1], 0.5, 1e-9);
  EXPECT_NEAR(model.bias, 0.0, 1e-9);
  Eigen::MatrixXd test(1, 1);
  test << 0.25;  // f(0.25) = w * 0.25
  EXPECT_NEAR(model.Decision({test * X.transpose()})[0], 0.25, 1e-9);
}

TEST(Svm, TwoPointsBoxBound) {
  // With C = 0.1 < 1/2 both alphas sit at C: w = 2C = 0.2, and no free vector: b is the middle
  // of the feasible interval, 0 by symmetry.
  Eigen::MatrixXd X(2, 1);
  X << 1, -1;
  Targets t{Task::Classification, Eigen::Vector2d(1, -1)};
  const auto model = MakeLearner("svm", {{"c", 0.1}, {"tolerance", 1e-10}})->Fit({Linear(X)}, t);
  EXPECT_NEAR(model.alpha[0], 0.1, 1e-12);
  EXPECT_NEAR(model.alpha[1], 0.1, 1e-12);
  EXPECT_NEAR(model.bias, 0.0, 1e-12);
  EXPECT_NEAR(model.coef[0], 0.1, 1e-12);
}

TEST(Svm, SeparableToyWithKnownMargin) {
  // Closest points (2,0) and (-2,0): margin 4, w = (1/2, 0), b = 0, alpha = 1/8 on the two
  // support vectors (w = sum alpha_i y_i x_i = 2 * alpha * (2, 0)), 0 elsewhere.
  Eigen::MatrixXd X(6, 2);
  X << 2, 0, 3, 1, 3, -1, -2, 0, -3, 1, -3, -1;
  Eigen::VectorXd y(6);
  y << 1, 1, 1, -1, -1, -1;
  const auto model = MakeLearner("svm", {{"c", 1000}, {"tolerance", 1e-12}})->Fit({Linear(X)}, {Task::Classification, y});
  Eigen::VectorXd alpha(6);
  alpha << 0.125, 0, 0, 0.125, 0, 0;
  EXPECT_TRUE(neuromkl::testing::MatrixNear(model.alpha, alpha, 1e-9));
  EXPECT_NEAR(model.bias, 0.0, 1e-9);
  const Eigen::VectorXd w = X.transpose() * model.coef;
  EXPECT_NEAR(w[0], 0.5, 1e-9);
  EXPECT_NEAR(w[1], 0.0, 1e-9);
}

TEST(Svm, KktConditionsHoldAtTheSolution) {
  const auto p = neuromkl::testing::MakeMklProblem(60, 1, {}, 0.0, 11);  // overlapping classes
  const double C = 0.7, tol = 1e-6;
  const auto model = MakeLearner("svm", {{"c", C}, {"tolerance", tol}})->Fit(p.kernels, p.targets);
  const Eigen::VectorXd f = model.Decision(p.kernels);
  int bounded = 0, free = 0;
  for (Eigen::Index i = 0; i < f.size(); ++i) {
    const double margin = p.targets.y[i] * f[i], a = model.alpha[i];
    // KKT: a = 0 -> yf >= 1; 0 < a < C -> yf = 1; a = C -> yf <= 1 (within the SMO tolerance).
    if (a <= 0) {
      EXPECT_GE(margin, 1 - tol) << i;
    } else if (a >= C) {
      EXPECT_LE(margin, 1 + tol) << i;
      ++bounded;
    } else {
      EXPECT_NEAR(margin, 1, tol) << i;
      ++free;
    }
    EXPECT_GE(a, 0);
    EXPECT_LE(a, C);
  }
  EXPECT_GT(bounded, 0);  // the case exercises both kinds of support vector
  EXPECT_GT(free, 0);
  EXPECT_NEAR(model.alpha.dot(p.targets.y), 0.0, 1e-12);
  EXPECT_EQ(model.info.status, learners::FitStatus::Converged);
}

TEST(Svm, IterationCapIsAStatusNotAnError) {
  const auto p = neuromkl::testing::MakeMklProblem(60, 1, {}, 0.0, 11);
  const auto model = MakeLearner("svm", {{"c", 1}, {"max_iterations", 3}})->Fit(p.kernels, p.targets);
  EXPECT_EQ(model.info.status, learners::FitStatus::MaxIterReached);
  EXPECT_EQ(model.info.iterations, 3);
  EXPECT_TRUE(model.coef.allFinite());
}

TEST(Svm, SumOfKernelsBaselineIsTheSvmOnTheSummedKernel) {
  const auto p = neuromkl::testing::MakeMklProblem(30, 3, {0}, 1.0, 5);
  const auto onSum = MakeLearner("svm", {{"tolerance", 1e-9}})->Fit({p.kernels[0] + p.kernels[1] + p.kernels[2]}, p.targets);
  const auto multi = MakeLearner("svm", {{"tolerance", 1e-9}})->Fit(p.kernels, p.targets);
  EXPECT_TRUE(neuromkl::testing::MatrixNear(multi.beta, Eigen::VectorXd::Constant(3, 1.0 / 3), 1e-15));
  EXPECT_TRUE(neuromkl::testing::MatrixNear(multi.Decision(p.kernels), onSum.Decision({p.kernels[0] + p.kernels[1] + p.kernels[2]}), 1e-10));
}

}  // namespace
