// missing_source "impute": every fold gives the subjects a source lacks that source's mean over the fold's training
// subjects having it, in feature space. Checked against the fold of features imputed by hand, for the zero rows centring
// leaves, for leakage, and for a fold whose training set has nobody with the source.
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/fold_formed.hpp"
#include "neuromkl/gram/memory.hpp"
#include "testing.hpp"

using namespace neuromkl;

namespace {

/// Features of a source some subjects lack (their rows never read: set to a marker here), a second source every subject
/// has, and a covariate.
struct Source {
  int n = 30;
  Eigen::MatrixXd X, other, covariate;
  std::vector<char> present;
};

Source MakeSource(unsigned seed) {
  Source s;
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  s.X.resize(s.n, 7);
  s.other.resize(s.n, 4);
  s.covariate.resize(s.n, 1);
  for (int i = 0; i < s.n; ++i) {
    for (Eigen::Index v = 0; v < s.X.cols(); ++v) s.X(i, v) = 1.0 + normal(rng) + 0.3 * v;
    for (Eigen::Index v = 0; v < s.other.cols(); ++v) s.other(i, v) = normal(rng);
    s.covariate(i, 0) = normal(rng);
    s.present.push_back(i % 5 != 2);  // 6 of 30 lack the source, in training and test folds alike
  }
  return s;
}

/// The kernel stage's kernels: the lacking rows as the stage lays them (zero), then the fold-formed store over them.
gram::FoldFormedKernels Store(const Source& s) {
  Eigen::MatrixXd laid = s.X;
  for (int i = 0; i < s.n; ++i)
    if (!s.present[static_cast<std::size_t>(i)]) laid.row(i).setZero();
  auto kernels = std::make_shared<gram::KernelList>(gram::KernelList{laid * laid.transpose(), s.other * s.other.transpose()});
  std::vector<gram::KernelOrigin> origins(2);
  origins[0].present = std::make_shared<const std::vector<char>>(s.present);
  origins[0].presentSource = "pet";
  return gram::FoldFormedKernels(std::move(kernels), std::move(origins), std::make_shared<const std::vector<gram::HarmonisedSource>>(), nullptr);
}

void Split(int n, std::vector<int>& train, std::vector<int>& test) {
  for (int i = 0; i < n; ++i) (i % 4 == 1 ? test : train).push_back(i);
}

gram::Preprocessing WithCovariate(const Source& s, bool normalise) {
  gram::Preprocessing pre;
  pre.normalise = normalise;
  auto covariates = std::make_shared<gram::Covariates>();
  covariates->design.resize(s.n, 2);
  covariates->design << Eigen::VectorXd::Ones(s.n), s.covariate;
  pre.covariates = std::move(covariates);
  return pre;
}

}  // namespace

TEST(ImputedSource, AFoldIsTheFoldOfFeaturesImputedWithTheTrainingMeanOfThoseHavingTheSource) {
  const Source s = MakeSource(3);
  std::vector<int> train, test;
  Split(s.n, train, test);
  // By hand: the lacking subjects' features are the mean over the training subjects having the source.
  Eigen::RowVectorXd mean = Eigen::RowVectorXd::Zero(s.X.cols());
  int having = 0;
  for (const int i : train)
    if (s.present[static_cast<std::size_t>(i)]) mean += s.X.row(i), ++having;
  mean /= having;
  Eigen::MatrixXd imputed = s.X;
  for (int i = 0; i < s.n; ++i)
    if (!s.present[static_cast<std::size_t>(i)]) imputed.row(i) = mean;
  const gram::MemoryKernels byHand(gram::KernelList{imputed * imputed.transpose(), s.other * s.other.transpose()});
  const gram::FoldFormedKernels store = Store(s);
  for (const bool covariates : {false, true})
    for (const bool normalise : {false, true}) {
      gram::Preprocessing pre = covariates ? WithCovariate(s, normalise) : gram::Preprocessing{};
      pre.normalise = normalise;
      const gram::FoldKernels got = gram::PrepareFold(store, train, test, pre), want = gram::PrepareFold(byHand, train, test, pre);
      // The same kernel values summed in another order (means of kernel rows against products of mean features): 1e-12 of
      // the largest entry. Residualised, the imputed subjects differ only by the covariate's fitted effect: their norms are
      // small, and normalising divides that rounding by them (1e-10).
      const double tolerance = covariates && normalise ? 1e-10 : 1e-12;
      for (std::size_t k = 0; k < 2; ++k) {
        EXPECT_TRUE(neuromkl::testing::MatrixNear(got.train[k], want.train[k], tolerance)) << "covariates " << covariates << ", normalise " << normalise;
        EXPECT_TRUE(neuromkl::testing::MatrixNear(got.test[k], want.test[k], tolerance)) << "covariates " << covariates << ", normalise " << normalise;
      }
      if (covariates) continue;
      // Centred on the training mean, an imputed subject is at the origin: its rows of the source's kernel are zero.
      for (std::size_t p = 0; p < train.size(); ++p)
        if (!s.present[static_cast<std::size_t>(train[p])]) {
          EXPECT_LT(got.train[0].row(static_cast<Eigen::Index>(p)).cwiseAbs().maxCoeff(), 1e-12);
        }
      for (std::size_t p = 0; p < test.size(); ++p)
        if (!s.present[static_cast<std::size_t>(test[p])]) {
          EXPECT_LT(got.test[0].row(static_cast<Eigen::Index>(p)).cwiseAbs().maxCoeff(), 1e-12);
        }
    }
}

TEST(ImputedSource, NothingImputedInATrainingSetDependsOnATestSubject) {
  Source s = MakeSource(4);
  std::vector<int> train, test;
  Split(s.n, train, test);
  const gram::Preprocessing pre;
  const gram::FoldKernels before = gram::PrepareFold(Store(s), train, test, pre);
  // A test subject having the source changes its features; another test subject loses the source.
  const int changed = test[0], lost = test[1];
  ASSERT_TRUE(s.present[static_cast<std::size_t>(changed)] && s.present[static_cast<std::size_t>(lost)]);
  s.X.row(changed) *= 3.0;
  s.present[static_cast<std::size_t>(lost)] = 0;
  const gram::FoldKernels after = gram::PrepareFold(Store(s), train, test, pre);
  EXPECT_EQ(after.train[0], before.train[0]);  // bit for bit: the imputation read the training subjects only
  for (Eigen::Index t = 0; t < static_cast<Eigen::Index>(test.size()); ++t) {
    const int subject = test[static_cast<std::size_t>(t)];
    if (subject == changed || subject == lost) {
      EXPECT_GT((after.test[0].row(t) - before.test[0].row(t)).cwiseAbs().maxCoeff(), 1e-6);
    } else {
      EXPECT_EQ(after.test[0].row(t), before.test[0].row(t));
    }
  }
}

TEST(ImputedSource, AFoldWhoseTrainingSetLacksTheSourceIsAnInputErrorNamingIt) {
  Source s = MakeSource(5);
  std::vector<int> train, test;
  Split(s.n, train, test);
  for (const int i : train) s.present[static_cast<std::size_t>(i)] = 0;
  try {
    gram::PrepareFold(Store(s), train, test, gram::Preprocessing{});
    FAIL() << "expected sources:NoneToImpute";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "sources:NoneToImpute");
    EXPECT_NE(std::string(e.what()).find("\"pet\""), std::string::npos) << e.what();
  }
}

// A map of the imputed source reads only the images that exist: the subject weights of a fold model, with the lacking
// subjects' weights moved onto the training subjects having the source, give the model's decisions. Without
// normalisation, the difference of two test subjects' decisions is the map's product with the difference of their features.
TEST(ImputedSource, MapsOverTheSubjectsHavingTheSourceGiveTheDecisionValues) {
  const Source s = MakeSource(6);
  std::vector<int> train, test;
  Split(s.n, train, test);
  const gram::FoldFormedKernels store = Store(s);
  gram::Preprocessing pre;
  pre.normalise = false;
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  Eigen::VectorXd coef(static_cast<Eigen::Index>(train.size()));
  for (Eigen::Index i = 0; i < coef.size(); ++i) coef[i] = normal(rng);
  const Eigen::VectorXd beta = Eigen::VectorXd::Ones(2);
  Eigen::MatrixXd D = store.SubjectWeights({train, test, coef, beta}, pre);
  gram::MoveImputedWeights(D, s.present, train);
  for (int i = 0; i < s.n; ++i)
    if (!s.present[static_cast<std::size_t>(i)]) {
      EXPECT_EQ(D(i, 0), 0.0) << "subject " << i;
    }
  Eigen::MatrixXd having = s.X;  // the lacking rows' values are never read: a marker that would show
  for (int i = 0; i < s.n; ++i)
    if (!s.present[static_cast<std::size_t>(i)]) having.row(i).setConstant(1e6);
  const Eigen::VectorXd map = having.transpose() * D.col(0);
  const gram::FoldKernels fold = gram::PrepareFold(store, train, test, pre);
  const Eigen::VectorXd decisions = fold.test[0] * coef;
  std::vector<Eigen::Index> withSource;
  for (std::size_t t = 0; t < test.size(); ++t)
    if (s.present[static_cast<std::size_t>(test[t])]) withSource.push_back(static_cast<Eigen::Index>(t));
  ASSERT_GE(withSource.size(), 2u);
  for (std::size_t q = 1; q < withSource.size(); ++q) {
    const Eigen::Index a = withSource[0], b = withSource[q];
    const double byMap = map.dot(s.X.row(test[static_cast<std::size_t>(a)]) - s.X.row(test[static_cast<std::size_t>(b)]));
    // Sums of ~20 products of unit-scale terms: 1e-10 of the decisions' scale.
    EXPECT_NEAR(byMap, decisions[a] - decisions[b], 1e-10 * (1.0 + decisions.cwiseAbs().maxCoeff())) << "test subjects " << a << ", " << b;
  }
}
