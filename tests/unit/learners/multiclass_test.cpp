// Multiclass fits of every classification learner: native (KELM family), shared kernel weights over
// one-vs-rest problems (MKL learners), one-vs-rest binary fits (the others), per-class weights.
#include <gmock/gmock.h>

#include "learner_fixtures.hpp"
#include "neuromkl/learners/learner.hpp"
#include "testing.hpp"

using namespace neuromkl;
using learners::MakeLearner;
using learners::MulticlassWeights;
using neuromkl::testing::MakeMklProblem;
using neuromkl::testing::MatrixNear;

namespace {

/// Three classes of n / 3 subjects; class c carries its signal (a shift of its first feature) in
/// kernel c only; the other kernels are noise.
struct ThreeClasses {
  learners::KernelList kernels;
  learners::Targets targets;
};
ThreeClasses MakeThreeClasses(int n, int m, double shift, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  ThreeClasses p;
  p.targets = {learners::Task::Multiclass, Eigen::VectorXd(n), 3};
  for (int i = 0; i < n; ++i) p.targets.y[i] = i % 3;
  for (int j = 0; j < m; ++j) {
    Eigen::MatrixXd X(n, 6);
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = normal(rng);
    for (int i = 0; i < n; ++i)
      if (j < 3 && p.targets.y[i] == j) X(i, 0) += shift;
    X = X.rowwise() - X.colwise().mean();
    Eigen::MatrixXd K = X * X.transpose();
    const Eigen::VectorXd d = K.diagonal().cwiseSqrt().cwiseInverse();
    p.kernels.push_back(d.asDiagonal() * K * d.asDiagonal());
  }
  return p;
}

/// Binary +-1 targets recoded as multiclass labels 0 (= -1) and 1 (= +1).
learners::Targets AsTwoClasses(const learners::Targets& t) { return {learners::Task::Multiclass, (t.y.array() + 1) / 2, 2}; }

class SharedWeights : public ::testing::TestWithParam<std::string> {};

// Two classes: the one-vs-rest problems are the binary problem and its mirror (labels negated), whose
// solution is the negated one with the same quadratic terms a'K_j a. The shared objective is twice the
// binary one, every update used (water-filling, reduced gradient, Frank-Wolfe oracle, relative gaps)
// is invariant to that factor, so in exact arithmetic the iterates are the binary ones. Differences
// are the inner solvers' rounding and their stopping accuracy (SMO at 1e-8 by default for MKL), which
// the stopping tests can turn into one more or one fewer step: 1e-5 on weights and scores.
TEST_P(SharedWeights, TwoClassesEqualTheBinaryLearner) {
  const auto p = MakeMklProblem(30, 4, {0, 2}, 1.0, 17);
  const auto learner = MakeLearner(GetParam(), {{"c", 1}});
  const auto binary = learner->Fit(p.kernels, p.targets);
  const auto multi = learner->Fit(p.kernels, AsTwoClasses(p.targets));
  ASSERT_TRUE(multi.Multiclass());
  EXPECT_EQ(multi.betas.cols(), 0);  // one beta for all classes
  EXPECT_TRUE(MatrixNear(multi.beta, binary.beta, 1e-5)) << multi.beta.transpose() << "\n" << binary.beta.transpose();
  const Eigen::VectorXd f = binary.Decision(p.kernels);
  const Eigen::MatrixXd s = multi.Scores(p.kernels);
  EXPECT_TRUE(MatrixNear(s.col(1), f, 1e-5 * f.cwiseAbs().maxCoeff()));
  EXPECT_TRUE(MatrixNear(s.col(0), -f, 1e-5 * f.cwiseAbs().maxCoeff()));
}

// One kernel: the weight is 1 and the shared problem is the sum of independent one-vs-rest SVMs, so
// the scores equal one-vs-rest SVM's (SMO at 1e-10 on both sides: agreement to 1e-6).
TEST_P(SharedWeights, OneKernelEqualsOneVsRestSvm) {
  const auto p = MakeThreeClasses(27, 1, 1.5, 5);
  const auto mkl = MakeLearner(GetParam(), {{"c", 1}, {"svm_tolerance", 1e-10}})->Fit(p.kernels, p.targets);
  const auto svm = MakeLearner("svm", {{"c", 1}, {"tolerance", 1e-10}})->Fit(p.kernels, p.targets);
  EXPECT_NEAR(mkl.beta[0], 1.0, 1e-12);
  const Eigen::MatrixXd a = mkl.Scores(p.kernels), b = svm.Scores(p.kernels);
  ASSERT_EQ(a.cols(), 3);
  EXPECT_TRUE(MatrixNear(a, b, 1e-6)) << a << "\n\n" << b;
}

INSTANTIATE_TEST_SUITE_P(Mkl, SharedWeights, ::testing::Values("enmkl_svm", "simplemkl", "mkl_bp"));

TEST(Multiclass, PerClassWeightsFindEachClassKernelSharedWeightsTheirUnion) {
  const auto p = MakeThreeClasses(60, 6, 2.5, 9);
  for (const std::string name : {"enmkl_svm", "simplemkl", "mkl_bp", "mkelm"}) {
    SCOPED_TRACE(name);
    const auto perClass = MakeLearner(name, {}, MulticlassWeights::PerClass)->Fit(p.kernels, p.targets);
    ASSERT_EQ(perClass.betas.cols(), 3);
    for (Eigen::Index c = 0; c < 3; ++c) {
      Eigen::Index top = 0;
      perClass.betas.col(c).maxCoeff(&top);
      EXPECT_EQ(top, c) << perClass.betas.col(c).transpose();  // class c's signal is in kernel c
    }
    EXPECT_NEAR(perClass.beta.sum(), 1.0, 1e-12);
    const auto shared = MakeLearner(name, {})->Fit(p.kernels, p.targets);
    EXPECT_EQ(shared.betas.cols(), 0);
    // The three signal kernels carry more weight than any noise kernel.
    EXPECT_GT(shared.beta.head(3).minCoeff(), shared.beta.tail(3).maxCoeff()) << shared.beta.transpose();
    // Training predictions: the arg max of the scores recovers most labels.
    const Eigen::MatrixXd s = shared.Scores(p.kernels);
    int right = 0;
    for (Eigen::Index i = 0; i < s.rows(); ++i) {
      Eigen::Index k = 0;
      s.row(i).maxCoeff(&k);
      right += k == static_cast<Eigen::Index>(p.targets.y[i]);
    }
    EXPECT_GT(right, 50);
  }
}

TEST(Multiclass, OneVsRestForSingleKernelLearners) {
  // svm, krr, bsadmm_kelm: one binary fit per class; class c's score column is that fit's decision.
  const auto p = MakeThreeClasses(24, 2, 1.0, 3);
  for (const std::string name : {"svm", "krr", "bsadmm_kelm"}) {
    SCOPED_TRACE(name);
    const auto m = MakeLearner(name, {})->Fit(p.kernels, p.targets);
    ASSERT_TRUE(m.Multiclass());
    const Eigen::MatrixXd s = m.Scores(p.kernels);
    for (int c = 0; c < 3; ++c) {
      learners::Targets b{learners::Task::Classification, Eigen::VectorXd(24), 0};
      for (int i = 0; i < 24; ++i) b.y[i] = p.targets.y[i] == c ? 1.0 : -1.0;
      const Eigen::VectorXd f = MakeLearner(name, {})->Fit(p.kernels, b).Decision(p.kernels);
      EXPECT_TRUE(MatrixNear(s.col(c), f, 1e-12));  // the same deterministic fit
    }
  }
}

}  // namespace
