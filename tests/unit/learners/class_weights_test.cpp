// Class weights: per-subject C in the SVM-type learners, weighted least squares in the
// KELM family and KRR, computed from the training set's class counts for "balanced".
#include <gtest/gtest.h>

#include <cmath>

#include <Eigen/Cholesky>

#include "learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using learners::MakeLearner;
using learners::Targets;
using learners::Task;

namespace {

/// An imbalanced, overlapping binary problem: 12 positives, 36 negatives, one linear kernel.
neuromkl::testing::MklProblem Imbalanced(int m = 1, unsigned seed = 5) {
  neuromkl::testing::MklProblem p = neuromkl::testing::MakeMklProblem(48, m, {0}, 0.8, seed);
  for (Eigen::Index i = 0; i < p.targets.y.size(); ++i) p.targets.y[i] = i % 4 == 0 ? 1.0 : -1.0;
  // Re-derive the signal for these labels (MakeMklProblem shifted by its own alternating labels).
  for (std::size_t j = 0; j < p.kernels.size(); ++j) {
    Eigen::MatrixXd X = p.features[j];
    X.col(0) += 0.8 * p.targets.y;
    X = X.rowwise() - X.colwise().mean();
    p.features[j] = X;
    p.kernels[j] = X * X.transpose();
  }
  return p;
}

Targets WithWeights(const Targets& t, double positive, double negative) {
  Targets w = t;
  w.sampleWeights.resize(t.y.size());
  for (Eigen::Index i = 0; i < t.y.size(); ++i) w.sampleWeights[i] = t.y[i] > 0 ? positive : negative;
  return w;
}

}  // namespace

TEST(ClassWeights, BalancedIsNOverKTimesClassCountOfThisTrainingSet) {
  Targets t{Task::Classification, Eigen::VectorXd(10)};
  t.y << 1, 1, -1, -1, -1, -1, -1, -1, -1, -1;
  learners::ClassWeights cw;
  cw.balanced = true;
  const Eigen::VectorXd w = learners::ClassSampleWeights(cw, t);
  EXPECT_DOUBLE_EQ(w[0], 10.0 / (2 * 2));  // 2.5
  EXPECT_DOUBLE_EQ(w[5], 10.0 / (2 * 8));  // 0.625
  // Multiclass with an unlabelled subject (weight 1, not counted).
  Targets m{Task::Multiclass, Eigen::VectorXd(7), 3};
  m.y << 0, 0, 0, 1, 1, 2, std::nan("");
  const Eigen::VectorXd wm = learners::ClassSampleWeights(cw, m);
  EXPECT_DOUBLE_EQ(wm[0], 6.0 / (3 * 3));
  EXPECT_DOUBLE_EQ(wm[3], 6.0 / (3 * 2));
  EXPECT_DOUBLE_EQ(wm[5], 6.0 / (3 * 1));
  EXPECT_DOUBLE_EQ(wm[6], 1.0);
  // Given weights: listed classes get theirs, the others 1; none active = empty.
  learners::ClassWeights given;
  given.given[1.0] = 4.0;
  const Eigen::VectorXd wg = learners::ClassSampleWeights(given, t);
  EXPECT_EQ(wg[0], 4.0);
  EXPECT_EQ(wg[9], 1.0);
  EXPECT_EQ(learners::ClassSampleWeights(learners::ClassWeights{}, t).size(), 0);
}

// KKT conditions of the weighted C-SVC dual, min 1/2 a'Qa - 1'a, y'a = 0, 0 <= a_i <= C w_{y_i}:
// a_i = 0 => y_i f_i >= 1; a_i = C w_i => y_i f_i <= 1; free => y_i f_i = 1. SMO stops when the
// maximal violation (in gradient units, = margin units here) is below its tolerance (1e-10), so 1e-6
// leaves room for the bias rule's averaging and rounding only.
TEST(ClassWeights, SvmKktHoldsWithPerClassBounds) {
  const auto p = Imbalanced();
  const double C = 0.05, wPos = 3.0, wNeg = 1.0;
  const Targets t = WithWeights(p.targets, wPos, wNeg);
  const auto svm = MakeLearner("svm", {{"c", C}, {"tolerance", 1e-10}});
  const learners::Model model = svm->Fit(p.kernels, t);
  const Eigen::VectorXd f = model.Decision(p.kernels);
  int atUpperPos = 0, atUpperNeg = 0;
  for (Eigen::Index i = 0; i < f.size(); ++i) {
    const double a = model.alpha[i], upper = C * t.sampleWeights[i], margin = t.y[i] * f[i];
    ASSERT_GE(a, 0.0);
    ASSERT_LE(a, upper * (1 + 1e-12)) << "alpha above its class's bound at " << i;
    if (a <= 1e-12) {
      EXPECT_GE(margin, 1 - 1e-6) << i;
    } else if (a >= upper * (1 - 1e-12)) {
      EXPECT_LE(margin, 1 + 1e-6) << i;
      (t.y[i] > 0 ? atUpperPos : atUpperNeg) += 1;
    } else {
      EXPECT_NEAR(margin, 1.0, 1e-6) << i;
    }
  }
  // The bounds really differ per class: positives sit at 3C, above the negatives' C.
  EXPECT_GT(atUpperPos, 0);
  EXPECT_GT(atUpperNeg, 0);
  EXPECT_GT(model.alpha.maxCoeff(), C * (1 + 1e-9));
  EXPECT_NEAR(t.y.dot(model.alpha), 0.0, 1e-10);
}

TEST(ClassWeights, UnitWeightsEqualNoWeightsExactlyInEveryClassificationLearner) {
  const auto p = Imbalanced(3);
  const Targets ones = WithWeights(p.targets, 1.0, 1.0);
  for (const auto& info : learners::LearnerCatalog()) {
    if (!info.classification) continue;
    const auto learner = MakeLearner(info.name, {});
    const Eigen::VectorXd a = learner->Fit(p.kernels, p.targets).Decision(p.kernels);
    const Eigen::VectorXd b = learner->Fit(p.kernels, ones).Decision(p.kernels);
    for (Eigen::Index i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << info.name << " subject " << i;
  }
}

TEST(ClassWeights, WeightsReachEveryClassificationLearnerAndFavourTheHeavierClass) {
  // Up-weighting the minority (positive) class changes every learner's model, and no learner then
  // predicts fewer training subjects positive.
  const auto p = Imbalanced(3);
  const Targets heavy = WithWeights(p.targets, 3.0, 1.0);
  for (const auto& info : learners::LearnerCatalog()) {
    if (!info.classification) continue;
    learners::ParamMap params;  // a small C puts subjects at their (class-dependent) bounds
    for (const auto& spec : info.params)
      if (spec.name == "c") params["c"] = 0.05;
    const auto learner = MakeLearner(info.name, params);
    const Eigen::VectorXd a = learner->Fit(p.kernels, p.targets).Decision(p.kernels);
    const Eigen::VectorXd b = learner->Fit(p.kernels, heavy).Decision(p.kernels);
    EXPECT_GT((b - a).norm(), 1e-3 * a.norm()) << info.name;
    EXPECT_GE((b.array() >= 0).count(), (a.array() >= 0).count()) << info.name;
  }
}

// With one kernel the MKL learners are the SVM (their existing tests); with class weights they must
// be the weighted SVM, whose KKT conditions the test above checks. 1e-5 relative: the MKL learners'
// inner SMO runs at their svm_tolerance (1e-8 / 1e-6), the reference at 1e-10.
TEST(ClassWeights, SvmBasedLearnersUseThePerClassBounds) {
  const auto p = Imbalanced();
  const Targets t = WithWeights(p.targets, 4.0, 0.5);
  const double C = 0.5;
  const Eigen::VectorXd ref = MakeLearner("svm", {{"c", C}, {"tolerance", 1e-10}})->Fit(p.kernels, t).Decision(p.kernels);
  const Eigen::VectorXd unweighted = MakeLearner("svm", {{"c", C}, {"tolerance", 1e-10}})->Fit(p.kernels, p.targets).Decision(p.kernels);
  ASSERT_GT((ref - unweighted).norm(), 0.1 * ref.norm()) << "the weights must matter in this problem";
  const std::vector<std::pair<std::string, learners::ParamMap>> cases = {
      {"enmkl_svm", {{"c", C}, {"mu", 0.5}, {"svm_tolerance", 1e-10}}},
      {"simplemkl", {{"c", C}, {"svm_tolerance", 1e-10}}},
      {"mkl_bp", {{"c", C}, {"svm_tolerance", 1e-10}}},
      {"bsadmm_kelm", {{"c", C}, {"bias", 1}}},
  };
  for (const auto& [name, params] : cases) {
    const Eigen::VectorXd f = MakeLearner(name, params)->Fit(p.kernels, t).Decision(p.kernels);
    EXPECT_LT((f - ref).cwiseAbs().maxCoeff(), 1e-5 * ref.cwiseAbs().maxCoeff()) << name;
  }
}

// Weighted KELM: min 1/2 ||beta||^2 + C/2 sum_i w_i (t_i - x_i beta)^2 with t centred by the weighted
// mean m_w and m_w added back. Independent primal solve on the features (K = X X'):
// beta = (I + C X'WX)^-1 C X'W t. Agreement to 1e-9 relative (two Cholesky solves of
// well-conditioned systems).
TEST(ClassWeights, WeightedKelmIsTheWeightedLeastSquaresSolution) {
  const auto p = Imbalanced();
  const Targets t = WithWeights(p.targets, 3.0, 1.0);
  const Eigen::MatrixXd& X = p.features[0];
  const Eigen::VectorXd& w = t.sampleWeights;
  for (double C : {0.1, 1.0, 10.0}) {
    const double mw = w.dot(t.y) / w.sum();
    const Eigen::VectorXd tc = t.y.array() - mw;
    Eigen::MatrixXd A = C * X.transpose() * w.asDiagonal() * X;
    A.diagonal().array() += 1.0;
    const Eigen::VectorXd beta = A.llt().solve(C * X.transpose() * w.asDiagonal() * tc);
    const Eigen::VectorXd primal = (X * beta).array() + mw;
    for (const std::string name : {"kelm", "mkelm", "dkelm"}) {
      learners::ParamMap params = {{"c", C}};
      if (name == "dkelm") params["deformation"] = 0;
      const Eigen::VectorXd f = MakeLearner(name, params)->Fit(p.kernels, t).Decision(p.kernels);
      EXPECT_LT((f - primal).cwiseAbs().maxCoeff(), 1e-9 * primal.cwiseAbs().maxCoeff()) << name << " C = " << C;
    }
    // KRR (lambda = 1 / C) is the same weighted ridge.
    const Eigen::VectorXd k = MakeLearner("krr", {{"lambda", 1.0 / C}})->Fit(p.kernels, t).Decision(p.kernels);
    EXPECT_LT((k - primal).cwiseAbs().maxCoeff(), 1e-9 * primal.cwiseAbs().maxCoeff()) << "krr C = " << C;
  }
}

TEST(ClassWeights, MulticlassOneVsRestWeighsEachSubjectByItsOwnClass) {
  neuromkl::testing::MklProblem p = neuromkl::testing::MakeMklProblem(45, 1, {0}, 1.0, 9);
  Targets t{Task::Multiclass, Eigen::VectorXd(45), 3};
  for (Eigen::Index i = 0; i < 45; ++i) t.y[i] = static_cast<double>(i % 3);
  t.sampleWeights = Eigen::VectorXd(45);
  for (Eigen::Index i = 0; i < 45; ++i) t.sampleWeights[i] = 1.0 + t.y[i];  // class c weighs 1 + c
  const auto svm = MakeLearner("svm", {{"c", 0.3}, {"tolerance", 1e-10}});
  const Eigen::MatrixXd S = svm->Fit(p.kernels, t).Scores(p.kernels);
  for (int c = 0; c < 3; ++c) {
    Targets b{Task::Classification, Eigen::VectorXd(45)};
    for (Eigen::Index i = 0; i < 45; ++i) b.y[i] = t.y[i] == c ? 1.0 : -1.0;
    b.sampleWeights = t.sampleWeights;
    const Eigen::VectorXd f = svm->Fit(p.kernels, b).Decision(p.kernels);
    EXPECT_LT((S.col(c) - f).cwiseAbs().maxCoeff(), 1e-12) << "class " << c;
  }
}

TEST(ClassWeights, BadWeightsAreInputErrors) {
  const auto p = Imbalanced();
  const auto svm = MakeLearner("svm", {});
  Targets t = WithWeights(p.targets, 1.0, 2.0);
  t.sampleWeights[3] = 0.0;
  EXPECT_THROW(svm->Fit(p.kernels, t), InputError);
  t.sampleWeights[3] = std::nan("");
  EXPECT_THROW(svm->Fit(p.kernels, t), InputError);
  t.sampleWeights.resize(5);
  EXPECT_THROW(svm->Fit(p.kernels, t), InputError);
  Targets r{Task::Regression, p.targets.y};
  r.sampleWeights = Eigen::VectorXd::Ones(r.y.size()) * 2;
  EXPECT_THROW(MakeLearner("krr", {})->Fit(p.kernels, r), InputError);
}
