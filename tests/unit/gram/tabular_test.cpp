// Tabular columns inside the folds: the median fill and the standardisation come from each fold's training rows only;
// the kernel functions against their formulas; a fold of the store equals the fold of kernels formed by hand from
// columns imputed and standardised with the training statistics, and nothing fitted depends on a test subject.
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
#include "neuromkl/gram/tabular.hpp"
#include "testing.hpp"

using namespace neuromkl;

namespace {

const double kNan = std::numeric_limits<double>::quiet_NaN();

Eigen::VectorXi Index(const std::vector<int>& rows) { return Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size())); }

TEST(Tabular, MedianOfOddAndEvenCounts) {
  std::vector<double> odd = {7, 1, 3}, even = {4, 1, 3, 10}, one = {2.5};
  EXPECT_EQ(gram::Median(odd), 3.0);
  EXPECT_EQ(gram::Median(even), 3.5);  // the mean of the middle two
  EXPECT_EQ(gram::Median(one), 2.5);
}

// Column 0 has a gap in training row 1 and in test row 4; column 1 has none. Training rows 0-3, test rows 4-5.
TEST(Tabular, TheFillAndTheStandardisationAreTheTrainingRowsStatistics) {
  Eigen::MatrixXd X(6, 2);
  X << 1, 2,  //
      kNan, 4,  //
      3, 6,   //
      8, 8,   //
      kNan, 100,  //
      50, -3;
  const Eigen::VectorXi train = Index({0, 1, 2, 3}), test = Index({4, 5});
  const gram::TabularFit fit = gram::FitTabular(X, train, {true, true}, {"a", "b"}, "t");
  // Column a: median of {1, 3, 8} = 3; the filled training column 1, 3, 3, 8 has mean 3.75 and SD sqrt(26.75 / 3).
  EXPECT_EQ(fit.fill[0], 3.0);
  EXPECT_TRUE(std::isnan(fit.fill[1]));  // nothing to fill there
  EXPECT_DOUBLE_EQ(fit.mean[0], 3.75);
  EXPECT_DOUBLE_EQ(fit.sd[0], std::sqrt(26.75 / 3));
  EXPECT_DOUBLE_EQ(fit.mean[1], 5.0);
  EXPECT_DOUBLE_EQ(fit.sd[1], std::sqrt(20.0 / 3));
  const Eigen::MatrixXd Z = gram::ApplyTabular(fit, X, test);
  EXPECT_DOUBLE_EQ(Z(0, 0), (3.0 - 3.75) / std::sqrt(26.75 / 3));  // the test gap takes the training median
  EXPECT_DOUBLE_EQ(Z(1, 0), (50.0 - 3.75) / std::sqrt(26.75 / 3));
  EXPECT_DOUBLE_EQ(Z(0, 1), (100.0 - 5.0) / std::sqrt(20.0 / 3));
  // Every column's fill for an exported model; a column constant over the training rows keeps SD 1.
  const gram::TabularFit every = gram::FitTabular(X, train, {true, false}, {"a", "b"}, "t", true);
  EXPECT_EQ(every.fill[1], 5.0);  // median of {2, 4, 6, 8}
  EXPECT_EQ(every.mean[0], 0.0);
  EXPECT_EQ(every.sd[0], 1.0);
  Eigen::MatrixXd constant = X;
  constant(1, 0) = constant(4, 0) = 2;
  constant.col(1).setConstant(4);
  EXPECT_EQ(gram::FitTabular(constant, train, {false, true}, {"a", "b"}, "t").sd[1], 1.0);
}

TEST(Tabular, AGapWithoutImputationOrWithoutATrainingValueIsAnInputError) {
  Eigen::MatrixXd X(4, 2);
  X << 1, kNan,  //
      2, kNan,  //
      3, 5,     //
      4, 6;
  try {
    gram::FitTabular(X, Index({0, 1}), {true, false}, {"a", "b"}, "clinical.tsv");
    FAIL() << "expected tabular:NothingToImpute";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "tabular:NothingToImpute");
    EXPECT_NE(std::string(e.what()).find("column \"b\""), std::string::npos) << e.what();
  }
  try {
    gram::FitTabular(X, Index({0, 1, 2}), {false, true}, {"a", "b"}, "clinical.tsv");
    FAIL() << "expected tabular:Missing";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "tabular:Missing");
  }
}

TEST(Tabular, KernelFunctionsFollowTheirFormulas) {
  std::mt19937 rng(3);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd A(7, 3), B(4, 3);
  for (Eigen::Index k = 0; k < A.size(); ++k) A.data()[k] = normal(rng);
  for (Eigen::Index k = 0; k < B.size(); ++k) B.data()[k] = normal(rng);
  using Type = gram::FeatureKernel::Type;
  for (const gram::FeatureKernel f : {gram::FeatureKernel{Type::Linear, 0, 0}, gram::FeatureKernel{Type::Polynomial, 3, 1.5},
                                      gram::FeatureKernel{Type::Gaussian, 1.3, 0}}) {
    auto formula = [&](const Eigen::RowVectorXd& a, const Eigen::RowVectorXd& b) {
      if (f.type == Type::Linear) return a.dot(b);
      if (f.type == Type::Polynomial) return std::pow(a.dot(b) + 1.5, 3);
      return std::exp(-(a - b).squaredNorm() / (2 * 1.3 * 1.3));
    };
    const Eigen::MatrixXd G = f.Gram(A), AB = f.Between(A, B);
    const Eigen::VectorXd self = f.Self(A);
    EXPECT_EQ(G, G.transpose()) << f.Name();  // exactly symmetric
    for (Eigen::Index i = 0; i < A.rows(); ++i) {
      EXPECT_NEAR(self[i], formula(A.row(i), A.row(i)), 1e-12 * std::max(1.0, std::abs(self[i]))) << f.Name();
      for (Eigen::Index j = 0; j < A.rows(); ++j) EXPECT_NEAR(G(i, j), formula(A.row(i), A.row(j)), 1e-12 * std::max(1.0, std::abs(G(i, j)))) << f.Name();
      for (Eigen::Index j = 0; j < B.rows(); ++j) EXPECT_NEAR(AB(i, j), formula(A.row(i), B.row(j)), 1e-12 * std::max(1.0, std::abs(AB(i, j)))) << f.Name();
    }
    EXPECT_EQ(gram::FeatureKernel::FromName(f.Name()), f.type);
  }
  EXPECT_THROW(gram::FeatureKernel::FromName("sigmoid"), std::invalid_argument);
}

/// 24 subjects, three columns on different scales with gaps, and a store of three kernels: linear on columns {0, 1},
/// Gaussian on every column, and a full kernel of another source.
struct TabularCohort {
  int n = 24;
  Eigen::MatrixXd X;
  gram::KernelList full;
  std::vector<gram::KernelOrigin> origins;
};

TabularCohort MakeTabularCohort(unsigned seed) {
  TabularCohort c;
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  c.X.resize(c.n, 3);
  for (int i = 0; i < c.n; ++i) {
    c.X(i, 0) = 70 + 8 * normal(rng);
    c.X(i, 1) = 0.01 * normal(rng);
    c.X(i, 2) = 1000 + 300 * normal(rng);
  }
  for (const auto& [i, j] : {std::pair{2, 0}, {5, 0}, {7, 1}, {11, 2}, {0, 2}}) c.X(i, j) = kNan;
  Eigen::MatrixXd other(c.n, 2);
  for (Eigen::Index k = 0; k < other.size(); ++k) other.data()[k] = normal(rng);
  c.full = {Eigen::MatrixXd(), Eigen::MatrixXd(), other * other.transpose()};
  gram::KernelOrigin linear, gaussian;
  linear.tabular = gaussian.tabular = 0;
  linear.columns = {0, 1};
  gaussian.columns = {0, 1, 2};
  gaussian.function = {gram::FeatureKernel::Type::Gaussian, 1.5, 0};
  c.origins = {linear, gaussian, gram::KernelOrigin{}};
  return c;
}

gram::FoldFormedKernels TabularStore(const TabularCohort& c) {
  auto sources = std::make_shared<std::vector<gram::FoldTabularSource>>();
  sources->push_back({"clin", std::make_shared<const Eigen::MatrixXd>(c.X), {"age", "tiny", "volume"}, {true, true}, false,
                      "study.json /kernels/tabular"});
  return gram::FoldFormedKernels(std::make_shared<const gram::KernelList>(c.full), c.origins, std::make_shared<const std::vector<gram::HarmonisedSource>>(),
                                 nullptr, 0, std::move(sources));
}

void Split(int n, std::vector<int>& train, std::vector<int>& test) {
  for (int i = 0; i < n; ++i) (i % 4 == 1 ? test : train).push_back(i);
}

TEST(Tabular, AFoldIsTheFoldOfKernelsOfColumnsImputedAndStandardisedWithTheTrainingStatistics) {
  const TabularCohort c = MakeTabularCohort(5);
  std::vector<int> train, test;
  Split(c.n, train, test);
  // By hand: per column the training median of the given values, then the mean and SD (n - 1) of the filled training column.
  std::vector<int> rows = train;
  rows.insert(rows.end(), test.begin(), test.end());
  Eigen::MatrixXd Z = c.X(Index(rows), Eigen::all);
  for (Eigen::Index j = 0; j < 3; ++j) {
    std::vector<double> given;
    for (const int i : train)
      if (!std::isnan(c.X(i, j))) given.push_back(c.X(i, j));
    std::sort(given.begin(), given.end());
    const std::size_t h = given.size() / 2;
    const double median = given.size() % 2 ? given[h] : 0.5 * (given[h - 1] + given[h]);
    for (Eigen::Index i = 0; i < Z.rows(); ++i)
      if (std::isnan(Z(i, j))) Z(i, j) = median;
    const auto l = static_cast<Eigen::Index>(train.size());
    const double mean = Z.col(j).head(l).mean();
    const double sd = std::sqrt((Z.col(j).head(l).array() - mean).square().sum() / static_cast<double>(l - 1));
    Z.col(j) = (Z.col(j).array() - mean) / sd;
  }
  Eigen::MatrixXd G(Z.rows(), Z.rows());
  for (Eigen::Index i = 0; i < Z.rows(); ++i)
    for (Eigen::Index j = 0; j < Z.rows(); ++j) G(i, j) = std::exp(-(Z.row(i) - Z.row(j)).squaredNorm() / (2 * 1.5 * 1.5));
  gram::KernelList local = {Z.leftCols(2) * Z.leftCols(2).transpose(), G, c.full[2](Index(rows), Index(rows))};
  const gram::MemoryKernels byHand(std::move(local));
  std::vector<int> localTrain, localTest;
  for (std::size_t i = 0; i < rows.size(); ++i) (i < train.size() ? localTrain : localTest).push_back(static_cast<int>(i));
  const gram::FoldFormedKernels store = TabularStore(c);
  EXPECT_EQ(store.Subjects(), c.n);
  for (const bool normalise : {false, true}) {
    gram::Preprocessing pre;
    pre.normalise = normalise;
    const gram::FoldKernels got = gram::PrepareFold(store, train, test, pre), want = gram::PrepareFold(byHand, localTrain, localTest, pre);
    for (std::size_t k = 0; k < 3; ++k) {
      // The same standardised values summed in other orders: 1e-12 of the largest entry.
      EXPECT_TRUE(neuromkl::testing::MatrixNear(got.train[k], want.train[k], 1e-12)) << "kernel " << k;
      EXPECT_TRUE(neuromkl::testing::MatrixNear(got.test[k], want.test[k], 1e-12)) << "kernel " << k;
    }
  }
  // The exported model's statistics are the fold's: FitTabularFold on the training rows.
  const gram::TabularFoldFit fit = store.FitTabularFold(0, train, "a fold", true);
  EXPECT_FALSE(fit.combat);
  EXPECT_TRUE(neuromkl::testing::MatrixNear(store.TabularFoldRows(fit, 0, rows, train.size(), "a fold"), Z, 1e-13));
}

TEST(Tabular, NothingFittedOnTheTrainingSetDependsOnATestSubject) {
  TabularCohort c = MakeTabularCohort(6);
  std::vector<int> train, test;
  Split(c.n, train, test);
  gram::Preprocessing pre;
  pre.normalise = true;
  const gram::FoldKernels before = gram::PrepareFold(TabularStore(c), train, test, pre);
  // One test subject's values change (one becomes missing, one far out); another's gap is filled in.
  const int changed = test[0], filled = test[1];
  c.X(changed, 0) = kNan;
  c.X(changed, 2) = 1e6;
  c.X(filled, 0) = std::isnan(c.X(filled, 0)) ? 60.0 : c.X(filled, 0) + 5;
  const gram::FoldKernels after = gram::PrepareFold(TabularStore(c), train, test, pre);
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(after.train[k], before.train[k]) << "kernel " << k;  // bit for bit
    for (Eigen::Index t = 0; t < static_cast<Eigen::Index>(test.size()); ++t) {
      const int subject = test[static_cast<std::size_t>(t)];
      if (subject == changed || subject == filled)
        EXPECT_GT((after.test[k].row(t) - before.test[k].row(t)).cwiseAbs().maxCoeff(), 1e-6) << "kernel " << k;
      else
        EXPECT_EQ(after.test[k].row(t), before.test[k].row(t)) << "kernel " << k;
    }
  }
  // A training subject's value does change the fit.
  c.X(train[0], 0) += 10;
  EXPECT_GT((gram::PrepareFold(TabularStore(c), train, test, pre).train[0] - after.train[0]).cwiseAbs().maxCoeff(), 1e-6);
}

// Harmonised: the columns are imputed, harmonised with ComBat fitted on the imputed training rows, then standardised with
// the statistics of the harmonised training columns; a test subject's values change nothing fitted.
TEST(Tabular, AHarmonisedSourceIsImputedThenHarmonisedWithTheTrainingFitThenStandardised) {
  TabularCohort c = MakeTabularCohort(8);
  std::vector<int> sites(static_cast<std::size_t>(c.n));
  for (int i = 0; i < c.n; ++i) {
    sites[static_cast<std::size_t>(i)] = i % 3;
    for (Eigen::Index j = 0; j < 3; ++j)
      if (!std::isnan(c.X(i, j))) c.X(i, j) = (i % 3) * 5.0 + (1.0 + (i % 3)) * c.X(i, j);  // a shift and a scale per site
  }
  auto design = std::make_shared<gram::Harmonisation>();
  design->sites = sites;
  design->siteNames = {"A", "B", "C"};
  design->covariates = Eigen::MatrixXd(c.n, 0);
  design->where = "study.json /harmonisation";
  auto store = [&](const TabularCohort& cohort) {
    auto sources = std::make_shared<std::vector<gram::FoldTabularSource>>();
    sources->push_back({"clin", std::make_shared<const Eigen::MatrixXd>(cohort.X), {"age", "tiny", "volume"}, {true, true}, true, "study.json /kernels/tabular"});
    return gram::FoldFormedKernels(std::make_shared<const gram::KernelList>(cohort.full), cohort.origins,
                                   std::make_shared<const std::vector<gram::HarmonisedSource>>(), design, 0, std::move(sources));
  };
  std::vector<int> train, test;
  Split(c.n, train, test);
  std::vector<int> rows = train;
  rows.insert(rows.end(), test.begin(), test.end());
  // By hand: the training medians, ComBat on the filled training rows, applied to every row, then the training mean and SD.
  const gram::TabularFit fill = gram::FitTabular(c.X, Index(train), {true, false}, {}, "t");
  Eigen::MatrixXd Z = gram::ApplyTabular(fill, c.X, Index(rows));
  std::vector<int> rowSites;
  for (const int i : rows) rowSites.push_back(sites[static_cast<std::size_t>(i)]);
  const auto l = static_cast<Eigen::Index>(train.size());
  const std::vector<int> trainSites(rowSites.begin(), rowSites.begin() + l);
  const gram::ComBatModel fit = gram::FitComBat(Eigen::MatrixXd(Z.topRows(l)), trainSites, Eigen::MatrixXd(l, 0), gram::ComBatOptions{}, "t");
  gram::ApplyComBat(fit, Z, rowSites, Eigen::MatrixXd(Z.rows(), 0), "t");
  for (Eigen::Index j = 0; j < 3; ++j) {
    const double mean = Z.col(j).head(l).mean();
    const double sd = std::sqrt((Z.col(j).head(l).array() - mean).square().sum() / static_cast<double>(l - 1));
    Z.col(j) = (Z.col(j).array() - mean) / sd;
  }
  const gram::FoldFormedKernels harmonised = store(c);
  const gram::TabularFoldFit got = harmonised.FitTabularFold(0, train, "a fold");
  ASSERT_TRUE(got.combat);
  EXPECT_TRUE(neuromkl::testing::MatrixNear(harmonised.TabularFoldRows(got, 0, rows, train.size(), "a fold"), Z, 1e-12));
  // Without shrinkage and covariates every training site's harmonised column has the pooled mean: the sites' means
  // coincide to rounding, where the raw (filled, standardised) columns' differ by more than one SD.
  design->options.empiricalBayes = false;
  const Eigen::MatrixXd unshrunk = store(c).TabularFoldRows(store(c).FitTabularFold(0, train, "a fold"), 0, train, train.size(), "a fold");
  const Eigen::MatrixXd raw = gram::ApplyTabular(gram::FitTabular(c.X, Index(train), {true, true}, {}, "t"), c.X, Index(train));
  for (Eigen::Index j = 0; j < 3; ++j) {
    double means[2][3] = {{0, 0, 0}, {0, 0, 0}}, counts[3] = {0, 0, 0};
    for (Eigen::Index i = 0; i < l; ++i) {
      const auto s = static_cast<std::size_t>(trainSites[static_cast<std::size_t>(i)]);
      means[0][s] += unshrunk(i, j), means[1][s] += raw(i, j), ++counts[s];
    }
    for (std::size_t s = 1; s < 3; ++s) {
      EXPECT_NEAR(means[0][s] / counts[s], means[0][0] / counts[0], 1e-9) << "column " << j << " site " << s;
      EXPECT_GT(std::abs(means[1][s] / counts[s] - means[1][0] / counts[0]), 1.0) << "column " << j << " site " << s;
    }
  }
  design->options.empiricalBayes = true;
  gram::Preprocessing pre;
  const gram::FoldKernels before = gram::PrepareFold(harmonised, train, test, pre);
  TabularCohort moved = c;
  moved.X(test[0], 0) = kNan;
  moved.X(test[2], 2) = 1e5;
  const gram::FoldKernels after = gram::PrepareFold(store(moved), train, test, pre);
  for (std::size_t k = 0; k < 2; ++k) EXPECT_EQ(after.train[k], before.train[k]) << "kernel " << k;
}

TEST(Tabular, ATrainingSetWithoutAValueToImputeFromIsRefusedNamingTheColumn) {
  TabularCohort c = MakeTabularCohort(7);
  std::vector<int> train, test;
  Split(c.n, train, test);
  for (const int i : train) c.X(i, 1) = kNan;
  try {
    gram::PrepareFold(TabularStore(c), train, test, gram::Preprocessing{});
    FAIL() << "expected tabular:NothingToImpute";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "tabular:NothingToImpute");
    EXPECT_NE(std::string(e.what()).find("column \"tiny\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("study.json /kernels/tabular"), std::string::npos) << e.what();
  }
}

}  // namespace
