// The compact kernel store: float32 kernels read in double, centred before rounding.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "gram_fixtures.hpp"
#include "neuromkl/gram/memory.hpp"

#include "neuromkl/core/errors.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/gram/compact.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/weights/weights.hpp"

using namespace neuromkl;

namespace {

/// Raw linear kernels of image-like features: a large common mean (10, as grey matter or PET intensities
/// are far from 0) plus unit noise; the first `signal` kernels carry a shift along the labels +-1.
struct RawProblem {
  learners::KernelList kernels;
  learners::Targets targets;
};
RawProblem MakeRawProblem(int n, int m, int features, int signal, unsigned seed, learners::Task task = learners::Task::Classification) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  RawProblem p;
  p.targets = {task, Eigen::VectorXd(n)};
  for (int i = 0; i < n; ++i) p.targets.y[i] = task == learners::Task::Classification ? (i % 2 ? 1.0 : -1.0) : normal(rng);
  for (int j = 0; j < m; ++j) {
    Eigen::MatrixXd X(n, features);
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = 10.0 + normal(rng);
    if (j < signal) X.leftCols(3).colwise() += 0.6 * p.targets.y;
    p.kernels.push_back(X * X.transpose());
  }
  return p;
}

Eigen::VectorXi Indices(int from, int to, int step) {
  std::vector<int> v;
  for (int i = from; i < to; i += step) v.push_back(i);
  return Eigen::Map<const Eigen::VectorXi>(v.data(), static_cast<Eigen::Index>(v.size()));
}

TEST(CompactKernels, AreExactlySymmetricAndCentredWhenAsked) {
  const RawProblem p = MakeRawProblem(31, 1, 7, 0, 5);
  const Eigen::MatrixXf raw = gram::CompactKernel(p.kernels[0], false);
  const Eigen::MatrixXf centred = gram::CompactKernel(p.kernels[0], true);
  EXPECT_EQ(raw, Eigen::MatrixXf(raw.transpose()));
  EXPECT_EQ(centred, Eigen::MatrixXf(centred.transpose()));
  // Raw: the float64 values rounded once (relative error <= 2^-24).
  EXPECT_LE(((raw.cast<double>() - p.kernels[0]).array() / p.kernels[0].array()).abs().maxCoeff(), std::ldexp(1.0, -24));
  // Centred: H K H with H = I - 11'/n; the rows of H K H sum to 0 (to the rounding of entries of size ~|K|).
  const Eigen::Index n = p.kernels[0].rows();
  const Eigen::MatrixXd H = Eigen::MatrixXd::Identity(n, n) - Eigen::MatrixXd::Constant(n, n, 1.0 / static_cast<double>(n));
  const Eigen::MatrixXd expected = H * p.kernels[0] * H;
  EXPECT_LE((centred.cast<double>() - expected).cwiseAbs().maxCoeff(), 1e-6 * expected.cwiseAbs().maxCoeff());
  EXPECT_EQ(gram::CompactBytes(116, 5000), 116ULL * 5000 * 5000 * 4);
}

TEST(CompactKernels, AValueBeyondFloat32IsAClearError) {
  // A raw kernel of huge intensities: 1e40 has no float32 value. The error names the kernel and entry; with
  // centring the offending entry is the centred one (still beyond range here: the entries differ by ~1e40).
  // Two bad kernels, rounded on several threads: the first in order is named.
  learners::KernelList kernels(4, Eigen::MatrixXd::Identity(3, 3));
  kernels[1](2, 2) = 1e40;
  kernels[3](0, 0) = std::numeric_limits<double>::infinity();
  for (const bool centre : {false, true}) {
    try {
      gram::CompactKernels(kernels, centre);
      ADD_FAILURE() << "expected kernels:Float32Range";
    } catch (const InputError& e) {
      EXPECT_EQ(e.code(), "kernels:Float32Range");
      EXPECT_EQ(e.where(), "kernel 1");
      EXPECT_NE(std::string(e.what()).find(centre ? "entry (0, 0)" : "entry (2, 2)"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("beyond float32's range"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("keep this study's kernels in float64"), std::string::npos) << e.what();
    }
  }
}

TEST(CompactKernels, FoldPreparationOfFloat32IsThatOfTheWidenedKernelBitForBit) {
  // Every in-place reader widens each float32 entry and computes in double: the float32 kernel and its values
  // as a float64 kernel give the same fold vectors, blocks, columns and products, bit for bit.
  const RawProblem p = MakeRawProblem(29, 1, 5, 0, 7);
  const Eigen::MatrixXf K = gram::CompactKernel(p.kernels[0], true);
  const Eigen::MatrixXd wide = K.cast<double>();
  const Eigen::VectorXi tr = Indices(0, 29, 2), te = Indices(1, 29, 2);
  for (const bool centre : {true, false})
    for (const bool normalise : {true, false}) {
      const gram::FoldVectors a = gram::MakeFoldVectors(K, tr, te, centre, normalise);
      const gram::FoldVectors b = gram::MakeFoldVectors(wide, tr, te, centre, normalise);
      EXPECT_EQ(a.colMean, b.colMean);
      EXPECT_EQ(a.testMean, b.testMean);
      EXPECT_EQ(a.invTrain, b.invTrain);
      EXPECT_EQ(a.invTest, b.invTest);
      const gram::FoldKernel x = gram::PreparedBlocks(K, tr, te, a, normalise, 0.5);
      const gram::FoldKernel y = gram::PreparedBlocks(wide, tr, te, b, normalise, 0.5);
      EXPECT_EQ(x.train, y.train);
      EXPECT_EQ(x.testTrain, y.testTrain);
      EXPECT_EQ(x.testDiag, y.testDiag);
      const Eigen::MatrixXd A = Eigen::MatrixXd::Random(tr.size(), 2);
      EXPECT_EQ(gram::PreparedProducts(K, tr, a, A), gram::PreparedProducts(wide, tr, b, A));
      const gram::FoldKernel sx = gram::SliceFold(K, tr, te), sy = gram::SliceFold(wide, tr, te);
      EXPECT_EQ(sx.train, sy.train);
      EXPECT_EQ(sx.testTrain, sy.testTrain);
    }
}

TEST(CompactKernels, CentringBeforeRoundingKeepsTheDigitsOfTheFoldKernels) {
  // Features with mean 10 and unit spread: raw entries are ~100x the centred ones. The fold kernel (centred
  // and normalised with training statistics, entries in [-1, 1]) from the centred float32 store is within a
  // few float32 roundings (2^-24 = 6e-8) of the float64 one: bound 1e-6. From the raw entries rounded to float32
  // the error is the rounding of entries ~100x larger: more than 10x worse (measured ~490x).
  const RawProblem p = MakeRawProblem(60, 1, 50, 0, 9);
  const Eigen::VectorXi tr = Indices(0, 60, 3), te = Indices(1, 60, 3);
  const gram::FoldKernel reference = gram::PreparedBlocks(p.kernels[0], tr, te, gram::MakeFoldVectors(p.kernels[0], tr, te, true, true), true);
  const auto error = [&](const Eigen::MatrixXf& K) {
    const gram::FoldKernel fk = gram::PreparedBlocks(K, tr, te, gram::MakeFoldVectors(K, tr, te, true, true), true);
    return std::max((fk.train - reference.train).cwiseAbs().maxCoeff(), (fk.testTrain - reference.testTrain).cwiseAbs().maxCoeff());
  };
  const double centred = error(gram::CompactKernel(p.kernels[0], true)), raw = error(gram::CompactKernel(p.kernels[0], false));
  EXPECT_LT(centred, 1e-6);
  EXPECT_GT(raw, 10.0 * centred);
  std::printf("fold kernel error from float32: centred store %.2e, raw store %.2e\n", centred, raw);
}

std::vector<cv::Fold> Outer(const learners::Targets& t) { return cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, t.task, t.y, {}, {}, 21, "outer"); }
cv::InnerSplitter Inner(learners::Task task) {
  return [task](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, task, y, {}, {}, 400 + f, "inner");
  };
}

TEST(CompactKernels, NestedCvOnTheStoreIsTheRunOnItsWidenedValuesBitForBit) {
  // Learners of kernel weights (in place and from copies), a summed learner, a grid, probabilities and equal
  // source weighting; then covariates (every fold copied and residualised from the float32 entries).
  const RawProblem p = MakeRawProblem(45, 6, 8, 2, 11);
  const gram::CompactKernelList store = gram::CompactKernels(p.kernels, true);
  learners::KernelList wide;
  ASSERT_TRUE(store.centred);
  for (std::size_t j = 0; j < store.size(); ++j) {
    EXPECT_EQ(store[j], gram::CompactKernel(p.kernels[j], true));  // the store is the centred rounding of each kernel
    wide.push_back(store[j].cast<double>());
  }
  const std::vector<cv::LearnerPlan> plans = {{"en", "enmkl_svm", cv::ExpandGrid({}, {{"c", {0.1, 10}}, {"mu", {0.5, 1.0}}})},
                                              {"simple", "simplemkl", cv::ExpandGrid({{"c", 1}}, {})},
                                              {"svm", "svm", cv::ExpandGrid({}, {{"c", {0.1, 1}}})}};
  const auto outer = Outer(p.targets);
  const Eigen::MatrixXd design = Eigen::MatrixXd::Random(45, 2);
  for (const int way : {0, 1, 2}) {  // columns in place, copies, covariates
    cv::NestedCvOptions options;
    options.probabilities = true;
    options.preprocessing.kernelGroups = {0, 0, 0, 1, 1, 1};
    options.columnsInPlace = way == 0 ? cv::ColumnsInPlace::Always : cv::ColumnsInPlace::Never;
    options.float32FoldCopies = false;  // float64 copies: the float32 ones round once more (next tests)
    if (way == 2) {
      Eigen::MatrixXd withIntercept(45, 3);
      withIntercept << Eigen::VectorXd::Ones(45), design;
      options.preprocessing.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{withIntercept, {}, {}});
    }
    const auto a = cv::RunNestedCv(gram::MemoryKernels(store), p.targets, outer, Inner(p.targets.task), plans, options);
    const auto b = cv::RunNestedCv(wide, p.targets, outer, Inner(p.targets.task), plans, options);
    for (std::size_t l = 0; l < plans.size(); ++l)
      for (std::size_t f = 0; f < outer.size(); ++f) {
        const auto& x = a[l].folds[f];
        const auto& y = b[l].folds[f];
        ASSERT_TRUE(x.error.empty()) << x.error;
        EXPECT_EQ(x.chosen, y.chosen) << plans[l].label << " way " << way;
        EXPECT_EQ(x.model.beta, y.model.beta) << plans[l].label << " way " << way;
        EXPECT_EQ(x.decision, y.decision) << plans[l].label << " way " << way;
        EXPECT_EQ(x.probability, y.probability) << plans[l].label << " way " << way;
      }
  }
}

TEST(CompactKernels, NestedCvDecisionsAreWithin1e6OfFloat64) {
  // The compact store's aim is decisions within 1e-5 (relative to the largest) of float64; the bound here is 1e-6, ~30x
  // the measured 3.3e-8, so a store that kept less of the kernels (e.g. raw values rounded: fold-kernel errors
  // ~500x larger, see above) would not pass unnoticed. Learners of kernel weights and of the summed kernel,
  // binary and regression, fixed parameters (both runs fit the same ones). Kernels: raw, image-like (mean 10).
  for (const auto task : {learners::Task::Classification, learners::Task::Regression}) {
    const RawProblem p = MakeRawProblem(90, 12, 30, 3, 17, task);
    const gram::CompactKernelList store = gram::CompactKernels(p.kernels, true);
    const bool binary = task == learners::Task::Classification;
    const std::vector<cv::LearnerPlan> plans =
        binary ? std::vector<cv::LearnerPlan>{{"en", "enmkl_svm", cv::ExpandGrid({{"c", 1}, {"mu", 0.5}}, {})},
                                              {"simple", "simplemkl", cv::ExpandGrid({{"c", 1}}, {})},
                                              {"svm", "svm", cv::ExpandGrid({{"c", 1}}, {})}}
               : std::vector<cv::LearnerPlan>{{"en", "enmkl_krr", cv::ExpandGrid({{"lambda", 1}, {"mu", 0.5}}, {})},
                                              {"krr", "krr", cv::ExpandGrid({{"lambda", 1}}, {})}};
    const auto outer = binary ? Outer(p.targets) : cv::MakeFolds({cv::Scheme::KFold, 3, 1}, task, p.targets.y, {}, {}, 21, "outer");
    // Training kernels read in place, copied in float64, copied in float32 (NestedCvOptions::float32FoldCopies:
    // a second rounding, of the prepared values).
    for (const int way : {0, 1, 2}) {
      cv::NestedCvOptions options;
      options.columnsInPlace = way == 0 ? cv::ColumnsInPlace::Always : cv::ColumnsInPlace::Never;
      options.float32FoldCopies = way == 2;
      const auto a = cv::RunNestedCv(gram::MemoryKernels(store), p.targets, outer, Inner(task), plans, options);
      const auto b = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(task), plans, options);
      for (std::size_t l = 0; l < plans.size(); ++l) {
        double largest = 0, diff = 0;
        for (std::size_t f = 0; f < outer.size(); ++f) {
          ASSERT_TRUE(a[l].folds[f].error.empty() && b[l].folds[f].error.empty());
          largest = std::max(largest, b[l].folds[f].decision.cwiseAbs().maxCoeff());
          diff = std::max(diff, (a[l].folds[f].decision - b[l].folds[f].decision).cwiseAbs().maxCoeff());
        }
        std::printf("%s, %s: largest decision difference float32 - float64 %.2e (relative %.2e)\n", plans[l].label.c_str(),
                    way == 0 ? "in place" : way == 1 ? "float64 copies" : "float32 copies", diff, diff / largest);
        EXPECT_LE(diff, 1e-6 * largest) << plans[l].label;
      }
    }
  }
}

TEST(CompactKernels, Float32FoldCopiesAreRoundedCopiesOfTheFloat64Ones) {
  // The float32 copies are the float64 copies rounded once more, for every preparation (fold vectors,
  // source scales, covariates), so an MKL fit on them moves by float32 rounding: decisions and weights
  // within 1e-6 (relative to the largest decision; weights sum to 1), and not equal (the path was taken).
  // Learners of the summed kernel never use them (their runs are equal bit for bit).
  const RawProblem p = MakeRawProblem(60, 6, 20, 2, 23);
  const gram::CompactKernelList store = gram::CompactKernels(p.kernels, true);
  const std::vector<cv::LearnerPlan> plans = {{"en", "enmkl_svm", cv::ExpandGrid({}, {{"c", {0.1, 10}}, {"mu", {0.5}}})},
                                              {"svm", "svm", cv::ExpandGrid({{"c", 1}}, {})}};
  const auto outer = Outer(p.targets);
  Eigen::MatrixXd design(60, 2);
  design << Eigen::VectorXd::Ones(60), Eigen::VectorXd::LinSpaced(60, -1, 1);
  for (const bool covariates : {false, true}) {
    cv::NestedCvOptions options;
    options.columnsInPlace = cv::ColumnsInPlace::Never;
    options.preprocessing.kernelGroups = {0, 0, 0, 1, 1, 1};
    if (covariates) options.preprocessing.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
    options.float32FoldCopies = false;
    const auto a = cv::RunNestedCv(gram::MemoryKernels(store), p.targets, outer, Inner(p.targets.task), plans, options);
    options.float32FoldCopies = true;
    const auto b = cv::RunNestedCv(gram::MemoryKernels(store), p.targets, outer, Inner(p.targets.task), plans, options);
    double largest = 0, diff = 0, betaDiff = 0;
    bool anyDifferent = false;
    for (std::size_t f = 0; f < outer.size(); ++f) {
      const auto& x = a[0].folds[f];
      const auto& y = b[0].folds[f];
      ASSERT_TRUE(x.error.empty() && y.error.empty());
      EXPECT_EQ(x.chosen, y.chosen) << "covariates " << covariates;
      largest = std::max(largest, x.decision.cwiseAbs().maxCoeff());
      diff = std::max(diff, (x.decision - y.decision).cwiseAbs().maxCoeff());
      betaDiff = std::max(betaDiff, (x.model.beta - y.model.beta).cwiseAbs().maxCoeff());
      anyDifferent |= x.decision != y.decision;
      EXPECT_EQ(a[1].folds[f].decision, b[1].folds[f].decision) << "the summed kernel's learner, covariates " << covariates;
    }
    std::printf("covariates %d: float32 copies against float64 copies: decisions %.2e relative, weights %.2e\n", covariates, diff / largest, betaDiff);
    EXPECT_LE(diff, 1e-6 * largest) << "covariates " << covariates;
    EXPECT_LE(betaDiff, 1e-6) << "covariates " << covariates;
    EXPECT_TRUE(anyDifferent) << "covariates " << covariates << ": the float32 copies were not used";
  }
}

TEST(CompactKernels, FoldReadersOfTheStoreAreThoseOfItsWidenedValuesAndCheckTheCentring) {
  // The weights stage and model export read the store through FoldScales, FoldKernelView and SubjectWeights:
  // the same arithmetic on widened values as on float64 kernels, so equal bit for bit; with source scales, with
  // and without covariates. Each refuses a centred store where its centring would not cancel.
  const RawProblem p = MakeRawProblem(30, 4, 6, 1, 29);
  const gram::CompactKernelList store = gram::CompactKernels(p.kernels, true);
  learners::KernelList wide;
  for (const auto& K : store.kernels) wide.push_back(K.cast<double>());
  std::vector<int> train, test;
  for (int i = 0; i < 30; ++i) (i % 5 == 0 ? test : train).push_back(i);
  const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size()));
  Eigen::MatrixXd design(30, 2);
  design << Eigen::VectorXd::Ones(30), Eigen::VectorXd::LinSpaced(30, -1, 1);
  const Eigen::MatrixXd A = Eigen::MatrixXd::Random(tr.size(), 2);
  const gram::FoldModel model{train, test, A.col(0), Eigen::Vector4d(0.1, 0.2, 0.3, 0.4)};
  for (const bool covariates : {false, true}) {
    gram::Preprocessing pre;
    pre.kernelGroups = {0, 0, 1, 1};
    if (covariates) pre.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
    EXPECT_EQ(neuromkl::testing::FoldScalesAt(gram::MemoryKernels(store), tr, te, pre), neuromkl::testing::FoldScalesAt(gram::MemoryKernels(wide), tr, te, pre)) << covariates;
    const gram::MemoryKernels storeKernels(store), wideKernels(wide);
    const auto a = storeKernels.OpenFold(train, test, pre), b = wideKernels.OpenFold(train, test, pre);
    EXPECT_EQ(a->Scales(), b->Scales()) << covariates;
    for (std::size_t r = 0; r < 4; ++r)
      EXPECT_EQ(neuromkl::testing::FoldProducts(*a, r, A, 0.5, 4), neuromkl::testing::FoldProducts(*b, r, A, 0.5, 4)) << covariates << " kernel " << r;
    EXPECT_EQ(storeKernels.SubjectWeights(model, pre), wideKernels.SubjectWeights(model, pre)) << covariates;
  }
  const auto expectRefused = [](const std::string& code, const auto& run) {
    try {
      run();
      ADD_FAILURE() << "expected " << code;
    } catch (const InputError& e) {
      EXPECT_EQ(e.code(), code);
    }
  };
  gram::Preprocessing normaliseOnly;
  normaliseOnly.centre = false;
  normaliseOnly.kernelGroups = {0, 0, 1, 1};
  expectRefused("cv:CentredStoreUncentredFolds", [&] { neuromkl::testing::FoldScalesAt(gram::MemoryKernels(store), tr, te, normaliseOnly); });
  expectRefused("cv:CentredStoreUncentredFolds", [&] { gram::MemoryKernels(store).OpenFold(train, test, normaliseOnly); });
  expectRefused("cv:CentredStoreUncentredFolds", [&] { gram::MemoryKernels(store).SubjectWeights(model, gram::Preprocessing{false, true, nullptr, {}}); });
  // Covariates whose fit drops the intercept for some rows: a dummy equal to the intercept on the training rows.
  Eigen::MatrixXd aliased(30, 2);
  for (int i = 0; i < 30; ++i) aliased.row(i) << 1.0, i % 5 == 0 ? 0.0 : 1.0;  // the test rows are the other level
  gram::Preprocessing withAliased;
  withAliased.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{aliased, {}, {}});
  expectRefused("cv:CentredStoreCovariates", [&] { neuromkl::testing::FoldScalesAt(gram::MemoryKernels(store), tr, te, withAliased); });
  expectRefused("cv:CentredStoreCovariates", [&] { gram::MemoryKernels(store).OpenFold(train, test, withAliased); });
  expectRefused("cv:CentredStoreCovariates", [&] { gram::MemoryKernels(store).SubjectWeights(model, withAliased); });
  // A raw store has nothing to cancel: every reader accepts it.
  const gram::CompactKernelList raw = gram::CompactKernels(p.kernels, false);
  EXPECT_NO_THROW(gram::MemoryKernels(raw).OpenFold(train, test, withAliased));
  EXPECT_NO_THROW(gram::MemoryKernels(raw).SubjectWeights(model, gram::Preprocessing{false, true, nullptr, {}}));
}

TEST(CompactKernels, ACentredStoreNeedsFoldsThatUndoTheShift) {
  // A store centred with the whole cohort's mean is exact only under fold centring or covariates that keep the
  // intercept in every row. Without either, every entry point refuses it; made without centring, it runs.
  const RawProblem p = MakeRawProblem(30, 2, 5, 1, 19);
  const gram::CompactKernelList centred = gram::CompactKernels(p.kernels, true), raw = gram::CompactKernels(p.kernels, false);
  gram::Preprocessing normaliseOnly;
  normaliseOnly.centre = false;
  const auto outer = Outer(p.targets);
  const std::vector<cv::LearnerPlan> plans = {{"svm", "svm", cv::ExpandGrid({{"c", 1}}, {})}};
  cv::NestedCvOptions options;
  options.preprocessing = normaliseOnly;
  const auto expectRefused = [](const auto& call) {
    try {
      call();
      ADD_FAILURE() << "expected cv:CentredStoreUncentredFolds";
    } catch (const InputError& e) {
      EXPECT_EQ(e.code(), "cv:CentredStoreUncentredFolds");
      EXPECT_NE(std::string(e.what()).find("make the store without centring"), std::string::npos) << e.what();
    }
  };
  expectRefused([&] { cv::RunNestedCv(gram::MemoryKernels(centred), p.targets, outer, Inner(p.targets.task), plans, options); });
  expectRefused([&] { neuromkl::testing::SummedFold(gram::MemoryKernels(centred), outer[0].train, outer[0].test, normaliseOnly); });
  gram::FoldKernels copies;
  expectRefused([&] { neuromkl::testing::PrepareFoldInto(gram::MemoryKernels(centred), outer[0].train, outer[0].test, normaliseOnly, copies); });
  const auto res = cv::RunNestedCv(gram::MemoryKernels(raw), p.targets, outer, Inner(p.targets.task), plans, options);
  EXPECT_TRUE(res[0].folds[0].error.empty());
}

TEST(CompactKernels, CovariatesOnACentredStoreMatchFloat64OrAreRefused) {
  // Intercept and a two-level category (dummy = 1 for level B). Fit rows with both levels: residualising keeps
  // the intercept in every row, the store's centring cancels, and the fold kernels equal those of the raw
  // float64 kernels to float32 rounding (1e-6 of entries in [-1, 1]). Training rows of level B only: the dummy
  // equals the intercept on them, the pseudo-inverse splits the intercept between the two, a level-A test row
  // keeps half of it, and the centring would not cancel: refused.
  const RawProblem p = MakeRawProblem(24, 2, 6, 0, 23);
  const gram::CompactKernelList store = gram::CompactKernels(p.kernels, true);
  Eigen::MatrixXd design(24, 2);
  for (int i = 0; i < 24; ++i) design.row(i) << 1.0, i % 3 == 0 ? 0.0 : 1.0;  // level A: every third subject
  gram::Preprocessing pre;
  pre.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
  std::vector<int> train, test;
  for (int i = 0; i < 24; ++i) (i % 4 == 0 ? test : train).push_back(i);
  gram::FoldKernels fromStore, fromFloat64;
  neuromkl::testing::PrepareFoldInto(gram::MemoryKernels(store), train, test, pre, fromStore);
  neuromkl::testing::PrepareFoldInto(gram::MemoryKernels(p.kernels), train, test, pre, fromFloat64);
  for (std::size_t j = 0; j < 2; ++j) {
    EXPECT_LE((fromStore.train[j] - fromFloat64.train[j]).cwiseAbs().maxCoeff(), 1e-6) << j;
    EXPECT_LE((fromStore.test[j] - fromFloat64.test[j]).cwiseAbs().maxCoeff(), 1e-6) << j;
  }
  std::vector<int> levelB, levelA;
  for (int i = 0; i < 24; ++i) (i % 3 == 0 ? levelA : levelB).push_back(i);
  try {
    neuromkl::testing::PrepareFoldInto(gram::MemoryKernels(store), levelB, levelA, pre, fromStore);
    ADD_FAILURE() << "expected cv:CentredStoreCovariates";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "cv:CentredStoreCovariates");
  }
  EXPECT_NO_THROW(neuromkl::testing::PrepareFoldInto(gram::MemoryKernels(gram::CompactKernels(p.kernels, false)), levelB, levelA, pre, fromStore));
}

}  // namespace
