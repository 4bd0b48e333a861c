// The feature form of the linear learners against the kernel path: the same preprocessing, the same optimum.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <Eigen/LU>
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/learners/feature_learners.hpp"
#include "neuromkl/learners/learner.hpp"

#include "feature_solvers.hpp"

namespace nm = neuromkl;
using nm::gram::FeatureMatrix;
using nm::gram::FoldFeatures;

namespace {

/// Simulated voxels: regions of different sizes, values like grey-matter fractions (0.2..0.8) so that centring matters;
/// regions 0 and 2 carry the target in a third of their voxels, region 4 is constant (a zero kernel once centred).
struct Cohort {
  FeatureMatrix x;
  Eigen::VectorXd label, score;
};

Cohort MakeCohort(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.2f, 0.8f);
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<Eigen::Index> sizes = {40, 25, 60, 9, 12, 30};
  Cohort c;
  c.x.regionStart = {0};
  for (const auto s : sizes) c.x.regionStart.push_back(c.x.regionStart.back() + s);
  c.x.values.resize(n, c.x.regionStart.back());
  c.label.resize(n);
  c.score.resize(n);
  for (int i = 0; i < n; ++i) {
    c.label[i] = i % 2 ? 1.0 : -1.0;
    c.score[i] = normal(rng);
    for (Eigen::Index j = 0; j < c.x.Voxels(); ++j) c.x.values(i, j) = uniform(rng);
    for (const std::size_t r : {std::size_t{0}, std::size_t{2}})
      for (Eigen::Index j = 0; j < c.x.RegionSize(r) / 3; ++j)
        c.x.values(i, c.x.regionStart[r] + j) += static_cast<float>(0.08 * c.label[i] + 0.05 * c.score[i]);
    for (Eigen::Index j = 0; j < c.x.RegionSize(4); ++j) c.x.values(i, c.x.regionStart[4] + j) = 0.5f;
  }
  return c;
}

struct Split {
  std::vector<int> train, test;
};
Split MakeSplit(int n) {
  Split s;
  for (int i = 0; i < n; ++i) (i % 4 == 3 ? s.test : s.train).push_back(i);
  return s;
}

/// The kernel path's fold: every region kernel X_r X_r' sliced, centred and normalised (CentreFold, NormaliseFold).
struct KernelFold {
  nm::learners::KernelList train, test;
};
KernelFold PrepareKernels(const FeatureMatrix& x, const Split& s, bool centre, bool normalise) {
  const Eigen::VectorXi train = Eigen::Map<const Eigen::VectorXi>(s.train.data(), static_cast<Eigen::Index>(s.train.size()));
  const Eigen::VectorXi test = Eigen::Map<const Eigen::VectorXi>(s.test.data(), static_cast<Eigen::Index>(s.test.size()));
  KernelFold k;
  for (std::size_t r = 0; r < x.Regions(); ++r) {
    nm::gram::FoldKernel f = nm::gram::SliceFold(x.RegionKernel(r), train, test);
    if (centre) nm::gram::CentreFold(f);
    if (normalise) nm::gram::NormaliseFold(f);
    k.train.push_back(f.train);
    k.test.push_back(f.testTrain);
  }
  return k;
}

Eigen::VectorXd Subset(const Eigen::VectorXd& v, const std::vector<int>& rows) {
  Eigen::VectorXd out(static_cast<Eigen::Index>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i) out[static_cast<Eigen::Index>(i)] = v[rows[i]];
  return out;
}

double RelativeGap(const Eigen::VectorXd& a, const Eigen::VectorXd& b) { return (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff(); }

}  // namespace

// The prepared products equal the prepared kernels' products: Z_r Z_r' from the vectors is CentreFold + NormaliseFold of
// X_r X_r'. Both are sums in double of float inputs in another order: agreement to ~1e-13 relative, asserted at 1e-11.
TEST(FeatureForm, PreparedProductsEqualThePreparedKernels) {
  const Cohort c = MakeCohort(48, 3);
  const Split s = MakeSplit(48);
  for (const bool normalise : {false, true}) {
    const KernelFold k = PrepareKernels(c.x, s, true, normalise);
    const FoldFeatures fold(c.x, s.train, s.test, true, normalise);
    Eigen::VectorXd a = Eigen::VectorXd::LinSpaced(fold.TrainingRows(), -1.0, 2.0);
    const nm::gram::PreparedVector u = fold.TrainingTransposeTimes(a);
    const Eigen::VectorXd norms = fold.RegionSquaredNorms(u);
    for (std::size_t r = 0; r < c.x.Regions(); ++r) {
      Eigen::VectorXd only = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(c.x.Regions()));
      only[static_cast<Eigen::Index>(r)] = 1;
      const Eigen::VectorXd trainExpected = k.train[r] * a, testExpected = k.test[r] * a;
      const double scale = std::max(1.0, trainExpected.cwiseAbs().maxCoeff());
      EXPECT_LT((fold.Times(u, only, false) - trainExpected).cwiseAbs().maxCoeff() / scale, 1e-11) << "region " << r << " normalise " << normalise;
      EXPECT_LT((fold.Times(u, only, true) - testExpected).cwiseAbs().maxCoeff() / scale, 1e-11) << "region " << r;
      EXPECT_NEAR(norms[static_cast<Eigen::Index>(r)], a.dot(k.train[r] * a), 1e-11 * std::max(1.0, a.dot(k.train[r] * a))) << "region " << r;
      for (Eigen::Index i = 0; i < fold.TrainingRows(); ++i)
        EXPECT_NEAR(fold.SquaredNorm(i, r), k.train[r](i, i), 1e-11 * std::max(1.0, k.train[r](i, i)));
    }
    // The constant region is a zero kernel once centred: zero norms, never NaN.
    for (Eigen::Index i = 0; i < fold.TrainingRows(); ++i) EXPECT_EQ(fold.SquaredNorm(i, 4), 0.0);
  }
}

// The written-out prepared rows are the prepared kernels' rows: P_r P_r' over any rows (training and test, in any order)
// is the prepared kernel there, with and without normalisation; the same arithmetic as above, asserted at 1e-11.
TEST(FeatureForm, PreparedRowsGiveThePreparedKernels) {
  const Cohort c = MakeCohort(48, 3);
  const Split s = MakeSplit(48);
  for (const bool normalise : {false, true}) {
    const KernelFold k = PrepareKernels(c.x, s, true, normalise);
    const FoldFeatures fold(c.x, s.train, s.test, true, normalise);
    const std::vector<Eigen::Index> rows = {5, 0, 17, 36, 2, 40};  // fold rows: 36 and 40 are test rows
    const std::vector<std::size_t> regions = {2, 0, 4};
    const Eigen::MatrixXd P = fold.PreparedRows(rows, regions);
    ASSERT_EQ(P.rows(), 6);
    ASSERT_EQ(P.cols(), c.x.RegionSize(2) + c.x.RegionSize(0) + c.x.RegionSize(4));
    Eigen::Index column = 0;
    for (const std::size_t r : regions) {
      const Eigen::MatrixXd gram = P.middleCols(column, c.x.RegionSize(r)) * P.middleCols(column, c.x.RegionSize(r)).transpose();
      column += c.x.RegionSize(r);
      const auto l = fold.TrainingRows();
      for (std::size_t a = 0; a < rows.size(); ++a)
        for (std::size_t b = 0; b < rows.size(); ++b) {
          const Eigen::Index i = rows[a], j = rows[b];
          if (i >= l && j >= l) continue;  // the kernel path keeps test x training blocks only
          const double expected = i < l && j < l ? k.train[r](i, j) : i >= l ? k.test[r](i - l, j) : k.test[r](j - l, i);
          EXPECT_NEAR(gram(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b)), expected, 1e-11 * std::max(1.0, std::abs(expected)))
              << "region " << r << " rows " << i << ", " << j << " normalise " << normalise;
        }
    }
  }
}

// The feature solvers' sensitivity to the weights (ENMKL's Newton steps) is the kernel path's, transcribed here from the
// prepared kernels at the feature solver's own solution: for the C-SVC, on its free set F, H = R_F' x with
// [K_FF 1; 1' 0] [x; t] = [R_F; 0] and R_F the columns (K_j coef)_F (solved by a full-pivot LU of the bordered matrix);
// for KRR H = G'(K + lambda I)^-1 G over every row. K = sum_j beta_j K_j over the support only; the other regions have no
// column. Agreement to 1e-8 relative (the Gram matrix's sums in another order, then a solve of condition ~1e4).
TEST(FeatureForm, CurvatureIsTheKernelPathsAtTheSameSolution) {
  const Cohort c = MakeCohort(96, 11);
  const Split s = MakeSplit(96);
  const KernelFold k = PrepareKernels(c.x, s, true, true);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  const std::vector<Eigen::Index> support = {0, 2, 3};
  Eigen::VectorXd beta = Eigen::VectorXd::Zero(6);
  beta[0] = 0.5;
  beta[2] = 0.3;
  beta[3] = 0.2;
  const Eigen::VectorXd y = Subset(c.label, s.train);
  const auto l = fold.TrainingRows();
  Eigen::MatrixXd K = Eigen::MatrixXd::Zero(l, l);
  for (const auto j : support) K += beta[j] * k.train[static_cast<std::size_t>(j)];
  for (const bool svm : {true, false}) {
    const auto solver = svm ? nm::learners::MakeFeatureSvc(fold, y, 1.0, {}, 1e-12, 1000000) : nm::learners::MakeFeatureKrr(fold, y, 0.5, {}, 1e-12);
    ASSERT_TRUE(solver->Solve(beta));
    const Eigen::VectorXd coef = solver->Coef();
    Eigen::MatrixXd G(l, 3);
    for (Eigen::Index a = 0; a < 3; ++a) G.col(a) = k.train[static_cast<std::size_t>(support[static_cast<std::size_t>(a)])] * coef;
    Eigen::MatrixXd expected;
    if (svm) {
      std::vector<Eigen::Index> free;
      for (Eigen::Index i = 0; i < l; ++i)
        if (solver->Alpha()[i] > 0 && solver->Alpha()[i] < 1.0) free.push_back(i);
      ASSERT_GE(free.size(), 4u) << "the cohort must leave free variables";
      const auto f = static_cast<Eigen::Index>(free.size());
      Eigen::MatrixXd M = Eigen::MatrixXd::Zero(f + 1, f + 1), R = Eigen::MatrixXd::Zero(f + 1, 3);
      for (Eigen::Index a = 0; a < f; ++a) {
        for (Eigen::Index b = 0; b < f; ++b) M(a, b) = K(free[static_cast<std::size_t>(a)], free[static_cast<std::size_t>(b)]);
        M(a, f) = M(f, a) = 1;
        R.row(a) = G.row(free[static_cast<std::size_t>(a)]);
      }
      expected = R.transpose() * M.fullPivLu().solve(R);
    } else {
      const Eigen::MatrixXd A = K + 0.5 * Eigen::MatrixXd::Identity(l, l);
      expected = G.transpose() * A.fullPivLu().solve(G);
    }
    ASSERT_TRUE(solver->CurvatureWithinLimits(support));
    Eigen::MatrixXd H;
    ASSERT_TRUE(solver->Curvature(beta, support, H));
    ASSERT_EQ(H.rows(), 3);
    EXPECT_LT((H - expected).cwiseAbs().maxCoeff(), 1e-8 * expected.cwiseAbs().maxCoeff()) << (svm ? "svm" : "krr") << "\n" << H << "\n vs\n" << expected;
    // Beyond its limit the solver declines, and says so before a solve.
    solver->LimitCurvature(0.0);
    EXPECT_FALSE(solver->CurvatureWithinLimits(support));
    EXPECT_FALSE(solver->Curvature(beta, support, H));
  }
  // A C-SVC with every variable at a bound does not move with the weights: H = 0 (no free row to form a Gram matrix of).
  const auto frozen = nm::learners::MakeFeatureSvc(fold, y, 1e-4, {}, 1e-12, 1000000);
  ASSERT_TRUE(frozen->Solve(beta));
  ASSERT_TRUE(((frozen->Alpha().array() == 0.0) || (frozen->Alpha().array() == 1e-4)).all()) << "expected every variable at a bound at C = 1e-4";
  Eigen::MatrixXd H;
  ASSERT_TRUE(frozen->Curvature(beta, support, H));
  EXPECT_EQ(H, Eigen::MatrixXd::Zero(3, 3));
}

// Adding rows one at a time (the coordinate steps) builds the same vector as the product in one pass.
TEST(FeatureForm, RowUpdatesEqualTheProduct) {
  const Cohort c = MakeCohort(40, 5);
  const Split s = MakeSplit(40);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  const Eigen::VectorXd a = Eigen::VectorXd::LinSpaced(fold.TrainingRows(), 1.0, -0.5);
  const Eigen::VectorXd all = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(c.x.Regions()));
  nm::gram::PreparedVector u = fold.Zero();
  for (Eigen::Index i = 0; i < fold.TrainingRows(); ++i) fold.AddRow(i, a[i], all, u);
  const Eigen::VectorXd direct = fold.Dense(fold.TrainingTransposeTimes(a));
  EXPECT_LT((fold.Dense(u) - direct).cwiseAbs().maxCoeff(), 1e-12 * direct.cwiseAbs().maxCoeff());
}

// Each learner's feature form reaches the kernel path's optimum with the same parameters: decisions within 1e-6 of the
// largest, kernel weights within 1e-5 and ENMKL's objective within 1e-8 relative, at solver tolerances of 1e-10 (ENMKL's
// Newton steps certify its weights at mu = 1 and near it as on the kernel path).
struct LearnerCase {
  std::string learner;
  nm::learners::ParamMap params;
  bool classification;
};

class FeatureLearners : public ::testing::TestWithParam<LearnerCase> {};

TEST_P(FeatureLearners, ReachTheKernelPathsOptimum) {
  const LearnerCase& lc = GetParam();
  const int n = 96;
  const Cohort c = MakeCohort(n, 11);
  const Split s = MakeSplit(n);
  nm::learners::Targets t;
  t.task = lc.classification ? nm::learners::Task::Classification : nm::learners::Task::Regression;
  t.y = Subset(lc.classification ? c.label : c.score, s.train);
  const KernelFold k = PrepareKernels(c.x, s, true, true);
  const nm::learners::Model reference = nm::learners::MakeLearner(lc.learner, lc.params)->Fit(k.train, t);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  const nm::learners::Model model = nm::learners::FitFeatures(lc.learner, lc.params, fold, t);
  EXPECT_EQ(model.info.status, nm::learners::FitStatus::Converged) << lc.learner << " gap " << model.info.gap << " after " << model.info.iterations << " iterations";
  const bool weighted = lc.learner.rfind("enmkl", 0) == 0 || lc.learner == "simplemkl";
  if (weighted) {  // the same objective value (ENMKL's Definition 4; SimpleMKL's SVM dual), to the tolerances above
    EXPECT_NEAR(model.info.objective, reference.info.objective, 1e-8 * reference.info.objective) << lc.learner;
  }
  const Eigen::VectorXd expected = reference.Decision(k.test);
  const Eigen::VectorXd decision = nm::learners::FeatureDecision(model, fold);
  EXPECT_LT(RelativeGap(decision, expected), 1e-6) << lc.learner << ": " << decision.transpose() << "\n vs " << expected.transpose();
  EXPECT_LT((model.beta - reference.beta).cwiseAbs().maxCoeff(), 1e-5) << lc.learner << ": " << model.beta.transpose() << "\n vs "
                                                                       << reference.beta.transpose();
  // The model is the kernel path's model: its decisions on the prepared kernels are the features' decisions.
  EXPECT_LT(RelativeGap(model.Decision(k.test), decision), 1e-10) << lc.learner;
  // The constant region never gets weight.
  EXPECT_EQ(weighted ? model.beta[4] : 0.0, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    AgainstKernels, FeatureLearners,
    ::testing::Values(LearnerCase{"svm", {{"c", 1.0}, {"tolerance", 1e-10}}, true}, LearnerCase{"svm", {{"c", 0.05}, {"tolerance", 1e-10}}, true},
                      LearnerCase{"krr", {{"lambda", 0.1}}, false}, LearnerCase{"krr", {{"lambda", 1.0}}, true},
                      LearnerCase{"enmkl_svm", {{"c", 1.0}, {"mu", 0.5}, {"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, true},
                      LearnerCase{"enmkl_svm", {{"c", 10.0}, {"mu", 0.2}, {"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, true},
                      LearnerCase{"enmkl_svm", {{"c", 1.0}, {"mu", 1.0}, {"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, true},
                      LearnerCase{"enmkl_svm", {{"c", 1.0}, {"mu", 0.0}, {"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, true},
                      LearnerCase{"enmkl_krr", {{"lambda", 0.1}, {"mu", 0.5}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, false},
                      LearnerCase{"enmkl_krr", {{"lambda", 1.0}, {"mu", 0.9}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, false},
                      LearnerCase{"simplemkl", {{"c", 1.0}, {"gap_tolerance", 1e-9}, {"svm_tolerance", 1e-10}, {"max_iterations", 5000}}, true},
                      LearnerCase{"simplemkl", {{"c", 10.0}, {"gap_tolerance", 1e-9}, {"svm_tolerance", 1e-10}, {"max_iterations", 5000}}, true}),
    [](const ::testing::TestParamInfo<LearnerCase>& info) { return info.param.learner + "_" + std::to_string(info.index); });

// ENMKL at mu < 1 with its default tolerances, on many small regions near the edge of the support (116 regions of
// noise, 3 carrying the label, like AAL at a coarse resolution): coordinate steps on the weights contract at a rate
// near 1 here and stall before their tolerance (V no longer falls), 100-200 steps that are each a solve over all rows.
// The water-filling steps end certified (Converged: the weights within 1e-6 of the water-filled fixed point, the
// objective settled, on solves at the full inner tolerance) before the coordinate steps would take over, at the kernel
// path's optimum: weights within 1e-5 and decisions within 1e-5 of the largest (ten times the weights' tolerance, as
// both paths stop within it).
TEST(FeatureForm, EnmklWeightsAreCertifiedAtTheDefaultTolerances) {
  const int n = 400, regions = 116;
  std::mt19937 rng(43);
  std::uniform_int_distribution<int> size(24, 72);
  std::uniform_real_distribution<float> uniform(0.2f, 0.8f);
  FeatureMatrix x;
  x.regionStart = {0};
  for (int r = 0; r < regions; ++r) x.regionStart.push_back(x.regionStart.back() + size(rng));
  x.values.resize(n, x.regionStart.back());
  Eigen::VectorXd label(n), score(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int i = 0; i < n; ++i) {
    label[i] = i % 2 ? 1.0 : -1.0;
    score[i] = label[i] + normal(rng);
    for (Eigen::Index j = 0; j < x.Voxels(); ++j) x.values(i, j) = uniform(rng);
    for (const std::size_t r : {std::size_t{3}, std::size_t{40}, std::size_t{77}})
      for (Eigen::Index j = 0; j < x.RegionSize(r) / 3; ++j) x.values(i, x.regionStart[r] + j) += static_cast<float>(0.04 * label[i]);
  }
  const Split s = MakeSplit(n);
  const KernelFold k = PrepareKernels(x, s, true, true);
  const FoldFeatures fold(x, s.train, s.test, true, true);
  for (const std::string learner : {"enmkl_svm", "enmkl_krr"})
    for (const double mu : {0.5, 0.9, 0.95, 1.0}) {
      nm::learners::Targets t;
      t.task = learner == "enmkl_svm" ? nm::learners::Task::Classification : nm::learners::Task::Regression;
      t.y = Subset(learner == "enmkl_svm" ? label : score, s.train);
      const nm::learners::ParamMap params = learner == "enmkl_svm" ? nm::learners::ParamMap{{"c", 1.0}, {"mu", mu}} : nm::learners::ParamMap{{"lambda", 1.0}, {"mu", mu}};
      const nm::learners::Model model = nm::learners::FitFeatures(learner, params, fold, t);
      const nm::learners::Model reference = nm::learners::MakeLearner(learner, params)->Fit(k.train, t);
      EXPECT_EQ(model.info.status, nm::learners::FitStatus::Converged) << learner << " mu " << mu << " gap " << model.info.gap << " after " << model.info.iterations;
      EXPECT_LT(model.info.iterations, 100) << learner << " mu " << mu;
      EXPECT_LT((model.beta - reference.beta).cwiseAbs().maxCoeff(), 1e-5) << learner << " mu " << mu;
      EXPECT_LT(RelativeGap(nm::learners::FeatureDecision(model, fold), reference.Decision(k.test)), 1e-5) << learner << " mu " << mu;
      std::printf("%s mu %.2f: %d steps %s (%.3f s), beta gap %.2e, decision gap %.2e; kernel path %d steps (%.3f s)\n", learner.c_str(), mu, model.info.iterations,
                  std::string(nm::learners::ToString(model.info.status)).c_str(), model.info.seconds, (model.beta - reference.beta).cwiseAbs().maxCoeff(),
                  RelativeGap(nm::learners::FeatureDecision(model, fold), reference.Decision(k.test)), reference.info.iterations, reference.info.seconds);
      if (mu < 1) continue;
      // Without Newton's steps (their curvature beyond its limit, as at the feature path's scale) the weights' steps
      // contract at ~0.998 here; a small step is no certificate, and a fit that says Converged must be at the optimum.
      const nm::learners::Model plain = nm::learners::FitFeaturesWithCurvature(learner, params, fold, t, nullptr, 0.0);
      const double plainGap = (plain.beta - reference.beta).cwiseAbs().maxCoeff();
      EXPECT_TRUE(plain.info.status != nm::learners::FitStatus::Converged || plainGap < 1e-5)
          << learner << " without Newton: " << nm::learners::ToString(plain.info.status) << " after " << plain.info.iterations << " steps, weights " << plainGap
          << " from the kernel path's";
      std::printf("%s mu 1 without Newton: %d steps %s, beta gap %.2e\n", learner.c_str(), plain.info.iterations,
                  std::string(nm::learners::ToString(plain.info.status)).c_str(), plainGap);
    }
}

// Class weights (C w_i for the SVMs, the weighted squared error for KRR) as on the kernel path.
TEST(FeatureForm, ClassWeightsAsOnTheKernelPath) {
  const int n = 80;
  const Cohort c = MakeCohort(n, 29);
  Split s = MakeSplit(n);
  s.train.erase(std::remove_if(s.train.begin(), s.train.end(), [&](int i) { return c.label[i] > 0 && i % 3 == 0; }), s.train.end());  // unbalanced
  nm::learners::Targets t;
  t.y = Subset(c.label, s.train);
  nm::learners::ClassWeights balanced;
  balanced.balanced = true;
  t.sampleWeights = nm::learners::ClassSampleWeights(balanced, t);
  ASSERT_GT(t.sampleWeights.maxCoeff() - t.sampleWeights.minCoeff(), 0.1);
  const KernelFold k = PrepareKernels(c.x, s, true, true);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  for (const auto& [learner, params] : std::vector<std::pair<std::string, nm::learners::ParamMap>>{
           {"svm", {{"c", 1.0}, {"tolerance", 1e-10}}},
           {"krr", {{"lambda", 0.5}}},
           {"enmkl_svm", {{"c", 1.0}, {"mu", 0.5}, {"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}}}) {
    const Eigen::VectorXd expected = nm::learners::MakeLearner(learner, params)->Fit(k.train, t).Decision(k.test);
    const Eigen::VectorXd decision = nm::learners::FeatureDecision(nm::learners::FitFeatures(learner, params, fold, t), fold);
    EXPECT_LT(RelativeGap(decision, expected), 1e-6) << learner;
  }
}

// The voxel weights are the primal weights: their product with a test subject's prepared voxels gives its decision.
TEST(FeatureForm, VoxelWeightsGiveTheDecisions) {
  const Cohort c = MakeCohort(64, 13);
  const Split s = MakeSplit(64);
  nm::learners::Targets t;
  t.y = Subset(c.label, s.train);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  const nm::learners::Model model = nm::learners::FitFeatures("enmkl_svm", {{"c", 1.0}, {"mu", 0.5}}, fold, t);
  const Eigen::VectorXd w = nm::learners::FeatureVoxelWeights(model, fold);
  const Eigen::VectorXd decision = nm::learners::FeatureDecision(model, fold);
  for (std::size_t i = 0; i < s.test.size(); ++i) {
    double f = model.bias;
    for (std::size_t r = 0; r < c.x.Regions(); ++r) {
      const Eigen::Index begin = c.x.regionStart[r], size = c.x.RegionSize(r);
      const Eigen::VectorXd z = c.x.values.row(s.test[i]).segment(begin, size).transpose().cast<double>() - fold.Mean().segment(begin, size);
      if (z.norm() > 0) f += w.segment(begin, size).dot(z) / z.norm();
    }
    EXPECT_NEAR(f, decision[static_cast<Eigen::Index>(i)], 1e-10 * std::max(1.0, std::abs(f)));
  }
}

// Warm starts along a grid (the neighbour's solver state; ENMKL also its weights) change the path, not the optimum: each
// warm-started fit equals the cold fit within the solvers' tolerances (decisions 1e-6 of the largest). The svm chain takes
// fewer coordinate steps than the cold fits (C 1 -> 10 starts at the optimum's support: 47 steps against 15,146). ENMKL's
// count is not asserted: a neighbour's theta is not always nearer the fixed point than the uniform start, and the two
// builds of CI (x86-64-v3 and baseline x86-64 rounding) measured the warm chain 13 % shorter and 0.3 % longer.
TEST(FeatureForm, WarmStartsAlongAGridReachTheSameOptima) {
  const Cohort c = MakeCohort(96, 23);
  const Split s = MakeSplit(96);
  nm::learners::Targets t;
  t.y = Subset(c.label, s.train);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  for (const std::string learner : {"svm", "enmkl_svm"}) {
    long coldIterations = 0, warmIterations = 0;
    nm::learners::Model previous;
    bool havePrevious = false;
    for (const double C : {0.1, 1.0, 10.0}) {
      nm::learners::ParamMap params = {{"c", C}};
      if (learner == "svm") params["tolerance"] = 1e-8;
      if (learner == "enmkl_svm") params["mu"] = C < 1 ? 0.3 : 0.6;  // the weights' start carries over a change of mu too
      const nm::learners::Model cold = nm::learners::FitFeatures(learner, params, fold, t);
      const nm::learners::Model warm = nm::learners::FitFeatures(learner, params, fold, t, havePrevious ? &previous : nullptr);
      coldIterations += cold.info.innerIterations;
      warmIterations += warm.info.innerIterations;
      const Eigen::VectorXd a = nm::learners::FeatureDecision(cold, fold), b = nm::learners::FeatureDecision(warm, fold);
      EXPECT_LT(RelativeGap(b, a), 1e-6) << learner << " C " << C;
      EXPECT_LT((warm.beta - cold.beta).cwiseAbs().maxCoeff(), 1e-5) << learner << " C " << C;
      previous = warm;
      havePrevious = true;
    }
    if (learner == "svm") {
      EXPECT_LT(warmIterations, coldIterations);
    }
  }
  // A state that does not fit the fold (another fold's size) is ignored, not used.
  nm::learners::Model stranger;
  stranger.solverState = Eigen::VectorXd::Ones(5);
  const nm::learners::Model fromStranger = nm::learners::FitFeatures("svm", {{"c", 1.0}}, fold, t, &stranger);
  EXPECT_EQ(nm::learners::FeatureDecision(fromStranger, fold), nm::learners::FeatureDecision(nm::learners::FitFeatures("svm", {{"c", 1.0}}, fold, t), fold));
}

// The feature SVM's box as the kernel path's (FitInfo::solvesLargerC): where no variable ends at C the fit is that of
// every larger C (a cold fit at 100 C gives the same decisions), and where one does a larger C changes the fit.
TEST(FeatureForm, AFitWithNoVariableAtItsBoundIsTheFitOfEveryLargerC) {
  const Cohort c = MakeCohort(96, 29);
  const Split s = MakeSplit(96);
  nm::learners::Targets t;
  t.y = Subset(c.label, s.train);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  for (const std::string learner : {"svm", "enmkl_svm"}) {
    int interior = 0, bound = 0;
    for (const double C : {1e-3, 0.1, 10.0, 1000.0}) {
      const auto params = [&](double c) {
        nm::learners::ParamMap p = {{"c", c}};
        if (learner == "svm") p["tolerance"] = 1e-10;
        else p.insert({{"mu", 0.5}, {"svm_tolerance", 1e-10}});
        return p;
      };
      const nm::learners::Model fit = nm::learners::FitFeatures(learner, params(C), fold, t);
      ASSERT_EQ(fit.info.status, nm::learners::FitStatus::Converged) << learner << " C " << C;
      const Eigen::VectorXd alpha = fit.solverState.head(t.y.size());
      EXPECT_EQ(fit.info.solvesLargerC, !(alpha.array() >= C).any()) << learner << " C " << C;
      const nm::learners::Model larger = nm::learners::FitFeatures(learner, params(100 * C), fold, t);
      const double gap = RelativeGap(nm::learners::FeatureDecision(larger, fold), nm::learners::FeatureDecision(fit, fold));
      if (fit.info.solvesLargerC) {
        ++interior;
        // ENMKL stops on its weights' distance to the fixed point (default 1e-6 relative), which moves the decisions by
        // a few times that: the gap the box makes (> 1e-3) is far above either bound.
        EXPECT_LT(gap, learner == "svm" ? 1e-6 : 1e-4) << learner << " C " << C;
      } else {
        ++bound;
        EXPECT_GT(gap, 1e-3) << learner << " C " << C;
      }
    }
    EXPECT_GT(interior, 0) << learner;
    EXPECT_GT(bound, 0) << learner;
  }
}

// When every variable ends at a bound the bias is not unique: any value in the interval the bounded variables allow is
// optimal, and LIBSVM's rule takes its middle. The feature solver approaches y'alpha = 0 by multipliers from inside the
// box, so the variable that ends the interval can stop a hair short of its bound; counted as free, it would set the bias
// to the interval's end instead. Started there (every alpha at C but that one, 4e-11 short, and the multiplier at the
// interval's end), the fit must still give the kernel path's bias.
TEST(FeatureForm, BiasOfAFitWithEveryVariableAtABoundIsTheMiddleOfItsInterval) {
  Cohort c = MakeCohort(90, 41);
  for (Eigen::Index i = 0; i < c.x.Subjects(); ++i)  // a strong signal: at small C every variable is at C
    for (Eigen::Index j = 0; j < c.x.RegionSize(0); ++j) c.x.values(i, j) += static_cast<float>(0.15 * c.label[i]);
  Split s;
  for (int i = 0; i < 90; ++i) (i % 3 == 1 ? s.test : s.train).push_back(i);
  nm::learners::Targets t;
  t.y = Subset(c.label, s.train);
  const KernelFold k = PrepareKernels(c.x, s, true, true);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  const double C = 0.02;
  const nm::learners::ParamMap params = {{"c", C}, {"tolerance", 1e-10}};
  const nm::learners::Model reference = nm::learners::MakeLearner("svm", params)->Fit(k.train, t);
  ASSERT_TRUE((reference.alpha.array() == C).all()) << "not the degenerate case this test is about";
  // y_i times LIBSVM's gradient; with every alpha at C the bias interval is [-min over y_i < 0, -max over y_i > 0].
  const Eigen::VectorXd yg = reference.Decision(k.train).array() - reference.bias - t.y.array();
  Eigen::Index end = -1;
  for (Eigen::Index i = 0; i < yg.size(); ++i)
    if (t.y[i] < 0 && (end < 0 || yg[i] < yg[end])) end = i;
  ASSERT_GT(std::abs(-yg[end] - reference.bias), 1e-3) << "the interval's end must differ from its middle";
  nm::learners::Model start;
  start.solverState.resize(t.y.size() + 1);
  start.solverState << reference.alpha, -yg[end];
  start.solverState[end] -= 4e-11;
  const nm::learners::Model model = nm::learners::FitFeatures("svm", params, fold, t, &start);
  EXPECT_NEAR(model.bias, reference.bias, 1e-8) << "the interval's end is " << -yg[end];
  EXPECT_LT(RelativeGap(nm::learners::FeatureDecision(model, fold), reference.Decision(k.test)), 1e-6);
}

// KeepRows is the gather x(rows, :) done in place: rows in any order, a subset, none, all; bad rows are refused.
TEST(FeatureForm, KeepRowsIsTheGatherInPlace) {
  FeatureMatrix x;
  x.values = nm::gram::FeatureRows::Random(7, 5);
  x.regionStart = {0, 2, 5};
  for (const std::vector<int>& rows : std::vector<std::vector<int>>{{4, 0, 6, 2}, {1, 2, 0}, {6, 5, 4, 3, 2, 1, 0}, {0, 1, 2, 3, 4, 5, 6}, {3}, {}}) {
    FeatureMatrix kept = x;
    kept.KeepRows(rows);
    ASSERT_EQ(kept.Subjects(), static_cast<Eigen::Index>(rows.size()));
    EXPECT_EQ(kept.Voxels(), 5);
    for (std::size_t k = 0; k < rows.size(); ++k) EXPECT_EQ(kept.values.row(static_cast<Eigen::Index>(k)), x.values.row(rows[k])) << "row " << k;
  }
  FeatureMatrix bad = x;
  EXPECT_THROW(bad.KeepRows({0, 7}), nm::InputError);
  EXPECT_THROW(bad.KeepRows({2, -1}), nm::InputError);
  EXPECT_THROW(bad.KeepRows({3, 1, 3}), nm::InputError);
}

// Results do not depend on the number of threads (every sum is split by region or by row, never by thread), also with
// rows long enough (a region of 17,000 noise voxels added) that the coordinate steps share a row's regions over threads.
TEST(FeatureForm, ThreadCountDoesNotChangeTheFit) {
  Cohort c = MakeCohort(80, 17);
  Cohort wide = c;
  const Eigen::Index extra = 17000;
  wide.x.values.conservativeResize(Eigen::NoChange, c.x.Voxels() + extra);
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> uniform(0.2f, 0.8f);
  for (Eigen::Index i = 0; i < wide.x.Subjects(); ++i)
    for (Eigen::Index j = c.x.Voxels(); j < wide.x.Voxels(); ++j) wide.x.values(i, j) = uniform(rng);
  wide.x.regionStart.push_back(wide.x.Voxels());
  const Split s = MakeSplit(80);
  nm::learners::Targets t;
  t.y = Subset(c.label, s.train);
  for (const Cohort* cohort : {&c, &wide})
    for (const std::string learner : {"svm", "enmkl_svm"}) {
      const nm::learners::ParamMap params = learner == "svm" ? nm::learners::ParamMap{{"c", 1.0}} : nm::learners::ParamMap{{"c", 1.0}, {"mu", 0.5}};
      const FoldFeatures fold(cohort->x, s.train, s.test, true, true);
      Eigen::VectorXd one, two;
      {
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
        one = nm::learners::FeatureDecision(nm::learners::FitFeatures(learner, params, fold, t), fold);
      }
      {
        tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
        two = nm::learners::FeatureDecision(nm::learners::FitFeatures(learner, params, fold, t), fold);
      }
      EXPECT_EQ(one, two) << learner << " over " << cohort->x.Voxels() << " voxels";
    }
}

TEST(FeatureForm, BadInputIsRefusedWithWhatWasExpected) {
  const Cohort c = MakeCohort(40, 19);
  const Split s = MakeSplit(40);
  const FoldFeatures fold(c.x, s.train, s.test, true, true);
  nm::learners::Targets t;
  t.y = Subset(c.label, s.train);
  EXPECT_THROW(nm::learners::FitFeatures("mkl_bp", {}, fold, t), nm::InvalidParameter);
  nm::learners::Targets regression = t;
  regression.task = nm::learners::Task::Regression;
  try {
    nm::learners::FitFeatures("simplemkl", {}, fold, regression);  // its epsilon-SVR has no feature form
    ADD_FAILURE() << "expected an InputError";
  } catch (const nm::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected a classification target"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nm::learners::FitFeatures("svm", {{"c", -1.0}}, fold, t), nm::InvalidParameter);
  nm::learners::Targets shortTargets;
  shortTargets.y = t.y.head(5);
  try {
    nm::learners::FitFeatures("svm", {}, fold, shortTargets);
    ADD_FAILURE() << "expected an InputError";
  } catch (const nm::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected one target per training subject (30); found 5"), std::string::npos) << e.what();
  }
  nm::learners::Targets oneClass = t;
  oneClass.y.setOnes();
  EXPECT_THROW(nm::learners::FitFeatures("enmkl_svm", {}, fold, oneClass), nm::InputError);
  FeatureMatrix bad = c.x;
  bad.regionStart.back() -= 1;
  EXPECT_THROW(bad.Check(), nm::InputError);
  EXPECT_THROW(FoldFeatures(c.x, {0, 1, 99}, {}, true, true), nm::InputError);
}
