// Compact feature storage: a FeatureMatrix of integer codes with one scale per row stands for the float32 matrix of the
// values scale_i x code_ij. With scales that are powers of two the float32 twin holds those values exactly, so every
// product, fold statistic and fit of the two must agree to the rounding of sums taken in another order.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/learners/feature_learners.hpp"
#include "neuromkl/learners/learner.hpp"

namespace nm = neuromkl;
using nm::gram::FeatureMatrix;
using nm::gram::FeatureStorage;
using nm::gram::FoldFeatures;

namespace {

/// Codes in [lowest, highest] over regions of different sizes (one longer than a widening chunk), the label in a third
/// of regions 0 and 2; each row's scale a power of two (exact in float32).
struct Twins {
  FeatureMatrix codes, floats;
  Eigen::VectorXd label;
};

Twins MakeTwins(FeatureStorage storage, int n, unsigned seed) {
  const int lowest = storage == FeatureStorage::UInt8 ? 0 : -3000, highest = storage == FeatureStorage::UInt8 ? 255 : 3000;
  std::mt19937 rng(seed);
  const int shift = (highest - lowest) / 6;  // the label's effect, the same share of either range
  std::uniform_int_distribution<int> code(lowest, highest - shift);
  const std::vector<Eigen::Index> sizes = {40, 25, 2500, 9, 30};
  Twins t;
  t.codes.regionStart = {0};
  for (const auto s : sizes) t.codes.regionStart.push_back(t.codes.regionStart.back() + s);
  const Eigen::Index voxels = t.codes.regionStart.back();
  t.codes.Resize(storage, n, voxels);
  t.floats.regionStart = t.codes.regionStart;
  t.floats.Resize(FeatureStorage::Float32, n, voxels);
  t.label.resize(n);
  for (int i = 0; i < n; ++i) {
    t.label[i] = i % 2 ? 1.0 : -1.0;
    t.codes.rowScale[i] = std::ldexp(1.0, -6 - i % 3);
    for (Eigen::Index j = 0; j < voxels; ++j) {
      int q = code(rng);
      for (const std::size_t r : {std::size_t{0}, std::size_t{2}})
        if (j >= t.codes.regionStart[r] && j < t.codes.regionStart[r] + t.codes.RegionSize(r) / 3) q += i % 2 ? shift : 0;
      if (storage == FeatureStorage::UInt8) t.codes.codes8(i, j) = static_cast<std::uint8_t>(q);
      else t.codes.codes16(i, j) = static_cast<std::int16_t>(q);
      t.floats.values(i, j) = static_cast<float>(t.codes.rowScale[i] * q);
    }
  }
  return t;
}

double RelativeGap(const Eigen::VectorXd& a, const Eigen::VectorXd& b) { return (a - b).cwiseAbs().maxCoeff() / std::max(1e-300, b.cwiseAbs().maxCoeff()); }

Eigen::VectorXd Subset(const Eigen::VectorXd& v, const std::vector<int>& rows) {
  Eigen::VectorXd out(static_cast<Eigen::Index>(rows.size()));
  for (std::size_t i = 0; i < rows.size(); ++i) out[static_cast<Eigen::Index>(i)] = v[rows[i]];
  return out;
}

class FeatureStorageTwins : public ::testing::TestWithParam<FeatureStorage> {};

}  // namespace

// The fold's statistics and every product the learners read. Both sides sum the same double products in chunks of
// another length: ~1e-15 relative, asserted at 1e-12.
TEST_P(FeatureStorageTwins, ProductsEqualTheFloatTwinsProducts) {
  const Twins t = MakeTwins(GetParam(), 36, 3);
  EXPECT_EQ(t.codes.Bytes(), 36u * static_cast<std::uint64_t>(t.codes.Voxels()) * nm::gram::BytesPerValue(GetParam()) + 36u * 8u);
  std::vector<int> train, test;
  for (int i = 0; i < 36; ++i) (i % 4 == 3 ? test : train).push_back(i);
  const FoldFeatures a(t.codes, train, test, true, true), b(t.floats, train, test, true, true);
  EXPECT_LT(RelativeGap(a.Mean(), b.Mean()), 1e-12);
  for (Eigen::Index i = 0; i < a.TrainingRows() + a.TestRows(); ++i)
    for (std::size_t r = 0; r < t.codes.Regions(); ++r) {
      EXPECT_NEAR(a.Scale(i, r), b.Scale(i, r), 1e-12 * b.Scale(i, r)) << "row " << i << " region " << r;
      EXPECT_NEAR(a.CentredSquaredNorm(i, r), b.CentredSquaredNorm(i, r), 1e-12 * b.CentredSquaredNorm(i, r));
    }
  const Eigen::VectorXd alpha = Eigen::VectorXd::LinSpaced(a.TrainingRows(), -1.0, 2.0);
  const Eigen::VectorXd all = Eigen::VectorXd::Ones(static_cast<Eigen::Index>(t.codes.Regions()));
  const auto ua = a.TrainingTransposeTimes(alpha), ub = b.TrainingTransposeTimes(alpha);
  EXPECT_LT(RelativeGap(a.Dense(ua), b.Dense(ub)), 1e-12);
  EXPECT_LT(RelativeGap(a.RegionSquaredNorms(ua), b.RegionSquaredNorms(ub)), 1e-12);
  EXPECT_LT(RelativeGap(a.Times(ua, all, false), b.Times(ub, all, false)), 1e-12);
  EXPECT_LT(RelativeGap(a.Times(ua, all, true), b.Times(ub, all, true)), 1e-12);
  nm::gram::PreparedVector va = a.Zero(), vb = b.Zero();
  for (Eigen::Index i = 0; i < a.TrainingRows(); ++i) {
    a.AddRow(i, alpha[i], all, va);
    b.AddRow(i, alpha[i], all, vb);
  }
  EXPECT_LT(RelativeGap(a.Dense(va), b.Dense(vb)), 1e-12);
  for (std::size_t r = 0; r < t.codes.Regions(); ++r) EXPECT_LT(RelativeGap(t.codes.RegionKernel(r), t.floats.RegionKernel(r)), 1e-12) << "region " << r;
}

// The learners see only those products: the same fits (solver tolerances 1e-10; decisions and kernel weights agree to
// what the iterations resolve, asserted at 1e-7 relative).
TEST_P(FeatureStorageTwins, FitsEqualTheFloatTwinsFits) {
  const Twins t = MakeTwins(GetParam(), 48, 5);
  std::vector<int> train, test;
  for (int i = 0; i < 48; ++i) (i % 4 == 3 ? test : train).push_back(i);
  const FoldFeatures a(t.codes, train, test, true, true), b(t.floats, train, test, true, true);
  nm::learners::Targets targets;
  targets.y = Subset(t.label, train);
  for (const std::string learner : {"svm", "enmkl_svm"}) {
    const nm::learners::ParamMap params = learner == "svm" ? nm::learners::ParamMap{{"c", 1.0}, {"tolerance", 1e-10}}
                                                           : nm::learners::ParamMap{{"c", 1.0}, {"mu", 0.5}, {"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}};
    const nm::learners::Model ma = nm::learners::FitFeatures(learner, params, a, targets), mb = nm::learners::FitFeatures(learner, params, b, targets);
    EXPECT_LT(RelativeGap(nm::learners::FeatureDecision(ma, a), nm::learners::FeatureDecision(mb, b)), 1e-7) << learner;
    if (learner == "enmkl_svm") {
      EXPECT_LT((ma.beta - mb.beta).cwiseAbs().maxCoeff(), 1e-7);
      EXPECT_GT(ma.beta[0] + ma.beta[2], 0.5) << "the regions that carry the label lead";
    }
  }
}

// Keeping rows and regions, and selecting regions, move codes and row scales together: the result stands for the float
// twin's result exactly.
TEST_P(FeatureStorageTwins, RowsAndRegionsMoveWithTheirScales) {
  Twins t = MakeTwins(GetParam(), 9, 7);
  auto expectTwins = [](const FeatureMatrix& codes, const FeatureMatrix& floats) {
    ASSERT_EQ(codes.Subjects(), floats.Subjects());
    ASSERT_EQ(codes.Voxels(), floats.Voxels());
    EXPECT_EQ(codes.regionStart, floats.regionStart);
    for (Eigen::Index i = 0; i < codes.Subjects(); ++i)
      EXPECT_EQ(codes.RowSegment(i, 0, codes.Voxels()), floats.values.row(i).cast<double>()) << "row " << i;
  };
  const FeatureMatrix selectedCodes = t.codes.SelectRegions({3, 0}), selectedFloats = t.floats.SelectRegions({3, 0});
  EXPECT_EQ(selectedCodes.storage, GetParam());
  expectTwins(selectedCodes, selectedFloats);
  t.codes.KeepRows({6, 1, 4});
  t.floats.KeepRows({6, 1, 4});
  expectTwins(t.codes, t.floats);
  t.codes.KeepRegions({1, 2, 4});
  t.floats.KeepRegions({1, 2, 4});
  expectTwins(t.codes, t.floats);
  EXPECT_NO_THROW(t.codes.Check());
  t.codes.rowScale.conservativeResize(2);
  try {
    t.codes.Check();
    ADD_FAILURE() << "expected an InputError";
  } catch (const nm::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("expected one scale per row (3); found 2"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Codes, FeatureStorageTwins, ::testing::Values(FeatureStorage::UInt8, FeatureStorage::Int16),
                         [](const auto& info) { return std::string(nm::gram::ToString(info.param)); });
