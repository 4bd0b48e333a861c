#include <Eigen/Dense>
#include <gtest/gtest.h>

#include "learner_fixtures.hpp"
#include "neuromkl/learners/learner.hpp"
#include "testing.hpp"

using namespace neuromkl;

namespace {

TEST(Krr, EqualsPrimalRidgeRegressionWithBias) {
  // Independent route: w = (X'X + lambda I)^-1 X'(y - mean y), f(x) = x'w + mean y.
  const auto p = neuromkl::testing::MakeMklProblem(25, 1, {0}, 0.8, 2, learners::Task::Regression);
  const Eigen::MatrixXd& X = p.features[0];
  const Eigen::MatrixXd K = X * X.transpose();
  const double lambda = 0.3;
  const auto model = learners::MakeLearner("krr", {{"lambda", lambda}})->Fit({K}, p.targets);
  const double mean = p.targets.y.mean();
  const Eigen::VectorXd w = (X.transpose() * X + lambda * Eigen::MatrixXd::Identity(X.cols(), X.cols()))
                                .ldlt()
                                .solve(X.transpose() * (p.targets.y.array() - mean).matrix());
  Eigen::MatrixXd Xtest = Eigen::MatrixXd::Random(4, X.cols());
  const Eigen::VectorXd expected = (Xtest * w).array() + mean;
  EXPECT_TRUE(neuromkl::testing::MatrixNear(model.Decision({Xtest * X.transpose()}), expected, 1e-10, 1e-10));
  EXPECT_NEAR(model.bias, mean, 1e-15);
}

TEST(Krr, ThreeSubjectsByHand) {
  // K = I, lambda = 1: alpha = (y - mean)/2 = (-1, 0, 1)/2 for y = (1, 2, 3); f(x_1) = -0.5 + 2.
  const auto model = learners::MakeLearner("krr", {{"lambda", 1}})->Fit({Eigen::MatrixXd::Identity(3, 3)},
                                                                        {learners::Task::Regression, Eigen::Vector3d(1, 2, 3)});
  EXPECT_TRUE(neuromkl::testing::MatrixNear(model.coef, Eigen::Vector3d(-0.5, 0, 0.5), 1e-15));
  EXPECT_NEAR(model.Decision({Eigen::MatrixXd::Identity(3, 3)})[0], 1.5, 1e-15);
}

TEST(Krr, LargerLambdaMeansMoreShrinkage) {
  const auto p = neuromkl::testing::MakeMklProblem(20, 1, {0}, 1.0, 4, learners::Task::Regression);
  const auto small = learners::MakeLearner("krr", {{"lambda", 0.01}})->Fit(p.kernels, p.targets);
  const auto large = learners::MakeLearner("krr", {{"lambda", 100}})->Fit(p.kernels, p.targets);
  const Eigen::VectorXd fs = small.Decision(p.kernels).array() - small.bias, fl = large.Decision(p.kernels).array() - large.bias;
  EXPECT_LT(fl.norm(), fs.norm());
}

}  // namespace
