#include <cmath>
#include <cstdio>
#include <limits>
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

/// PET-like rows: mean 1000, a subject effect of 5 % and voxel noise of spread 1 (the centred kernel is
/// ~1e-6 of the raw one). Row-major n x V.
std::vector<float> PetLikeRows(std::int64_t n, std::int64_t V, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<std::size_t>(n * V));
  for (std::int64_t i = 0; i < n; ++i) {
    const float subject = 1000.0f * (1.0f + 0.05f * normal(rng));
    for (std::int64_t v = 0; v < V; ++v) x[static_cast<std::size_t>(i * V + v)] = subject + 30.0f * std::sin(0.01f * static_cast<float>(v)) + normal(rng);
  }
  return x;
}

/// Exact references for columns c0..c1 of the rows: raw X X' summed in long double, and the centred
/// kernel formed from column-centred data (no cancellation: its own rounding is ~1e-16 relative).
std::pair<Eigen::MatrixXd, Eigen::MatrixXd> ExactKernels(const std::vector<float>& x, std::int64_t n, std::int64_t V, std::int64_t c0, std::int64_t c1) {
  Eigen::MatrixXd raw(n, n);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      long double s = 0;
      for (std::int64_t v = c0; v < c1; ++v) s += static_cast<long double>(x[static_cast<std::size_t>(i * V + v)]) * x[static_cast<std::size_t>(j * V + v)];
      raw(i, j) = static_cast<double>(s);
    }
  Eigen::MatrixXd xc(n, c1 - c0);
  for (std::int64_t v = c0; v < c1; ++v) {
    long double mean = 0;
    for (std::int64_t i = 0; i < n; ++i) mean += x[static_cast<std::size_t>(i * V + v)];
    mean /= static_cast<long double>(n);
    for (std::int64_t i = 0; i < n; ++i) xc(i, v - c0) = static_cast<double>(x[static_cast<std::size_t>(i * V + v)] - mean);
  }
  return {raw, xc * xc.transpose()};
}

/// Largest error of a raw kernel relative to the float rounding bound of the products of
/// differences: |K_ij - exact_ij| / (|d_i| |d_j|), d = a subject's row minus subject 0's row over the
/// region's columns (the reference of RegionProducts and ComputeRegionKernels).
double RawErrorOverDifferenceNorms(const Eigen::MatrixXd& K, const Eigen::MatrixXd& exact, const std::vector<float>& x, std::int64_t n, std::int64_t V,
                                   std::int64_t c0, std::int64_t c1) {
  Eigen::VectorXd norm(n);
  for (std::int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (std::int64_t v = c0; v < c1; ++v) {
      const double d = static_cast<double>(x[static_cast<std::size_t>(i * V + v)]) - x[static_cast<std::size_t>(v)];
      s += d * d;
    }
    norm[i] = std::sqrt(s);
  }
  double worst = 0;
  for (std::int64_t i = 1; i < n; ++i)
    for (std::int64_t j = 1; j < n; ++j) worst = std::max(worst, std::abs(K(i, j) - exact(i, j)) / (norm[i] * norm[j]));
  // Row/column 0 is the reference itself (d = 0, no float rounding): exact up to double rounding.
  for (std::int64_t i = 0; i < n; ++i)
    if (std::abs(K(i, 0) - exact(i, 0)) > 1e-12 * std::abs(exact(i, 0)) || std::abs(K(0, i) - exact(0, i)) > 1e-12 * std::abs(exact(0, i)))
      return std::numeric_limits<double>::infinity();
  return worst;
}

/// Precision of RegionProducts on PET-like data against exact references, for regions of one chunk,
/// exactly one full chunk (2048 voxels) and three chunks; n = 67 leaves partial 64-blocks and a
/// remainder after the rows taken 4 at a time. Tolerances (see AccumulateRegion's comment):
/// - raw: the only float rounding is in the products of the differences d from the reference row;
///   the corrections u, r'r are double sums of exact float products. A float32 dot over a chunk of
///   w <= 2048 voxels errs by ~sqrt(w) x 6e-8 <= 2.7e-6 of |d_i| |d_j| (probabilistic bound; blocked
///   BLAS sums do better). Measured: <= ~1e-6; asserted: 1e-5 x |d_i| |d_j|. This is independent of
///   the mean: relative to a raw entry it is (spread / mean)^2 smaller.
/// - centred: centring removes u_i + u_j + r'r exactly up to double rounding at the raw scale
///   (~1e-16 x mean^2 / spread^2, here ~1e-10 of the centred scale) and keeps the float error above,
///   whose size is that of the centred entries. Measured: <= 5e-7 of max |centred entry|; asserted:
///   2e-6 (the "~1e-6 relative" of the documentation).
TEST(RegionKernels, ProductsMatchExactKernelsOnDataWithALargeMean) {
  const std::int64_t n = 67;
  const std::vector<std::int64_t> offsets = {0, 300, 2348, 7348};
  const std::int64_t V = offsets.back();
  const auto x = PetLikeRows(n, V, 5);
  const auto kernels = kernels::RegionProducts(x.data(), n, V, offsets);
  ASSERT_EQ(kernels.size(), 3u);
  for (std::size_t r = 0; r < 3; ++r) {
    const auto [raw, centred] = ExactKernels(x, n, V, offsets[r], offsets[r + 1]);
    const double rawErr = RawErrorOverDifferenceNorms(kernels[r], raw, x, n, V, offsets[r], offsets[r + 1]);
    EXPECT_LT(rawErr, 1e-5) << "region " << r;
    const double scale = centred.cwiseAbs().maxCoeff();
    const double err = (Centred(kernels[r]) - centred).cwiseAbs().maxCoeff() / scale;
    EXPECT_LT(err, 2e-6) << "region " << r;
    std::printf("region %zu: raw error %.2e of |d_i| |d_j|, centred error %.2e of max |centred|\n", r, rawErr, err);
  }
}

/// The out-of-core path (sgemm over subject blocks) on regions of one and two chunks, PET-like data:
/// same references and tolerances as above, and the same kernels as in memory within float rounding.
TEST(RegionKernels, OutOfCoreBlocksOfLargeRegionsMatchExactKernels) {
  neuromkl::testing::TempDir dir;
  io::Geometry grid;
  grid.dims = {20, 20, 15};
  grid.spacing = {2, 2, 2};
  atlas::Atlas atlas;
  atlas.geometry = grid;
  atlas.labels.resize(static_cast<std::size_t>(grid.VoxelCount()));
  for (std::size_t v = 0; v < atlas.labels.size(); ++v) atlas.labels[v] = v % 3 == 0 ? 2 : 1;  // 4000 (2 chunks) and 2000 voxels
  atlas.regions = {{1, "big"}, {2, "small"}};
  const std::int64_t n = 9, V = grid.VoxelCount();
  const auto x = PetLikeRows(n, V, 9);
  std::vector<std::string> ids, paths;
  for (std::int64_t s = 0; s < n; ++s) {
    io::Volume v;
    v.geometry = grid;
    v.data.assign(x.begin() + s * V, x.begin() + (s + 1) * V);
    ids.push_back("sub-" + std::to_string(s));
    paths.push_back(dir / (ids.back() + ".nii.gz"));
    io::WriteVolume(paths.back(), v);
  }
  const auto index = atlas::BuildRegionIndex(atlas, grid, nullptr);
  kernels::RegionKernelOptions small;
  small.memoryBudgetBytes = static_cast<std::uint64_t>(V) * 4 * 2 * 3;  // blocks of 3 subjects: 3 blocks
  small.threads = 1;
  kernels::RegionKernelReport report;
  const auto blocked = kernels::ComputeRegionKernels(ids, paths, index, small, &report);
  ASSERT_EQ(report.subjectBlocks, 3u);
  small.threads = 2;
  const auto blocked2 = kernels::ComputeRegionKernels(ids, paths, index, small);
  const auto inMemory = kernels::ComputeRegionKernels(ids, paths, index, {});
  ASSERT_EQ(blocked.Size(), 2u);
  for (std::size_t r = 0; r < 2; ++r) {
    // The region's columns in the image: the voxels of its label, ascending (the index order).
    std::vector<float> cols;
    const auto& voxels = index.regions[r].voxels;
    for (std::int64_t s = 0; s < n; ++s)
      for (auto v : voxels) cols.push_back(x[static_cast<std::size_t>(s * V + v)]);
    const auto w = static_cast<std::int64_t>(voxels.size());
    const auto [raw, centred] = ExactKernels(cols, n, w, 0, w);
    EXPECT_LT(RawErrorOverDifferenceNorms(blocked.kernels[r], raw, cols, n, w, 0, w), 1e-5) << blocked.info[r].name;
    const double scale = centred.cwiseAbs().maxCoeff();
    EXPECT_LT((Centred(blocked.kernels[r]) - centred).cwiseAbs().maxCoeff() / scale, 2e-6) << blocked.info[r].name;
    EXPECT_LT((Centred(inMemory.kernels[r]) - centred).cwiseAbs().maxCoeff() / scale, 2e-6) << inMemory.info[r].name;
    EXPECT_EQ(blocked.kernels[r], blocked2.kernels[r]);  // bitwise: no dependence on the thread count
  }
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

// The read pass against a hand count over every voxel: non-zero finite values inside and outside the regions (NaN,
// infinity and zeros on both sides), the global-mean divisor over the raw finite values of the voxels the regions
// cover, each once (two probabilistic regions share the voxels of label 2), and the rows as sqrt(p) x / divisor.
TEST(RegionKernels, ReadPassCountsEachVoxelOnceAndScalesTheRows) {
  SmallCohort c(4);
  for (std::size_t s = 0; s < c.volumes.size(); ++s) {
    auto& data = c.volumes[s].data;
    for (std::size_t v = s; v < data.size(); v += 9) data[v] = 0.0f;  // zeros inside and outside the regions
    data[5 * (s + 2)] = std::numeric_limits<float>::infinity();        // label 0: outside
    data[5 * (s + 3)] = std::nanf("");
    io::WriteVolume(c.paths[s], c.volumes[s]);
  }
  atlas::RegionIndex index = c.Index();
  ASSERT_EQ(index.regions.size(), 4u);
  atlas::RegionVoxels overlap = index.regions[1];  // label 2's voxels, in a second region of its own weights
  overlap.name = "B2";
  overlap.label = 20;
  index.regions[1].weights.assign(index.regions[1].voxels.size(), 0.25f);
  overlap.weights.assign(overlap.voxels.size(), 0.64f);
  index.regions.push_back(overlap);
  kernels::RegionKernelOptions options;
  options.intensity = kernels::IntensityScaling::GlobalMean;
  const kernels::SubjectRows rows = kernels::ReadSubjectRows(c.ids, c.paths, index, options);
  std::int64_t inside = 0, outside = 0;
  for (std::size_t s = 0; s < c.volumes.size(); ++s) {
    double sum = 0;
    std::int64_t count = 0;
    for (std::size_t v = 0; v < c.atlas.labels.size(); ++v) {
      const float x = c.volumes[s].data[v];
      if (!std::isfinite(x)) continue;
      const bool covered = c.atlas.labels[v] != 0;
      if (covered) sum += x, ++count;
      if (x != 0.0f) ++(covered ? inside : outside);
    }
    const double mean = sum / static_cast<double>(count);
    EXPECT_NEAR(rows.intensityScale[s], mean, 1e-12 * mean) << s;
    std::int64_t column = 0;
    for (const auto& region : index.regions)
      for (std::size_t k = 0; k < region.voxels.size(); ++k, ++column) {
        const float x = c.volumes[s].data[static_cast<std::size_t>(region.voxels[k])];
        const double p = region.weights.empty() ? 1.0 : region.weights[k];
        const double expected = std::isfinite(x) ? std::sqrt(p) * x / mean : 0.0;
        ASSERT_NEAR(rows.data[s * static_cast<std::size_t>(rows.columns) + static_cast<std::size_t>(column)], expected, 1e-6 * std::abs(expected) + 1e-7)
            << "subject " << s << " column " << column;
      }
  }
  EXPECT_EQ(rows.nonZeroInsideAtlas, inside);
  EXPECT_EQ(rows.nonZeroOutsideAtlas, outside);
  EXPECT_GT(outside, 0);
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

// Float32 studies: in memory each region's kernel is rounded as it is formed. The store is that of
// rounding the float64 kernels afterwards bit for bit (the same CompactKernel of the same kernel), with their
// diagonals kept, the same regions excluded (a zero kernel, a region with no voxel left), and the same store
// whatever the thread count. Out of core the stage rounds its float64 kernels at the end: the same store as
// rounding that run's kernels.
TEST(RegionKernels, Float32StoreIsTheRoundedFloat64KernelsAndExcludesTheSameRegions) {
  SmallCohort c(6, false);
  for (std::size_t v = 0; v < c.atlas.labels.size(); ++v)
    if (c.atlas.labels[v] == 4) c.volumes[2].data[v] = std::nanf("");  // D: no voxel left
  for (std::size_t s = 0; s < c.volumes.size(); ++s) {
    for (std::size_t v = 0; v < c.atlas.labels.size(); ++v)
      if (c.atlas.labels[v] == 3) c.volumes[s].data[v] = 0.0f;  // C: zero kernel
    for (auto& x : c.volumes[s].data) x += 100.0f;                // a common mean: centring matters
    for (std::size_t v = 0; v < c.atlas.labels.size(); ++v)
      if (c.atlas.labels[v] == 3) c.volumes[s].data[v] = 0.0f;
    io::WriteVolume(c.paths[s], c.volumes[s]);
  }
  const auto index = c.Index();
  for (const bool centre : {true, false}) {
    SCOPED_TRACE(centre ? "centred" : "raw");
    auto wide = kernels::ComputeRegionKernels(c.ids, c.paths, index, {});
    kernels::RegionKernelOptions o;
    o.compact = true;
    o.compactCentre = centre;
    o.threads = 1;
    const auto store = kernels::ComputeRegionKernels(c.ids, c.paths, index, o);
    o.threads = 2;
    const auto twoThreads = kernels::ComputeRegionKernels(c.ids, c.paths, index, o);
    ASSERT_TRUE(store.Compact());
    EXPECT_TRUE(store.kernels.empty());
    EXPECT_EQ(store.compact.centred, centre);
    ASSERT_EQ(store.Size(), 2u);
    ASSERT_EQ(wide.Size(), 2u);
    ASSERT_EQ(store.excluded.size(), 2u);
    for (std::size_t e = 0; e < 2; ++e) {
      EXPECT_EQ(store.excluded[e].info.name, wide.excluded[e].info.name);
      EXPECT_EQ(store.excluded[e].reason, wide.excluded[e].reason);
    }
    for (std::size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(store.info[r].name, wide.info[r].name);
      EXPECT_EQ(store.rawDiagonals[r], Eigen::VectorXd(wide.kernels[r].diagonal()));
      EXPECT_EQ(store.compact.kernels[r], twoThreads.compact.kernels[r]);
    }
    kernels::CompactKernelSet(wide, centre, "test");
    ASSERT_TRUE(wide.Compact());
    for (std::size_t r = 0; r < 2; ++r) EXPECT_EQ(store.compact.kernels[r], wide.compact.kernels[r]) << store.info[r].name;  // bitwise
    // Out of core: 6 blocks of one subject, rounded at the end.
    kernels::RegionKernelOptions blocks = o;
    blocks.memoryBudgetBytes = static_cast<std::uint64_t>(index.TotalVoxels()) * 4 * 2;
    kernels::RegionKernelReport report;
    const auto blocked = kernels::ComputeRegionKernels(c.ids, c.paths, index, blocks, &report);
    EXPECT_EQ(report.subjectBlocks, 6u);
    blocks.compact = false;
    auto blockedWide = kernels::ComputeRegionKernels(c.ids, c.paths, index, blocks);
    kernels::CompactKernelSet(blockedWide, centre, "test");
    ASSERT_EQ(blocked.Size(), 2u);
    for (std::size_t r = 0; r < 2; ++r) EXPECT_EQ(blocked.compact.kernels[r], blockedWide.compact.kernels[r]);
  }
}

TEST(RegionKernels, Float32RangeErrorNamesTheRegionAfterTheStudy) {
  SmallCohort c(3, false);
  for (std::size_t s = 0; s < c.volumes.size(); ++s) {
    for (std::size_t v = 0; v < c.atlas.labels.size(); ++v)
      if (c.atlas.labels[v] == 2) c.volumes[s].data[v] = 1e30f;  // B: products ~1e60 (finite in double, not in float32)
    io::WriteVolume(c.paths[s], c.volumes[s]);
  }
  kernels::RegionKernelOptions o;
  o.compact = true;
  o.compactWhere = "study.json";
  EXPECT_THAT([&] { kernels::ComputeRegionKernels(c.ids, c.paths, c.Index(), o); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("study.json: kernel \"B\""), HasSubstr("float32"))));
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

// A kernel that is not a Gram matrix is refused with its smallest eigenvalue (accepted, a negative-definite one would
// end with MKL weight 0, silently); rounding (a text file's digits) is tolerated.
std::string Format6(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

TEST(KernelChecks, IndefiniteKernelsAreRefusedWithTheirSmallestEigenvalue) {
  Eigen::MatrixXd K(3, 3);
  K << 1, 2, 0, 2, 1, 0, 0, 0, 1;  // eigenvalues -1, 1, 3
  EXPECT_THAT([&] { kernels::CheckKernel(K, "k", 3, "k.tsv"); },
              ::testing::ThrowsMessage<InputError>(::testing::AllOf(HasSubstr("k.tsv: kernel k is not positive semi-definite"),
                                                                     HasSubstr("its smallest eigenvalue is -1 (largest 3"))));
  EXPECT_THAT([&] { kernels::CheckKernel(-Eigen::MatrixXd::Identity(4, 4), "neg", 4, "neg.npy"); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("smallest eigenvalue is -1")));
  // A Gram matrix written with 6 significant digits: eigenvalues of order -1e-7 are rounding, accepted.
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd X(20, 5);
  for (Eigen::Index i = 0; i < X.size(); ++i) X.data()[i] = normal(rng);
  Eigen::MatrixXd G = X * X.transpose();  // rank 5: fifteen zero eigenvalues
  for (Eigen::Index i = 0; i < G.size(); ++i) G.data()[i] = std::stod(Format6(G.data()[i]));
  G = 0.5 * (G + G.transpose());
  EXPECT_NO_THROW(kernels::CheckKernel(G, "rounded", 20, "g.tsv"));
  EXPECT_NO_THROW(kernels::CheckKernel(Eigen::MatrixXd::Zero(3, 3), "zero", 3, "z.tsv"));  // excluded later, with its own note
}

}  // namespace

