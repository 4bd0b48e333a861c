#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/gram/memory.hpp"
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

TEST(Weights, SourceSharesSumTheirKernelsPerFold) {
  Eigen::VectorXd a(3), b(3);
  a << 0.2, 0.6, 0.2;  // fold 0: 20, 60, 20 %
  b << 0.0, 0.5, 0.5;  // fold 1: 0, 50, 50 %
  const auto rows = weights::RegionTable({a, b});
  // Source 0 holds kernels 0 and 1, source 1 kernel 2 (sources are consecutive blocks in kernel order).
  const auto shares = weights::SourceShares(rows, {2, 1});
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].foldPercent, (std::vector<double>{80, 50}));
  EXPECT_DOUBLE_EQ(shares[0].meanPercent, 65.0);  // mean of 20 and 0 plus mean of 60 and 50
  EXPECT_EQ(shares[1].foldPercent, (std::vector<double>{20, 50}));
  EXPECT_DOUBLE_EQ(shares[1].meanPercent, 35.0);
  // A source without kernels in the table has nothing.
  const auto empty = weights::SourceShares(rows, {3, 0});
  EXPECT_TRUE(empty[1].foldPercent.empty());
  EXPECT_EQ(empty[1].meanPercent, 0.0);
  EXPECT_DOUBLE_EQ(empty[0].meanPercent, 100.0);
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
    std::string id = "s";  // appended, not "s" + ...: GCC 12 raises a false -Wrestrict on the latter
    id += std::to_string(s);
    ids.push_back(id);
    paths.push_back(dir / (id + ".nii"));
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
    const Eigen::MatrixXd D = gram::MemoryKernels(set.kernels).SubjectWeights({fold.train, fold.test, fold.model.coef, fold.model.beta}, gram::Preprocessing{});
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

/// A 4-D probabilistic atlas with overlapping regions: region kernels are X diag(p_r) X' and the
/// voxel maps stay exact. With centring only, <m, x_t - mean> + b is the decision value, m the one
/// map (a voxel in two regions sums both contributions). With cosine normalisation, the per-region
/// maps m_r (which add up to m) give b + sum_r <m_r, x_t - mean> / ||sqrt(p_r) (x_t - mean)||.
TEST(Weights, ProbabilisticRegionsGiveWeightedKernelsAndExactVoxelMaps) {
  neuromkl::testing::TempDir dir;
  io::Geometry grid;
  grid.dims = {6, 5, 4};
  const auto V = static_cast<std::size_t>(grid.VoxelCount());
  atlas::Atlas atlas;
  atlas.geometry = grid;
  atlas.probabilistic = true;
  atlas.threshold = 0.1;
  atlas.regions = {{1, "A"}, {2, "B"}};
  atlas.regionVolume = {0, 1};
  atlas.probabilities.assign(2 * V, 0.0f);
  for (std::size_t v = 0; v < V; ++v) {
    const float u = static_cast<float>(v % 7) / 6.0f;  // 0 .. 1: voxels shared by A and B where both > 0.1
    atlas.probabilities[v] = u;
    atlas.probabilities[V + v] = v % 3 == 0 ? 0.0f : 1.0f - u;
  }
  const auto index = atlas::BuildRegionIndex(atlas, grid, nullptr);
  ASSERT_EQ(index.regions.size(), 2u);
  std::size_t shared = 0;
  for (std::size_t v = 0; v < V; ++v) shared += atlas.probabilities[v] > 0.1f && atlas.probabilities[V + v] > 0.1f;
  ASSERT_GT(shared, 10u);
  const int n = 20;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(3.0f, 1.0f);
  std::vector<std::string> ids, paths;
  std::vector<io::Volume> vols;
  Eigen::VectorXd y(n);
  for (int s = 0; s < n; ++s) {
    y[s] = s % 2 ? 1.0 : -1.0;
    io::Volume v;
    v.geometry = grid;
    v.data.resize(V);
    for (std::size_t i = 0; i < V; ++i) v.data[i] = normal(rng) + (i % 7 > 3 ? 0.7f * static_cast<float>(y[s]) : 0.0f);
    std::string id = "s";  // appended, not "s" + ...: GCC 12 raises a false -Wrestrict on the latter
    id += std::to_string(s);
    ids.push_back(id);
    id += ".nii";
    paths.push_back(dir / id);
    io::WriteVolume(paths.back(), v);
    vols.push_back(std::move(v));
  }
  const auto set = kernels::ComputeRegionKernels(ids, paths, index, {});
  // K_r = X diag(p_r) X', in double from the float32 data; the kernel stage's float products are
  // accurate to ~1e-6 relative (README), so 1e-5 relative.
  for (std::size_t r = 0; r < 2; ++r) {
    Eigen::MatrixXd K = Eigen::MatrixXd::Zero(n, n);
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        for (std::size_t v = 0; v < V; ++v) {
          const double p = atlas.probabilities[r * V + v];
          if (p > 0.1) K(a, b) += p * vols[static_cast<std::size_t>(a)].data[v] * vols[static_cast<std::size_t>(b)].data[v];
        }
    EXPECT_TRUE(neuromkl::testing::MatrixNear(set.kernels[r], K, 0, 1e-5)) << "region " << r;
  }
  const learners::Targets targets{learners::Task::Classification, y};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 4, 1}, targets.task, y, {}, {}, 1, "outer");
  const cv::InnerSplitter none = [](std::size_t, const std::vector<int>&, const Eigen::VectorXd&) { return std::vector<cv::Fold>{}; };
  for (bool normalise : {false, true}) {
    cv::NestedCvOptions options;
    options.preprocessing.normalise = normalise;
    const auto res = cv::RunNestedCv(set.kernels, targets, outer, none, {{"en", "enmkl_krr", {{{"lambda", 1.0}, {"mu", 0.5}}}}}, options);
    const auto& fold = res[0].folds[0];
    const gram::FoldModel model{fold.train, fold.test, fold.model.coef, fold.model.beta};
    const Eigen::MatrixXd D = gram::MemoryKernels(set.kernels).SubjectWeights(model, gram::Preprocessing{true, normalise, nullptr, {}});
    Eigen::MatrixXd DA = D, DB = D;
    DA.col(1).setZero();
    DB.col(0).setZero();
    const auto maps = weights::VoxelMaps(paths, index, set.info, {D, DA, DB}, kernels::NanPolicy::DropVoxel);
    std::vector<double> mean(V, 0.0);
    for (int i : fold.train)
      for (std::size_t v = 0; v < V; ++v) mean[v] += vols[static_cast<std::size_t>(i)].data[v] / static_cast<double>(fold.train.size());
    const double scale = fold.decision.cwiseAbs().maxCoeff();
    for (std::size_t t = 0; t < fold.test.size(); ++t) {
      const auto& xt = vols[static_cast<std::size_t>(fold.test[t])].data;
      double whole = fold.model.bias, perRegion = fold.model.bias;
      for (std::size_t r = 0; r < 2; ++r) {
        double dot = 0, norm2 = 0;
        for (std::size_t v = 0; v < V; ++v) {
          const double p = atlas.probabilities[r * V + v];
          if (!(p > 0.1)) continue;
          const double c = xt[v] - mean[v];
          dot += maps[1 + r][v] * c;
          norm2 += p * c * c;
        }
        perRegion += normalise ? dot / std::sqrt(norm2) : dot;
      }
      for (std::size_t v = 0; v < V; ++v) whole += maps[0][v] * (xt[v] - mean[v]);
      // Maps are float32: ~1e-7 relative per voxel, summed over ~100 voxels.
      EXPECT_NEAR(perRegion, fold.decision[static_cast<Eigen::Index>(t)], 1e-5 * scale) << "normalise " << normalise;
      if (!normalise) {
        EXPECT_NEAR(whole, fold.decision[static_cast<Eigen::Index>(t)], 1e-5 * scale);
      }
    }
    for (std::size_t v = 0; v < V; ++v) EXPECT_NEAR(maps[0][v], maps[1][v] + maps[2][v], 1e-5 * (std::abs(maps[0][v]) + 1e-6));
  }
}

}  // namespace
