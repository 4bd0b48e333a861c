// Confound removal inside the folds (kernels/covariates.hpp): kernel-space residualisation against an
// independent voxel-wise computation, no leakage from held-out subjects, fit_on, and exact voxel maps.
#include <cmath>
#include <random>

#include <Eigen/QR>
#include <gtest/gtest.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/weights/weights.hpp"
#include "testing.hpp"

using namespace neuromkl;

namespace {

/// Design: intercept, age, a binary sex dummy, two site dummies (three sites).
Eigen::MatrixXd Design(int n, std::mt19937& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  Eigen::MatrixXd C = Eigen::MatrixXd::Zero(n, 5);
  for (int i = 0; i < n; ++i) {
    C(i, 0) = 1;
    C(i, 1) = 60 + 8 * normal(rng);
    C(i, 2) = i % 2;
    if (i % 3 == 1) C(i, 3) = 1;
    if (i % 3 == 2) C(i, 4) = 1;
  }
  return C;
}

/// Independent computation: images residualised voxel-wise with coefficients from a Householder QR
/// least-squares fit on the fit rows Q (a different algorithm from the pseudo-inverse in the code).
Eigen::MatrixXd ResidualiseImages(const Eigen::MatrixXd& X, const Eigen::MatrixXd& C, const std::vector<int>& fitRows) {
  Eigen::MatrixXd CQ(static_cast<Eigen::Index>(fitRows.size()), C.cols()), XQ(static_cast<Eigen::Index>(fitRows.size()), X.cols());
  for (std::size_t k = 0; k < fitRows.size(); ++k) {
    CQ.row(static_cast<Eigen::Index>(k)) = C.row(fitRows[k]);
    XQ.row(static_cast<Eigen::Index>(k)) = X.row(fitRows[k]);
  }
  const Eigen::MatrixXd G = CQ.householderQr().solve(XQ);
  return X - C * G;
}

Eigen::VectorXi Idx(const std::vector<int>& v) { return Eigen::Map<const Eigen::VectorXi>(v.data(), static_cast<Eigen::Index>(v.size())); }

struct Case {
  Eigen::MatrixXd X, C;
  std::vector<int> train, test;
};
Case MakeCase(int n, int V, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  Case c;
  c.C = Design(n, rng);
  c.X.resize(n, V);
  for (int i = 0; i < n; ++i)
    for (int v = 0; v < V; ++v) c.X(i, v) = 3 + normal(rng) + 0.05 * (v % 5) * c.C(i, 1) + (v % 2 ? 0.7 * c.C(i, 3) : 0.0);
  for (int i = 0; i < n; ++i) (i % 4 == 3 ? c.test : c.train).push_back(i);
  return c;
}

// K~ from the kernel alone equals the Gram matrix of voxel-wise residualised images: training block,
// test rows and test diagonal, for fit_on all training subjects and for a subset (the "controls").
// Relative 1e-8: both are double computations of O(n V) sums on O(1)-conditioned data (~1e-13).
TEST(Covariates, KernelSpaceEqualsVoxelwiseResidualisation) {
  const Case c = MakeCase(40, 60, 11);
  const Eigen::MatrixXd K = c.X * c.X.transpose();
  for (bool controlsOnly : {false, true}) {
    gram::Covariates cov{c.C, {}, {}};
    std::vector<int> fitRows;
    if (controlsOnly) {
      cov.fitRow.assign(40, 0);
      for (int i = 0; i < 40; ++i) cov.fitRow[static_cast<std::size_t>(i)] = i % 5 != 0;  // every 5th subject is a "patient"
    }
    for (int i : c.train)
      if (cov.fitRow.empty() || cov.fitRow[static_cast<std::size_t>(i)]) fitRows.push_back(i);
    const Eigen::MatrixXd Xr = ResidualiseImages(c.X, c.C, fitRows);
    const Eigen::MatrixXd Kr = Xr * Xr.transpose();
    gram::FoldKernel fk = gram::SliceFold(K, Idx(c.train), Idx(c.test));
    gram::ResidualiseFold(fk, gram::MakeFoldResidualiser(cov, Idx(c.train), Idx(c.test)));
    const gram::FoldKernel expected = gram::SliceFold(Kr, Idx(c.train), Idx(c.test));
    const double scale = Kr.cwiseAbs().maxCoeff();
    EXPECT_TRUE(neuromkl::testing::MatrixNear(fk.train, expected.train, 1e-8 * scale)) << controlsOnly;
    EXPECT_TRUE(neuromkl::testing::MatrixNear(fk.testTrain, expected.testTrain, 1e-8 * scale)) << controlsOnly;
    EXPECT_TRUE(neuromkl::testing::MatrixNear(fk.testDiag, expected.testDiag, 1e-8 * scale)) << controlsOnly;
    // The residualisation is not a no-op (the test could fail): the raw kernel differs by far more.
    EXPECT_GT((gram::SliceFold(K, Idx(c.train), Idx(c.test)).train - expected.train).cwiseAbs().maxCoeff(), 1e-3 * scale);
    // Fitted on all training rows with an intercept, residualised training images have zero mean.
    if (!controlsOnly) {
      EXPECT_LT(std::abs(fk.train.sum()), 1e-8 * scale * 40 * 40);
    }
    // The whole per-fold pipeline (residualise, centre, normalise) equals cosine similarities of the
    // residualised images centred with their training mean.
    gram::Preprocessing pre;
    pre.covariates = std::make_shared<const gram::Covariates>(cov);
    const gram::FoldKernel full = gram::PrepareFoldKernel(K, Idx(c.train), Idx(c.test), pre);
    Eigen::RowVectorXd mu = Eigen::RowVectorXd::Zero(Xr.cols());
    for (int i : c.train) mu += Xr.row(i) / static_cast<double>(c.train.size());
    Eigen::MatrixXd Z = Xr.rowwise() - mu;
    for (Eigen::Index i = 0; i < Z.rows(); ++i) Z.row(i) /= Z.row(i).norm();
    const gram::FoldKernel cosine = gram::SliceFold(Z * Z.transpose(), Idx(c.train), Idx(c.test));
    EXPECT_TRUE(neuromkl::testing::MatrixNear(full.train, cosine.train, 1e-8)) << controlsOnly;
    EXPECT_TRUE(neuromkl::testing::MatrixNear(full.testTrain, cosine.testTrain, 1e-8)) << controlsOnly;
  }
}

// fit_on: the coefficients come from the fit rows only, so changing a training subject outside them
// changes nothing but that subject's own residualised row.
TEST(Covariates, FitOnUsesOnlyTheFitRows) {
  Case c = MakeCase(30, 40, 12);
  gram::Covariates cov{c.C, std::vector<char>(30, 1), {}};
  const int patient = c.train[3];
  cov.fitRow[static_cast<std::size_t>(patient)] = 0;
  auto residualised = [&](const Eigen::MatrixXd& X) {
    gram::FoldKernel fk = gram::SliceFold(X * X.transpose(), Idx(c.train), Idx(c.test));
    gram::ResidualiseFold(fk, gram::MakeFoldResidualiser(cov, Idx(c.train), Idx(c.test)));
    return fk;
  };
  const auto before = residualised(c.X);
  Eigen::MatrixXd X2 = c.X;
  X2.row(patient).array() += 5.0;
  const auto after = residualised(X2);
  Eigen::MatrixXd diff = (after.train - before.train).cwiseAbs();
  const Eigen::Index p = std::find(c.train.begin(), c.train.end(), patient) - c.train.begin();
  EXPECT_GT(diff(p, p), 1.0);  // the patient's own row changes
  diff.row(p).setZero();
  diff.col(p).setZero();
  EXPECT_LT(diff.maxCoeff(), 1e-9 * before.train.cwiseAbs().maxCoeff());  // no one else's (rounding only)
  // The same change with fit_on all moves every row (the coefficients change).
  cov.fitRow.clear();
  const auto allBefore = residualised(c.X), allAfter = residualised(X2);
  Eigen::MatrixXd diffAll = (allAfter.train - allBefore.train).cwiseAbs();
  diffAll.row(p).setZero();
  diffAll.col(p).setZero();
  EXPECT_GT(diffAll.maxCoeff(), 1e-3);
  // No fit row in a training set: a clear error.
  cov.fitRow.assign(30, 0);
  EXPECT_THROW(gram::MakeFoldResidualiser(cov, Idx(c.train), Idx(c.test)), InputError);
}

// No leakage: a held-out subject's covariates and image do not touch its fold's model (inner CV
// included); a training subject's covariates do.
TEST(Covariates, HeldOutSubjectChangesNothingOfItsFoldsModel) {
  const int n = 36;
  Case c = MakeCase(n, 45, 13);
  Eigen::VectorXd y(n);
  for (int i = 0; i < n; ++i) y[i] = i % 2 ? 1.0 : -1.0;
  for (int i = 0; i < n; ++i) c.X.row(i).head(15).array() += 0.5 * y[i];
  const learners::Targets targets{learners::Task::Classification, y};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, targets.task, y, {}, {}, 4, "outer");
  const auto innerSpec = cv::SplitSpec{cv::Scheme::StratifiedKFold, 3, 1};
  const cv::InnerSplitter inner = [&](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& yt) {
    return cv::MakeFolds(innerSpec, targets.task, yt, {}, {}, 100 + f, "inner");
  };
  auto run = [&](const Eigen::MatrixXd& X, const Eigen::MatrixXd& C) {
    learners::KernelList ks;
    for (int r = 0; r < 3; ++r) ks.push_back(X.middleCols(15 * r, 15) * X.middleCols(15 * r, 15).transpose());
    cv::NestedCvOptions options;
    options.preprocessing.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{C, {}, {}});
    return cv::RunNestedCv(ks, targets, outer, inner, {{"en", "enmkl_svm", cv::ExpandGrid({{"mu", 0.5}}, {{"c", {0.1, 1.0, 10.0}}})}}, options)[0];
  };
  const auto base = run(c.X, c.C);
  const int held = outer[0].test[0];
  Eigen::MatrixXd X2 = c.X, C2 = c.C;
  X2.row(held).array() *= -3.0;
  C2(held, 1) += 40;
  C2(held, 2) = 1 - C2(held, 2);
  const auto changed = run(X2, C2);
  EXPECT_EQ(changed.folds[0].chosen, base.folds[0].chosen);
  EXPECT_EQ(changed.folds[0].innerScores, base.folds[0].innerScores);
  EXPECT_EQ(changed.folds[0].model.coef, base.folds[0].model.coef);
  EXPECT_EQ(changed.folds[0].model.beta, base.folds[0].model.beta);
  EXPECT_EQ(changed.folds[0].model.bias, base.folds[0].model.bias);
  EXPECT_NE(changed.folds[0].decision[0], base.folds[0].decision[0]);  // its own prediction does change
  // A training subject's covariate enters the fit.
  Eigen::MatrixXd C3 = c.C;
  C3(outer[0].train[0], 1) += 40;
  const auto trainChanged = run(c.X, C3);
  EXPECT_GT((trainChanged.folds[0].model.coef - base.folds[0].model.coef).cwiseAbs().maxCoeff(), 1e-9);
}

// The voxel map of a fold is built from residualised training images: for a held-out subject whose
// image is residualised with that fold's coefficients (fitted here independently, by QR on the
// training images), sum_r <w_r, x~_r> + b equals the learner's decision value (fit_on all and controls).
TEST(Covariates, VoxelMapReproducesDecisionValuesOfResidualisedImages) {
  neuromkl::testing::TempDir dir;
  io::Geometry grid;
  grid.dims = {6, 7, 5};
  grid.spacing = {2, 2, 2};
  atlas::Atlas atlas;
  atlas.geometry = grid;
  atlas.labels.resize(static_cast<std::size_t>(grid.VoxelCount()));
  for (std::size_t v = 0; v < atlas.labels.size(); ++v) atlas.labels[v] = static_cast<std::int32_t>(v % 3);
  atlas.regions = {{1, "A"}, {2, "B"}};
  const int n = 24;
  const auto V = atlas.labels.size();
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(5.0f, 1.0f);
  const Eigen::MatrixXd C = Design(n, rng);
  std::vector<std::string> ids, paths;
  Eigen::MatrixXd X(n, static_cast<Eigen::Index>(V));
  Eigen::VectorXd y(n);
  for (int s = 0; s < n; ++s) {
    y[s] = s % 2 ? 1.0 : -1.0;
    io::Volume v;
    v.geometry = grid;
    v.data.resize(V);
    for (std::size_t i = 0; i < V; ++i)
      v.data[i] = normal(rng) + (atlas.labels[i] == 2 ? 0.8f * static_cast<float>(y[s]) : 0.0f) + 0.03f * static_cast<float>(C(s, 1));
    for (std::size_t i = 0; i < V; ++i) X(s, static_cast<Eigen::Index>(i)) = v.data[i];
    std::string id = "s";
    id += std::to_string(s);
    ids.push_back(id);
    paths.push_back(dir / (id + ".nii"));
    io::WriteVolume(paths.back(), v);
  }
  const auto index = atlas::BuildRegionIndex(atlas, grid, nullptr);
  const auto set = kernels::ComputeRegionKernels(ids, paths, index, {});
  const learners::Targets targets{learners::Task::Classification, y};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, targets.task, y, {}, {}, 1, "outer");
  const cv::InnerSplitter none = [](std::size_t, const std::vector<int>&, const Eigen::VectorXd&) { return std::vector<cv::Fold>{}; };
  for (bool controlsOnly : {false, true}) {
    gram::Covariates cov{C, {}, {}};
    if (controlsOnly)
      for (int i = 0; i < n; ++i) cov.fitRow.push_back(i % 4 != 0 ? 1 : 0);  // a subset in which every covariate varies
    cv::NestedCvOptions options;
    options.preprocessing.covariates = std::make_shared<const gram::Covariates>(cov);
    const auto res = cv::RunNestedCv(set.kernels, targets, outer, none, {{"en", "enmkl_svm", {{{"c", 1.0}, {"mu", 0.5}}}}}, options);
    const auto& fold = res[0].folds[0];
    const Eigen::MatrixXd D = gram::MemoryKernels(set.kernels).SubjectWeights({fold.train, fold.test, fold.model.coef, fold.model.beta}, options.preprocessing);
    const auto w = weights::VoxelMaps(paths, index, set.info, {D}, kernels::NanPolicy::DropVoxel)[0];
    std::vector<int> fitRows;
    for (int i : fold.train)
      if (cov.fitRow.empty() || cov.fitRow[static_cast<std::size_t>(i)]) fitRows.push_back(i);
    const Eigen::MatrixXd Xr = ResidualiseImages(X, C, fitRows);
    Eigen::RowVectorXd mu = Eigen::RowVectorXd::Zero(Xr.cols());
    for (int i : fold.train) mu += Xr.row(i) / static_cast<double>(fold.train.size());
    const double scale = fold.decision.cwiseAbs().maxCoeff();
    for (std::size_t t = 0; t < fold.test.size(); ++t) {
      const Eigen::RowVectorXd xt = Xr.row(fold.test[t]) - mu;
      double f = fold.model.bias;
      for (const auto& region : index.regions) {
        double dot = 0, norm2 = 0;
        for (auto v : region.voxels) {
          dot += w[static_cast<std::size_t>(v)] * xt[v];
          norm2 += xt[v] * xt[v];
        }
        f += dot / std::sqrt(norm2);
      }
      // Maps are float32 (~1e-7 relative per voxel, ~70 voxels per region); kernels from float images: 1e-5.
      EXPECT_NEAR(f, fold.decision[static_cast<Eigen::Index>(t)], 1e-5 * scale) << "controls only " << controlsOnly;
    }
  }
}

TEST(Covariates, TargetR2) {
  Eigen::MatrixXd C(6, 2);
  C << 1, 0, 1, 1, 1, 2, 1, 3, 1, 4, 1, 5;
  Eigen::VectorXd y(6);
  y << 1, 3, 5, 7, 9, 11;  // exactly linear in the covariate
  EXPECT_NEAR(gram::CovariateR2(C, y), 1.0, 1e-12);
  y << 1, -1, 1, -1, 1, -1;
  // One covariate: R^2 equals the squared Pearson correlation, computed here from its definition.
  const double r2 = gram::CovariateR2(C, y);
  const Eigen::VectorXd x = C.col(1);
  const double sxy = ((x.array() - x.mean()) * (y.array() - y.mean())).sum(), sxx = (x.array() - x.mean()).square().sum();
  const double syy = (y.array() - y.mean()).square().sum();
  EXPECT_NEAR(r2, sxy * sxy / (sxx * syy), 1e-12);  // simple regression: R^2 = r^2
}

}  // namespace
