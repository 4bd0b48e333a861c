#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/weights/weights.hpp"
#include "testing.hpp"

using namespace neuromkl;

namespace {

TEST(Weights, RanksByHandWithTies) {
  Eigen::VectorXd v(5);
  v << 0.5, 2.0, 0.5, 3.0, 0.0;
  Eigen::VectorXd expected(5);
  expected << 3.5, 2, 3.5, 1, 5;  // the two 0.5 share ranks 3 and 4
  EXPECT_EQ(weights::Ranks(v), expected);
}

TEST(Weights, RegionTableSortsAndSummarisesFolds) {
  Eigen::VectorXd a(3), b(3);
  a << 0.2, 0.6, 0.2;  // fold 0
  b << 0.0, 0.5, 0.5;  // fold 1
  const auto rows = weights::RegionTable({a, b});
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].kernel, 1u);
  EXPECT_DOUBLE_EQ(rows[0].meanPercent, 55.0);
  EXPECT_NEAR(rows[0].sdPercent, std::sqrt(50.0), 1e-12);  // (60, 50): SD = sqrt(((5)^2 + (5)^2) / 1)
  EXPECT_EQ(rows[0].foldsSelected, 2);
  EXPECT_DOUBLE_EQ(rows[0].expectedRank, 1.25);  // rank 1, then tied 1.5
  EXPECT_EQ(rows[1].kernel, 2u);
  EXPECT_EQ(rows[2].kernel, 0u);
  EXPECT_EQ(rows[2].foldsSelected, 1);
  EXPECT_DOUBLE_EQ(rows[2].expectedRank, 2.75);  // tied 2.5, then 3
}

/// The voxel map of a linear model reproduces its decision values: for a held-out subject,
/// sum over regions of <w_r, x~_r> + b equals the learner's decision, with x~ computed here from
/// the raw images (training-mean centred, divided by the subject's norm over the region).
TEST(Weights, VoxelMapReproducesDecisionValues) {
  neuromkl::testing::TempDir dir;
  io::Geometry grid;
  grid.dims = {7, 8, 9};
  grid.spacing = {2, 2, 2};
  atlas::Atlas atlas;
  atlas.geometry = grid;
  atlas.labels.resize(static_cast<std::size_t>(grid.VoxelCount()));
  for (std::size_t v = 0; v < atlas.labels.size(); ++v) atlas.labels[v] = static_cast<std::int32_t>(v % 4);
  atlas.regions = {{1, "A"}, {2, "B"}, {3, "C"}};
  const int n = 24;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(5.0f, 1.0f);
  std::vector<std::string> ids, paths;
  std::vector<io::Volume> vols;
  Eigen::VectorXd y(n);
  for (int s = 0; s < n; ++s) {
    y[s] = s % 2 ? 1.0 : -1.0;
    io::Volume v;
    v.geometry = grid;
    v.data.resize(atlas.labels.size());
    for (std::size_t i = 0; i < v.data.size(); ++i) v.data[i] = normal(rng) + (atlas.labels[i] == 2 ? 0.8f * static_cast<float>(y[s]) : 0.0f);
    v.data[static_cast<std::size_t>(13 + 4 * s)] = std::nanf("");  // dropped voxels (drop_voxel rule)
    ids.push_back("s" + std::to_string(s));
    paths.push_back(dir / (ids.back() + ".nii"));
    io::WriteVolume(paths.back(), v);
    vols.push_back(std::move(v));
  }
  const auto index = atlas::BuildRegionIndex(atlas, grid, nullptr);
  const auto set = kernels::ComputeRegionKernels(ids, paths, index, {});
  const learners::Targets targets{learners::Task::Classification, y};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, targets.task, y, {}, {}, 1, "outer");
  const cv::InnerSplitter none = [](std::size_t, const std::vector<int>&, const Eigen::VectorXd&) { return std::vector<cv::Fold>{}; };
  const auto res = cv::RunNestedCv(set.kernels, targets, outer, none,
                                   {{"en", "enmkl_svm", {{{"c", 1.0}, {"mu", 0.5}}}}, {"svm", "svm", {{{"c", 0.5}}}}}, {});
  std::vector<char> dropped(atlas.labels.size(), 0);
  for (const auto& v : vols)
    for (std::size_t i = 0; i < v.data.size(); ++i) dropped[i] |= !std::isfinite(v.data[i]);
  for (const auto& outcome : res) {
    const auto& fold = outcome.folds[0];
    const Eigen::MatrixXd D = weights::SubjectWeights(set.kernels, {fold.train, fold.test, fold.model.coef, fold.model.beta}, true, true);
    const auto maps = weights::VoxelMaps(paths, index, set.info, {D}, kernels::NanPolicy::DropVoxel);
    const auto& w = maps[0];
    double scale = fold.decision.cwiseAbs().maxCoeff();
    for (std::size_t t = 0; t < fold.test.size(); ++t) {
      const auto& xt = vols[static_cast<std::size_t>(fold.test[t])].data;
      double f = fold.model.bias;
      for (const auto& region : index.regions) {
        std::vector<std::size_t> vox;
        for (auto v : region.voxels)
          if (!dropped[static_cast<std::size_t>(v)]) vox.push_back(static_cast<std::size_t>(v));
        double norm2 = 0;
        std::vector<double> centred;
        for (auto v : vox) {
          double mu = 0;
          for (int i : fold.train) mu += vols[static_cast<std::size_t>(i)].data[v];
          mu /= static_cast<double>(fold.train.size());
          centred.push_back(xt[v] - mu);
          norm2 += centred.back() * centred.back();
        }
        for (std::size_t k = 0; k < vox.size(); ++k) f += w[vox[k]] * centred[k] / std::sqrt(norm2);
      }
      // Maps are float32 (as written to NIfTI): ~1e-7 relative per voxel, summed over ~500 voxels.
      EXPECT_NEAR(f, fold.decision[static_cast<Eigen::Index>(t)], 1e-5 * scale) << outcome.label << " subject " << fold.test[t];
    }
    for (std::size_t v = 0; v < w.size(); ++v)
      if (dropped[v] || atlas.labels[v] == 0) {
        EXPECT_EQ(w[v], 0.0f);  // outside regions and dropped voxels: 0
      }
  }
}

}  // namespace

namespace {

// ||w_r|| from the kernel equals the norm of the region's primal weights w_r = beta_r X_r' coef for
// linear kernels of explicit features (exact up to rounding: 1e-12 relative).
TEST(Weights, ModelNormsAreTheNormsOfTheRegionWeightVectors) {
  Eigen::MatrixXd x1(4, 3), x2(4, 2);
  x1 << 1, 0, 2, -1, 3, 0.5, 0, 1, 1, 2, -2, 0;
  x2 << 0.3, 1, -1, 0, 2, 2, 0, -0.5;
  Eigen::VectorXd coef(4), beta(2);
  coef << 0.5, -1, 0.25, 0.25;
  beta << 0.25, 0.75;
  const Eigen::VectorXd norms = weights::ModelNorms({x1 * x1.transpose(), x2 * x2.transpose()}, coef, beta);
  EXPECT_NEAR(norms[0], 0.25 * (x1.transpose() * coef).norm(), 1e-12);
  EXPECT_NEAR(norms[1], 0.75 * (x2.transpose() * coef).norm(), 1e-12);
  // A region the model does not use (coef orthogonal to its features) has norm 0, never NaN.
  Eigen::MatrixXd x3 = Eigen::MatrixXd::Zero(4, 1);
  EXPECT_EQ(weights::ModelNorms({x3 * x3.transpose()}, coef, Eigen::VectorXd::Ones(1))[0], 0.0);
}

}  // namespace
