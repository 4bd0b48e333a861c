// Stability of fold maps: the voxel-wise mean / SD and sign consistency against hand-computed values, the chance level
// against an enumeration of every sign pattern, and the region means over the atlas's voxels.
#include <cmath>
#include <cstdlib>
#include <vector>

#include <gtest/gtest.h>

#include "neuromkl/weights/stability.hpp"

namespace nw = neuromkl::weights;

namespace {

// Five voxels over four folds: consistent positive; alternating signs; never used; constant; mixed with a zero.
const std::vector<std::vector<float>> kFolds = {{1, 1, 0, 5, -2}, {2, -1, 0, 5, 0}, {3, 1, 0, 5, -1}, {2, -1, 0, 5, 3}};

TEST(MapStability, MeanOverSdAndSignConsistencyByHand) {
  const nw::MapStability s = nw::FoldMapStability(kFolds);
  ASSERT_EQ(s.meanOverSd.size(), 5U);
  ASSERT_EQ(s.signBalance.size(), 5U);
  EXPECT_EQ(s.folds, 4);
  EXPECT_EQ(s.signBalance, (std::vector<int>{4, 0, -1, 4, 1}));
  const std::vector<float> consistency = s.SignConsistency();
  // Voxel 0: mean 2, sample SD sqrt((1 + 0 + 1 + 0) / 3); float maps, so a float's relative precision.
  EXPECT_NEAR(s.meanOverSd[0], 2.0 / std::sqrt(2.0 / 3.0), 1e-6);
  EXPECT_FLOAT_EQ(consistency[0], 1.0f);
  // Voxel 1: mean 0 with spread; two folds each way.
  EXPECT_FLOAT_EQ(s.meanOverSd[1], 0.0f);
  EXPECT_FLOAT_EQ(consistency[1], 0.0f);
  // Voxel 2: every fold 0: neither is defined.
  EXPECT_TRUE(std::isnan(s.meanOverSd[2]));
  EXPECT_TRUE(std::isnan(consistency[2]));
  // Voxel 3: no spread, one sign.
  EXPECT_TRUE(std::isnan(s.meanOverSd[3]));
  EXPECT_FLOAT_EQ(consistency[3], 1.0f);
  // Voxel 4: -2, 0, -1, 3: mean 0; one positive and two negative folds of four.
  EXPECT_NEAR(s.meanOverSd[4], 0.0, 1e-7);
  EXPECT_FLOAT_EQ(consistency[4], 0.25f);
}

TEST(MapStability, OneFoldHasNoSpreadToMeasure) {
  EXPECT_TRUE(nw::FoldMapStability({kFolds[0]}).signBalance.empty());
  EXPECT_TRUE(nw::FoldMapStability({}).meanOverSd.empty());
}

TEST(MapStability, ChanceLevelEqualsTheEnumerationOfEverySignPattern) {
  EXPECT_DOUBLE_EQ(nw::ChanceSignConsistency(1), 1.0);
  EXPECT_DOUBLE_EQ(nw::ChanceSignConsistency(2), 0.5);
  EXPECT_DOUBLE_EQ(nw::ChanceSignConsistency(5), 0.375);  // (2 * 5 + 10 * 3 + 20 * 1) / 32 / 5
  for (int K = 1; K <= 16; ++K) {
    long long sum = 0;  // integers: the enumeration is exact, so the tolerance is the closed form's rounding alone
    for (unsigned pattern = 0; pattern < (1U << K); ++pattern) {
      const int positive = __builtin_popcount(pattern);
      sum += std::abs(positive - (K - positive));
    }
    EXPECT_NEAR(nw::ChanceSignConsistency(K), static_cast<double>(sum) / K / (1U << K), 1e-14) << K << " folds";
  }
  EXPECT_TRUE(std::isnan(nw::ChanceSignConsistency(0)));
}

TEST(MapStability, RegionMeansSkipUnusedVoxelsAndMissingRegions) {
  const nw::MapStability s = nw::FoldMapStability(kFolds);
  neuromkl::atlas::RegionIndex atlas;
  atlas.regions.push_back({7, "A", {0, 2}, 2, {}});
  atlas.regions.push_back({9, "B", {1, 3, 4}, 3, {}});
  std::vector<neuromkl::kernels::KernelInfo> kernels(3);
  kernels[0].label = 9;
  kernels[1].label = 7;
  kernels[2].label = 11;  // no region of that label (e.g. a tabular kernel)
  std::vector<double> perKernel;
  nw::RegionSignConsistency(s, atlas, kernels, 0, 3, perKernel);
  ASSERT_EQ(perKernel.size(), 3U);
  EXPECT_NEAR(perKernel[0], (0.0 + 1.0 + 0.25) / 3, 1e-12);
  EXPECT_DOUBLE_EQ(perKernel[1], 1.0);  // voxel 2 is never used: only voxel 0 counts
  EXPECT_TRUE(std::isnan(perKernel[2]));
  // Only the kernels of [first, first + count) are written (another source's kernels keep their values).
  std::vector<double> partial = {-1, -1, -1};
  nw::RegionSignConsistency(s, atlas, kernels, 1, 1, partial);
  EXPECT_EQ(partial[0], -1);
  EXPECT_DOUBLE_EQ(partial[1], 1.0);
  EXPECT_EQ(partial[2], -1);
}

}  // namespace
