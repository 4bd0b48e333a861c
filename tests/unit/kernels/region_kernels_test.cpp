#include <cmath>
#include <random>

#include <gmock/gmock.h>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "testing.hpp"

using namespace neuromkl;
using ::testing::HasSubstr;

namespace {

/// A small cohort on a non-cubic 7x8x9 grid with a 3-region atlas, some NaNs, and a region (4)
/// whose voxels are NaN in one subject everywhere.
struct SmallCohort {
  neuromkl::testing::TempDir dir;
  io::Geometry grid;
  atlas::Atlas atlas;
  std::vector<std::string> ids, paths;
  std::vector<io::Volume> volumes;

  explicit SmallCohort(int n, bool withNans = true) {
    grid.dims = {7, 8, 9};
    grid.spacing = {2, 2, 2};
    grid.origin = {-7, -8, -9};
    atlas.geometry = grid;
    atlas.labels.resize(static_cast<std::size_t>(grid.VoxelCount()));
    for (std::size_t v = 0; v < atlas.labels.size(); ++v) atlas.labels[v] = static_cast<std::int32_t>(v % 5);  // 0..4
    atlas.regions = {{1, "A"}, {2, "B"}, {3, "C"}, {4, "D"}};
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(3.0f, 1.0f);
    for (int s = 0; s < n; ++s) {
      io::Volume v;
      v.geometry = grid;
      v.data.resize(atlas.labels.size());
      for (auto& x : v.data) x = normal(rng);
      if (withNans) {
        v.data[static_cast<std::size_t>(11 + 5 * s)] = std::nanf("");                          // scattered NaNs
        if (s == 1) v.data[static_cast<std::size_t>(5 * 7 + 3)] = std::numeric_limits<float>::infinity();  // label 3
      }
      ids.push_back("sub-" + std::to_string(s));
      paths.push_back(dir / (ids.back() + ".nii.gz"));
      io::WriteVolume(paths.back(), v);
      volumes.push_back(std::move(v));
    }
  }
  atlas::RegionIndex Index() const { return atlas::BuildRegionIndex(atlas, grid, nullptr); }

  /// Independent reference: double loops over voxels, the drop-voxel or zero rule applied here.
  Eigen::MatrixXd Expected(std::int32_t label, bool drop) const {
    const auto n = static_cast<Eigen::Index>(volumes.size());
    std::vector<std::size_t> voxels;
    for (std::size_t v = 0; v < atlas.labels.size(); ++v) {
      if (atlas.labels[v] != label) continue;
      bool finiteEverywhere = true;
      for (const auto& vol : volumes) finiteEverywhere &= std::isfinite(vol.data[v]);
      if (finiteEverywhere || !drop) voxels.push_back(v);
    }
    Eigen::MatrixXd K = Eigen::MatrixXd::Zero(n, n);
    for (Eigen::Index i = 0; i < n; ++i)
      for (Eigen::Index j = 0; j < n; ++j)
        for (auto v : voxels) {
          const double a = volumes[static_cast<std::size_t>(i)].data[v], b = volumes[static_cast<std::size_t>(j)].data[v];
          K(i, j) += (std::isfinite(a) ? a : 0.0) * (std::isfinite(b) ? b : 0.0);
        }
    return K;
  }
};

/// Centred copy H K H (the part every fold keeps after centring).
Eigen::MatrixXd Centred(const Eigen::MatrixXd& K) {
  const Eigen::Index n = K.rows();
  const Eigen::MatrixXd H = Eigen::MatrixXd::Identity(n, n) - Eigen::MatrixXd::Constant(n, n, 1.0 / static_cast<double>(n));
  return H * K * H;
}

/// Precision of the kernel products (see AccumulateRegion): float32 products of differences from a
/// reference subject over chunks of <= 2048 voxels, summed in double, corrections in double. The
/// float rounding is relative to the spread of the data around the reference: raw kernels agree with
/// exact double sums to ~1e-7 relative, centred kernels to ~1e-6 of their own scale. Tolerances:
/// 1e-6 (raw, relative) and 1e-5 x max |centred entry|.
::testing::AssertionResult KernelNear(const Eigen::MatrixXd& computed, const Eigen::MatrixXd& exact) {
  auto raw = neuromkl::testing::MatrixNear(computed, exact, 0, 1e-6);
  if (!raw) return raw;
  const Eigen::MatrixXd ce = Centred(exact);
  return neuromkl::testing::MatrixNear(Centred(computed), ce, 1e-5 * ce.cwiseAbs().maxCoeff());
}

TEST(RegionKernels, EqualIndependentGramMatricesWithTheDropRule) {
  SmallCohort c(6);
  kernels::RegionKernelReport report;
  const auto set = kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), {}, &report);
  ASSERT_EQ(set.Size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(KernelNear(set.kernels[r], c.Expected(static_cast<std::int32_t>(r + 1), true))) << set.info[r].name;
  }
  EXPECT_EQ(report.subjectBlocks, 1u);
  // Every non-finite voxel position is reported in its region.
  std::int64_t dropped = 0;
  for (const auto& k : set.info) dropped += k.nonFiniteVoxels;
  EXPECT_EQ(dropped, 7);  // 6 scattered NaNs (one per subject, distinct voxels) + 1 infinity
  EXPECT_EQ(report.droppedVoxels, 7);
}

TEST(RegionKernels, ZeroRuleMatchesPronto) {
  SmallCohort c(5);
  kernels::RegionKernelOptions o;
  o.nanPolicy = kernels::NanPolicy::Zero;
  const auto set = kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), o);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_TRUE(KernelNear(set.kernels[r], c.Expected(static_cast<std::int32_t>(r + 1), false)));
  std::int64_t zeroed = 0;
  for (const auto& k : set.info) zeroed += k.zeroedValues;
  EXPECT_EQ(zeroed, 6);  // 5 NaNs + 1 infinity
}

TEST(RegionKernels, DataWithALargeMeanKeepTheirCentredSignal) {
  // PET-like: mean 1000, spread 1. The centred kernel is ~1e-6 of the raw one: plain float32
  // products would lose it entirely; products of differences keep it.
  SmallCohort c(8, false);
  for (std::size_t s = 0; s < c.volumes.size(); ++s) {
    for (auto& x : c.volumes[s].data) x += 1000.0f;
    neuromkl::io::WriteVolume(c.paths[s], c.volumes[s]);
  }
  const auto set = kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), {});
  for (std::size_t r = 0; r < set.Size(); ++r) EXPECT_TRUE(KernelNear(set.kernels[r], c.Expected(static_cast<std::int32_t>(r + 1), true)));
}

TEST(RegionKernels, OutOfCoreBlocksGiveTheSameKernels) {
  SmallCohort c(9);
  const auto index = c.Index();
  const auto inMemory = kernels::ComputeRegionKernels(c.ids, c.paths, index, {});
  kernels::RegionKernelOptions small;
  // Room for 2 subjects' rows at a time (2 blocks of 1 subject): forces 9 blocks and 45 block pairs.
  small.memoryBudgetBytes = static_cast<std::uint64_t>(index.TotalVoxels()) * 4 * 2;
  kernels::RegionKernelReport report;
  const auto blocked = kernels::ComputeRegionKernels(c.ids, c.paths, index, small, &report);
  EXPECT_EQ(report.subjectBlocks, 9u);
  EXPECT_LE(report.peakDataBytes, small.memoryBudgetBytes);
  // Float products summed over other block shapes (sgemm vs ssyrk) round differently: ~1e-7.
  for (std::size_t r = 0; r < inMemory.Size(); ++r) EXPECT_TRUE(neuromkl::testing::MatrixNear(blocked.kernels[r], inMemory.kernels[r], 0, 1e-6));
}

TEST(RegionKernels, ResultsDoNotDependOnTheThreadCount) {
  SmallCohort c(6);
  kernels::RegionKernelOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const auto a = kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), one);
  const auto b = kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), two);
  for (std::size_t r = 0; r < a.Size(); ++r) EXPECT_EQ(a.kernels[r], b.kernels[r]);  // bitwise
}

TEST(RegionKernels, EachImageIsDecodedOnce) {
  SmallCohort c(5);
  const std::size_t before = io::VolumeReadCount();
  kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), {});
  EXPECT_EQ(io::VolumeReadCount() - before, 5u);
}

TEST(RegionKernels, RegionsWithNothingLeftAreExcludedAndNamed) {
  SmallCohort c(4, false);
  // Region D (label 4): every voxel NaN in subject 2 -> dropped entirely under drop_voxel.
  for (std::size_t v = 0; v < c.atlas.labels.size(); ++v)
    if (c.atlas.labels[v] == 4) c.volumes[2].data[v] = std::nanf("");
  io::WriteVolume(c.paths[2], c.volumes[2]);
  // Region C (label 3): all zeros in every subject -> zero kernel.
  for (std::size_t s = 0; s < 4; ++s) {
    for (std::size_t v = 0; v < c.atlas.labels.size(); ++v)
      if (c.atlas.labels[v] == 3) c.volumes[s].data[v] = 0.0f;
    io::WriteVolume(c.paths[s], c.volumes[s]);
  }
  kernels::RegionKernelReport report;
  const auto set = kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), {}, &report);
  ASSERT_EQ(set.Size(), 2u);
  ASSERT_EQ(set.excluded.size(), 2u);
  std::vector<std::string> names = {set.excluded[0].info.name, set.excluded[1].info.name};
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("C", "D"));
  for (const auto& K : set.kernels) EXPECT_TRUE(K.allFinite());
  EXPECT_EQ(report.warnings.size(), 2u);
}

TEST(RegionKernels, SubjectOnAnotherGridIsNamed) {
  SmallCohort c(3, false);
  io::Volume other = c.volumes[1];
  other.geometry.spacing = {3, 3, 3};
  io::WriteVolume(c.paths[1], other);
  EXPECT_THAT([&] { kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), {}); },
              ::testing::ThrowsMessage<GeometryMismatch>(::testing::AllOf(HasSubstr("sub-1"), HasSubstr("spacing [3, 3, 3] vs [2, 2, 2]"))));
}

TEST(RegionKernels, AllNanImageIsAnError) {
  SmallCohort c(3, false);
  io::Volume bad = c.volumes[2];
  for (auto& x : bad.data) x = std::nanf("");
  io::WriteVolume(c.paths[2], bad);
  EXPECT_THAT([&] { kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), {}); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("sub-2"), HasSubstr("NaN or infinite"))));
}

TEST(RegionKernels, EmptyCohortIsAnError) {
  SmallCohort c(1, false);
  EXPECT_THAT([&] { kernels::ComputeRegionKernels({}, {}, c.Index(), {}); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("cohort is empty")));
}

TEST(RegionKernels, CorruptImageNamesTheFile) {
  SmallCohort c(3, false);
  neuromkl::testing::WriteFile(c.paths[1], "\x1f\x8b not really gzip");
  EXPECT_THAT([&] { kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), {}); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("sub-1.nii.gz")));
}

}  // namespace
