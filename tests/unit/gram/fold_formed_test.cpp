// The store of harmonised sources: each fold fits ComBat on its training subjects only (or their reference group),
// harmonises its training and test subjects with those estimates and forms their region kernels from the harmonised
// voxels. Checked against the fold assembled by hand, for leakage, for the site effects it removes, and for its subsets.
#include <algorithm>
#include <cmath>
#include <limits>
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

/// Three sites with a shift and a scale per voxel, a covariate with a small effect, and two "regions" of voxels, plus a
/// kernel of another source (a full kernel, unharmonised).
struct Cohort {
  int n = 36;
  Eigen::MatrixXf voxels;
  std::vector<int> sites;
  Eigen::MatrixXd covariates;
  gram::KernelList full;  ///< kernel 0: region A (unused, harmonised), kernel 1: another source, kernel 2: region B
  std::vector<gram::KernelOrigin> origins;
};

Cohort MakeCohort(unsigned seed, double siteEffect = 1.0) {
  Cohort c;
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const int V = 30;
  c.voxels.resize(c.n, V);
  c.covariates.resize(c.n, 1);
  Eigen::MatrixXd shift(3, V), scale(3, V);
  for (int s = 0; s < 3; ++s)
    for (int v = 0; v < V; ++v) {
      shift(s, v) = siteEffect * 2.0 * normal(rng);
      scale(s, v) = 1.0 + siteEffect * (0.5 + 0.4 * normal(rng) > 0 ? 0.8 : -0.4);
    }
  for (int i = 0; i < c.n; ++i) {
    c.sites.push_back(i % 3);
    c.covariates(i, 0) = 40.0 + 10.0 * normal(rng);
    for (int v = 0; v < V; ++v)
      c.voxels(i, v) = static_cast<float>(5.0 + 0.02 * c.covariates(i, 0) + shift(i % 3, v) + scale(i % 3, v) * normal(rng));
  }
  Eigen::MatrixXd other(c.n, 4);
  for (Eigen::Index k = 0; k < other.size(); ++k) other.data()[k] = normal(rng);
  c.full = {Eigen::MatrixXd(), other * other.transpose(), Eigen::MatrixXd()};
  c.origins = {gram::KernelOrigin::Voxels(0, 0, 12), gram::KernelOrigin{}, gram::KernelOrigin::Voxels(0, 12, V)};
  return c;
}

std::shared_ptr<gram::Harmonisation> Design(const Cohort& c, bool empiricalBayes, std::vector<char> fitRow = {}) {
  auto h = std::make_shared<gram::Harmonisation>();
  h->sites = c.sites;
  h->siteNames = {"A", "B", "C"};
  h->covariates = c.covariates;
  h->fitRow = std::move(fitRow);
  h->options.empiricalBayes = empiricalBayes;
  h->where = "study.json /harmonisation";
  return h;
}

gram::FoldFormedKernels Store(const Cohort& c, std::shared_ptr<gram::Harmonisation> design, std::uint64_t keptBytes = 0) {
  auto sources = std::make_shared<std::vector<gram::HarmonisedSource>>();
  sources->push_back({"gm", std::make_shared<const Eigen::MatrixXf>(c.voxels)});
  return gram::FoldFormedKernels(std::make_shared<const gram::KernelList>(c.full), c.origins, sources, std::move(design), keptBytes);
}

void Split(int n, std::vector<int>& train, std::vector<int>& test) {
  for (int i = 0; i < n; ++i) (i % 6 == 5 || i % 6 == 0 ? test : train).push_back(i);
}

TEST(FoldFormedKernels, AFoldIsTheFoldOfKernelsFormedFromTheTrainingFitHarmonisedVoxels) {
  const Cohort c = MakeCohort(1);
  std::vector<int> train, test;
  Split(c.n, train, test);
  std::vector<char> controls(static_cast<std::size_t>(c.n));
  for (int i = 0; i < c.n; ++i) controls[static_cast<std::size_t>(i)] = i % 4 != 0;  // every site keeps some in training
  for (const bool eb : {false, true})
    for (const bool reference : {false, true}) {
      const std::string what = std::string(eb ? "empirical Bayes" : "no empirical Bayes") + (reference ? ", reference group" : "");
      const auto design = Design(c, eb, reference ? controls : std::vector<char>{});
      const gram::FoldFormedKernels store = Store(c, design);
      // By hand: ComBat fitted on the training subjects (of the reference group), applied to the fold's subjects.
      std::vector<Eigen::Index> fit;
      std::vector<int> fitSites;
      for (const int i : train)
        if (!reference || controls[static_cast<std::size_t>(i)]) fit.push_back(i), fitSites.push_back(c.sites[static_cast<std::size_t>(i)]);
      gram::ComBatOptions options;
      options.empiricalBayes = eb;
      const Eigen::MatrixXf fitVoxels = c.voxels(fit, Eigen::all);
      const gram::ComBatModel model = gram::FitComBat(fitVoxels, fitSites, c.covariates(fit, Eigen::all), options, "test");
      std::vector<int> rows = train;
      rows.insert(rows.end(), test.begin(), test.end());
      Eigen::MatrixXd X = c.voxels(rows, Eigen::all).cast<double>();
      std::vector<int> rowSites;
      for (const int i : rows) rowSites.push_back(c.sites[static_cast<std::size_t>(i)]);
      gram::ApplyComBat(model, X, rowSites, c.covariates(rows, Eigen::all), "test");
      const Eigen::VectorXi index = Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size()));
      gram::KernelList local = {X.leftCols(12) * X.leftCols(12).transpose(), c.full[1](index, index), X.rightCols(18) * X.rightCols(18).transpose()};
      const gram::MemoryKernels byHand(std::move(local));
      std::vector<int> localTrain, localTest;
      for (std::size_t i = 0; i < rows.size(); ++i) (i < train.size() ? localTrain : localTest).push_back(static_cast<int>(i));
      for (const bool normalise : {false, true}) {
        gram::Preprocessing pre;
        pre.normalise = normalise;
        pre.kernelGroups = {0, 1, 0};
        const gram::FoldKernels got = gram::PrepareFold(store, train, test, pre), want = gram::PrepareFold(byHand, localTrain, localTest, pre);
        ASSERT_EQ(got.train.size(), 3u);
        for (std::size_t k = 0; k < 3; ++k) {
          // The two kernels are the same harmonised products summed in different orders: 1e-12 of their largest entry.
          EXPECT_TRUE(neuromkl::testing::MatrixNear(got.train[k], want.train[k], 1e-12)) << what << ", kernel " << k;
          EXPECT_TRUE(neuromkl::testing::MatrixNear(got.test[k], want.test[k], 1e-12)) << what << ", kernel " << k;
        }
      }
    }
}

TEST(FoldFormedKernels, NothingFittedOnTheTrainingSetDependsOnATestSubject) {
  Cohort c = MakeCohort(2);
  std::vector<int> train, test;
  Split(c.n, train, test);
  const gram::Preprocessing pre;
  const gram::FoldKernels before = gram::PrepareFold(Store(c, Design(c, true)), train, test, pre);
  // A test subject's images and site change (to another site the training set has).
  const int changed = test[1];
  for (Eigen::Index v = 0; v < c.voxels.cols(); ++v) c.voxels(changed, v) += 3.0F * static_cast<float>(v % 4);
  c.sites[static_cast<std::size_t>(changed)] = (c.sites[static_cast<std::size_t>(changed)] + 1) % 3;
  const gram::FoldKernels after = gram::PrepareFold(Store(c, Design(c, true)), train, test, pre);
  for (std::size_t k : {0u, 2u}) {
    EXPECT_EQ(after.train[k], before.train[k]) << "kernel " << k;  // bit for bit: the fit saw the training subjects only
    for (Eigen::Index t = 0; t < static_cast<Eigen::Index>(test.size()); ++t) {
      if (test[static_cast<std::size_t>(t)] == changed)
        EXPECT_GT((after.test[k].row(t) - before.test[k].row(t)).cwiseAbs().maxCoeff(), 1e-3) << "kernel " << k;
      else
        EXPECT_EQ(after.test[k].row(t), before.test[k].row(t)) << "kernel " << k;
    }
  }
}

// Missing preserved covariates: each fold imputes them from its training subjects (the median), and the fold equals the
// fold of a design filled by hand with that median; a test subject's covariate (missing or given) changes nothing fitted.
TEST(FoldFormedKernels, MissingPreservedCovariatesAreImputedFromTheTrainingSubjects) {
  Cohort c = MakeCohort(4);
  std::vector<int> train, test;
  Split(c.n, train, test);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const int i : {train[2], train[9], test[0]}) c.covariates(i, 0) = nan;
  std::vector<double> values;
  for (const int i : train)
    if (!std::isnan(c.covariates(i, 0))) values.push_back(c.covariates(i, 0));
  std::sort(values.begin(), values.end());
  const std::size_t h = values.size() / 2;
  const double median = values.size() % 2 ? values[h] : 0.5 * (values[h - 1] + values[h]);
  Cohort byHand = c;
  for (Eigen::Index i = 0; i < c.n; ++i)
    if (std::isnan(byHand.covariates(i, 0))) byHand.covariates(i, 0) = median;
  auto design = [](const Cohort& cohort) {
    auto d = Design(cohort, true);
    d->categoryOf = {-1};
    return d;
  };
  const gram::Preprocessing pre;
  const gram::FoldKernels imputed = gram::PrepareFold(Store(c, design(c)), train, test, pre);
  const gram::FoldKernels hand = gram::PrepareFold(Store(byHand, design(byHand)), train, test, pre);
  for (std::size_t k : {0u, 2u}) {
    EXPECT_EQ(imputed.train[k], hand.train[k]) << "kernel " << k;  // the same numbers through the same code
    EXPECT_EQ(imputed.test[k], hand.test[k]) << "kernel " << k;
  }
  Cohort moved = c;
  moved.covariates(test[0], 0) = 80.0;
  moved.covariates(test[1], 0) = nan;
  const gram::FoldKernels after = gram::PrepareFold(Store(moved, design(moved)), train, test, pre);
  for (std::size_t k : {0u, 2u}) {
    EXPECT_EQ(after.train[k], imputed.train[k]) << "kernel " << k;
    EXPECT_GT((after.test[k].row(0) - imputed.test[k].row(0)).cwiseAbs().maxCoeff(), 1e-6) << "kernel " << k;
  }
}

/// Squared distance between the site means of the training subjects in the feature space of training kernel K (its
/// rows are the fold's training subjects with sites `sites`): e'Ke, e the difference of the two sites' mean indicators.
double SiteMeanDistance(const Eigen::MatrixXd& K, const std::vector<int>& sites, int a, int b) {
  Eigen::VectorXd e = Eigen::VectorXd::Zero(K.rows());
  double na = 0, nb = 0;
  for (std::size_t i = 0; i < sites.size(); ++i) na += sites[i] == a, nb += sites[i] == b;
  for (std::size_t i = 0; i < sites.size(); ++i) e[static_cast<Eigen::Index>(i)] = (sites[i] == a ? 1.0 / na : 0.0) - (sites[i] == b ? 1.0 / nb : 0.0);
  return e.dot(K * e);
}

TEST(FoldFormedKernels, TheTrainingSitesShareOneMeanAfterLocationAndScaleAreRemoved) {
  // Without covariates and without shrinkage every site's training voxels have the pooled mean after ComBat: the sites'
  // mean images coincide (to rounding), while before harmonising they are far apart.
  Cohort c = MakeCohort(3, 2.0);
  c.covariates.resize(c.n, 0);
  std::vector<int> train, test;
  Split(c.n, train, test);
  std::vector<int> trainSites;
  for (const int i : train) trainSites.push_back(c.sites[static_cast<std::size_t>(i)]);
  gram::Preprocessing raw;
  raw.normalise = false;
  const gram::FoldKernels harmonised = gram::PrepareFold(Store(c, Design(c, false)), train, test, raw);
  const gram::MemoryKernels rawStore(gram::KernelList{c.voxels.leftCols(12).cast<double>() * c.voxels.leftCols(12).cast<double>().transpose()});
  const gram::FoldKernels unharmonised = gram::PrepareFold(rawStore, train, test, raw);
  for (const auto& [a, b] : {std::pair{0, 1}, {0, 2}, {1, 2}}) {
    const double before = SiteMeanDistance(unharmonised.train[0], trainSites, a, b);
    const double after = SiteMeanDistance(harmonised.train[0], trainSites, a, b);
    EXPECT_GT(before, 10.0) << a << " vs " << b;
    EXPECT_LT(after, 1e-10 * before) << a << " vs " << b;
  }
}

TEST(FoldFormedKernels, ASubsetPreparesTheParentsKernelsHarmonisedWithTheWholeSource) {
  const Cohort c = MakeCohort(4);
  std::vector<int> train, test;
  Split(c.n, train, test);
  const gram::FoldFormedKernels store = Store(c, Design(c, true));
  const auto part = store.Subset({2, 1});
  const gram::Preprocessing pre;
  const gram::FoldKernels whole = gram::PrepareFold(store, train, test, pre), subset = gram::PrepareFold(*part, train, test, pre);
  ASSERT_EQ(subset.train.size(), 2u);
  EXPECT_EQ(subset.train[0], whole.train[2]);
  EXPECT_EQ(subset.test[0], whole.test[2]);
  EXPECT_EQ(subset.train[1], whole.train[1]);
  EXPECT_THROW(store.Subset({3}), std::out_of_range);
}

TEST(FoldFormedKernels, MapsOfTheHarmonisedTrainingImagesGiveTheDecisionValues) {
  // A fold model's decision for a test subject is sum_k beta_k sum_i coef_i K*_k(t, i) over the fold's harmonised kernels;
  // the maps w_k = sum_i D(i, k) x*_i (ColumnWeights, D = SubjectWeights) applied to the test subject's harmonised
  // voxels give the same number: the maps are exact for the harmonised data.
  const Cohort c = MakeCohort(8);
  std::vector<int> train, test;
  Split(c.n, train, test);
  const gram::FoldFormedKernels store = Store(c, Design(c, true));
  gram::Preprocessing pre;
  pre.centre = false;
  pre.normalise = false;
  const Eigen::VectorXd coef = Eigen::VectorXd::LinSpaced(static_cast<Eigen::Index>(train.size()), -1.0, 1.3);
  const Eigen::VectorXd beta = (Eigen::VectorXd(3) << 0.5, 0.0, 0.25).finished();
  const gram::FoldKernels fold = gram::PrepareFold(store, train, test, pre);
  const Eigen::VectorXd decision = beta[0] * fold.test[0] * coef + beta[2] * fold.test[2] * coef;
  const Eigen::MatrixXd D = store.SubjectWeights({train, test, coef, beta}, pre);
  const auto w = store.ColumnWeights(0, train, {&D}, "test");
  ASSERT_EQ(w.size(), 1u);
  // The test subjects harmonised by hand with the fold's training fit.
  const gram::ComBatModel model = store.FitFold(0, train, "test");
  Eigen::MatrixXd X = c.voxels(test, Eigen::all).cast<double>();
  std::vector<int> sites;
  for (const int i : test) sites.push_back(c.sites[static_cast<std::size_t>(i)]);
  gram::ApplyComBat(model, X, sites, c.covariates(test, Eigen::all), "test");
  const Eigen::VectorXd fromMaps = X * w[0];
  // Two sums of the same products in different orders: 1e-10 of the decisions' scale.
  EXPECT_LT((fromMaps - decision).cwiseAbs().maxCoeff(), 1e-10 * decision.cwiseAbs().maxCoeff());
  EXPECT_GT(decision.cwiseAbs().maxCoeff(), 1.0);
}

TEST(FoldFormedKernels, TrainingKernelsReadInPlaceOutliveTheirFoldHandle) {
  // A fold's own kernels are what its in-place training kernels read: they stay alive with them after the fold handle
  // goes (as a store's kernels do for a fold of kernels in memory). Under AddressSanitizer a freed read fails here.
  const Cohort c = MakeCohort(9);
  std::vector<int> train, test;
  Split(c.n, train, test);
  const gram::FoldFormedKernels store = Store(c, Design(c, true));
  const gram::Preprocessing pre;
  const gram::FoldKernels copies = gram::PrepareFold(store, train, test, pre);
  gram::WeightedKernels w;
  store.OpenFold(train, test, pre)->Weighted(gram::TrainingForm::InPlace, w);  // the handle is gone after this line
  ASSERT_TRUE(w.kernels);
  const Eigen::VectorXd weights = (Eigen::VectorXd(3) << 0.5, 0.2, 0.3).finished();
  const Eigen::MatrixXd combined = w.kernels->Stack()->Combine(weights);
  const Eigen::MatrixXd expected = 0.5 * copies.train[0] + 0.2 * copies.train[1] + 0.3 * copies.train[2];
  EXPECT_TRUE(neuromkl::testing::MatrixNear(combined, expected, 1e-12));
  Eigen::MatrixXd buffer;
  const gram::TestBlocks blocks = w.Test(buffer);
  EXPECT_EQ(blocks.block(2), copies.test[2]);
}

TEST(FoldFormedKernels, KeptFoldsGiveWhatFormingThemAgainGives) {
  // Folds opened in turn, with room for none, one or every fold kept: every answer is the fresh store's.
  const Cohort c = MakeCohort(7);
  std::vector<std::pair<std::vector<int>, std::vector<int>>> folds(3);
  for (int i = 0; i < c.n; ++i)
    for (int f = 0; f < 3; ++f) ((i / 3) % 3 == f ? folds[f].second : folds[f].first).push_back(i);  // every site in every fold
  const gram::Preprocessing pre;
  std::vector<gram::FoldKernels> fresh;
  for (const auto& [train, test] : folds) fresh.push_back(gram::PrepareFold(Store(c, Design(c, true)), train, test, pre));
  for (const std::uint64_t kept : {std::uint64_t{0}, std::uint64_t{36 * 36 * 3 * 8}, std::uint64_t{1} << 30}) {
    const gram::FoldFormedKernels store = Store(c, Design(c, true), kept);
    for (const int f : {0, 1, 0, 2, 1, 1, 0}) {
      const gram::FoldKernels got = gram::PrepareFold(store, folds[static_cast<std::size_t>(f)].first, folds[static_cast<std::size_t>(f)].second, pre);
      EXPECT_EQ(got.train, fresh[static_cast<std::size_t>(f)].train) << "kept " << kept << ", fold " << f;
      EXPECT_EQ(got.test, fresh[static_cast<std::size_t>(f)].test) << "kept " << kept << ", fold " << f;
    }
  }
}

TEST(FoldFormedKernels, ASiteWithOneTrainingSubjectIsAnInputErrorNamingItAndTheFold) {
  Cohort c = MakeCohort(5);
  for (auto& s : c.sites) s = s == 2 ? 1 : s;
  c.sites[3] = 2;  // site C: one subject
  std::vector<int> train, test;
  Split(c.n, train, test);
  try {
    gram::PrepareFold(Store(c, Design(c, true)), train, test, {});
    ADD_FAILURE() << "expected combat:SiteTooSmall";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "combat:SiteTooSmall");
    EXPECT_NE(std::string(e.what()).find("site \"C\" has 1 subject"), std::string::npos) << e.what();
    EXPECT_NE(e.where().find("study.json /harmonisation (source gm, a fold of"), std::string::npos) << e.where();
  }
}

TEST(FoldFormedKernels, ASiteAbsentFromTheReferenceGroupOfATrainingSetIsAnInputError) {
  const Cohort c = MakeCohort(6);
  std::vector<int> train, test;
  Split(c.n, train, test);
  std::vector<char> controls(static_cast<std::size_t>(c.n));
  for (int i = 0; i < c.n; ++i) controls[static_cast<std::size_t>(i)] = c.sites[static_cast<std::size_t>(i)] != 0 || i % 6 == 0;  // site A: test only
  try {
    gram::PrepareFold(Store(c, Design(c, true, controls)), train, test, {});
    ADD_FAILURE() << "expected combat:SiteNotInFit";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "combat:SiteNotInFit");
    EXPECT_NE(std::string(e.what()).find("site \"A\" has subjects here but none among the training subjects of the reference group"), std::string::npos)
        << e.what();
  }
}

}  // namespace
