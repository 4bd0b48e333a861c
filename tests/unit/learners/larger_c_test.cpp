// A C-SVC (or epsilon-SVR) solution with no dual variable at the upper bound of its box meets the optimality conditions
// of every larger C: learners report it (FitInfo::solvesLargerC) and nested CV reuses such a fit along a grid of C.
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "learner_fixtures.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using learners::Model;
using learners::ParamMap;
using learners::Task;

namespace {

/// Tight tolerances: the fits compared below are then both at the optimum, not at two stopping points near it.
ParamMap Tight(const std::string& learner, double C) {
  if (learner == "svm") return {{"c", C}, {"tolerance", 1e-11}};
  if (learner == "enmkl_svm") return {{"c", C}, {"mu", 0.5}, {"svm_tolerance", 1e-11}, {"tolerance", 1e-10}};
  if (learner == "mkl_bp") return {{"c", C}, {"v", 1.0}, {"svm_tolerance", 1e-11}};  // v = 1: l1-MKL, fitted as ENMKL at mu = 1
  return {{"c", C}, {"svm_tolerance", 1e-11}, {"gap_tolerance", 1e-10}};
}

/// The solver's dual variables (alpha of the SMO that ENMKL ran, which model.alpha reports rescaled by its weights' sum).
const Eigen::VectorXd& Duals(const Model& m) { return m.solverState; }

double Largest(const Eigen::VectorXd& v) { return v.cwiseAbs().maxCoeff(); }

}  // namespace

// 24 subjects with 40 features per kernel: separable, so from some C on no alpha reaches C (the hard-margin SVM), and
// below it the box binds. For every C of the ladder the flag must say which, and where it says "no variable at the
// bound" the cold fit at 100 C must be the same model.
TEST(LargerC, AFitWithNoDualVariableAtItsBoundIsTheFitOfEveryLargerC) {
  const auto p = neuromkl::testing::MakeMklProblem(24, 4, {0, 2}, 0.8, 3, Task::Classification, 40);
  for (const std::string learner : {"svm", "enmkl_svm", "simplemkl", "mkl_bp"}) {
    int interior = 0, bound = 0;
    for (const double C : {1e-3, 1e-2, 1.0, 10.0, 100.0}) {
      const Model fit = learners::MakeLearner(learner, Tight(learner, C))->Fit(p.kernels, p.targets);
      ASSERT_EQ(fit.info.status, learners::FitStatus::Converged) << learner << " C " << C;
      // The flag against the variables themselves (alpha is the SMO's, in [0, C]).
      const bool atBound = (Duals(fit).array() >= C).any();
      EXPECT_EQ(fit.info.solvesLargerC, !atBound) << learner << " C " << C;
      const Model larger = learners::MakeLearner(learner, Tight(learner, 100 * C))->Fit(p.kernels, p.targets);
      const Eigen::VectorXd f = fit.Decision(p.kernels), g = larger.Decision(p.kernels);
      const double gap = Largest(f - g) / Largest(f);
      if (fit.info.solvesLargerC) {
        ++interior;
        // Both fits stop within 1e-10 of one optimum: decisions and weights agree far below the 1e-3 the box makes.
        EXPECT_LT(gap, 1e-6) << learner << " C " << C;
        EXPECT_LT(Largest(fit.beta - larger.beta), 1e-6) << learner << " C " << C;
      } else {
        ++bound;
        EXPECT_GT(gap, 1e-3) << learner << " C " << C << ": the box binds, so a larger C changes the fit";
      }
    }
    EXPECT_GT(interior, 0) << learner;
    EXPECT_GT(bound, 0) << learner;
  }
}

// With class weights the box of subject i is C w_i: the flag reads that box.
TEST(LargerC, ClassWeightsBoundEachSubjectByItsOwnBox) {
  auto p = neuromkl::testing::MakeMklProblem(24, 3, {0}, 0.8, 5, Task::Classification, 40);
  p.targets.sampleWeights = Eigen::VectorXd(24);
  for (Eigen::Index i = 0; i < 24; ++i) p.targets.sampleWeights[i] = p.targets.y[i] > 0 ? 2.0 : 0.5;
  bool sawBoth[2] = {false, false};
  for (const double C : {1e-2, 0.1, 1.0, 10.0, 100.0}) {
    const Model fit = learners::MakeLearner("svm", Tight("svm", C))->Fit(p.kernels, p.targets);
    const bool atBound = (Duals(fit).array() >= C * p.targets.sampleWeights.array()).any();
    EXPECT_EQ(fit.info.solvesLargerC, !atBound) << "C " << C;
    sawBoth[fit.info.solvesLargerC ? 1 : 0] = true;
    if (!fit.info.solvesLargerC) continue;
    const Model larger = learners::MakeLearner("svm", Tight("svm", 10 * C))->Fit(p.kernels, p.targets);
    const Eigen::VectorXd f = fit.Decision(p.kernels);
    EXPECT_LT(Largest(f - larger.Decision(p.kernels)) / Largest(f), 1e-6) << "C " << C;
  }
  EXPECT_TRUE(sawBoth[0] && sawBoth[1]);
}

// Regression (SimpleMKL's epsilon-SVR): both variables of a subject live in [0, C].
TEST(LargerC, EpsilonSvrAsTheClassifier) {
  const auto p = neuromkl::testing::MakeMklProblem(24, 3, {0}, 0.8, 7, Task::Regression, 40);
  bool sawBoth[2] = {false, false};
  for (const double C : {1e-2, 1.0, 100.0, 1e4}) {
    const Model fit = learners::MakeLearner("simplemkl", Tight("simplemkl", C))->Fit(p.kernels, p.targets);
    ASSERT_EQ(fit.info.status, learners::FitStatus::Converged) << "C " << C;
    EXPECT_EQ(fit.info.solvesLargerC, !(Duals(fit).array() >= C).any()) << "C " << C;
    sawBoth[fit.info.solvesLargerC ? 1 : 0] = true;
    if (!fit.info.solvesLargerC) continue;
    const Model larger = learners::MakeLearner("simplemkl", Tight("simplemkl", 100 * C))->Fit(p.kernels, p.targets);
    const Eigen::VectorXd f = fit.Decision(p.kernels);
    EXPECT_LT(Largest(f - larger.Decision(p.kernels)) / Largest(f), 1e-6) << "C " << C;
  }
  EXPECT_TRUE(sawBoth[0] && sawBoth[1]);
}

// Learners without such a box never claim it.
TEST(LargerC, LearnersWithoutABoxNeverClaimIt) {
  const auto p = neuromkl::testing::MakeMklProblem(24, 3, {0}, 0.8, 9, Task::Classification, 40);
  for (const std::string learner : {"krr", "enmkl_krr", "kelm", "mkelm", "bsadmm_kelm"})
    EXPECT_FALSE(learners::MakeLearner(learner, {})->Fit(p.kernels, p.targets).info.solvesLargerC) << learner;
}
