// The learners of kernel weights fit training kernels given as columns (FitOptions::columns,
// what nested CV hands them instead of fold copies) exactly as they fit the matrices the columns describe.
#include <atomic>
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "inner.hpp"
#include "stacks.hpp"
#include "learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using ::testing::HasSubstr;
using neuromkl::testing::MakeMklProblem;

namespace {

/// The upper triangles of matrices, given column by column: what a learner reads of a KernelList.
class MatrixColumns final : public gram::KernelColumns {
 public:
  explicit MatrixColumns(const learners::KernelList& kernels) : kernels_(kernels) {}
  Eigen::Index Count() const override { return static_cast<Eigen::Index>(kernels_.size()); }
  Eigen::Index Size() const override { return kernels_.empty() ? 0 : kernels_[0].rows(); }
  void UpperColumn(Eigen::Index k, Eigen::Index j, double* out) const override {
    const Eigen::MatrixXd& K = kernels_[static_cast<std::size_t>(k)];
    for (Eigen::Index i = 0; i <= j; ++i) out[i] = K(i, j);
    ++reads;
  }
  mutable std::atomic<long> reads{0};

 private:
  const learners::KernelList& kernels_;
};

// Both modes of the stack: packed (n = 300 < kViewFrom, built from the columns) and read through the
// columns as needed (n = 1100).
class ColumnStackModes : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(PackedAndView, ColumnStackModes, ::testing::Values(300, 1100));

/// Every operation of two stacks of six kernels over n subjects, bit for bit, at coefficients drawn with
/// `seed` (two columns, every third row zero); returns the first column (a vector of coefficients).
Eigen::VectorXd ExpectSameOperations(const gram::KernelStack& x, const gram::KernelStack& y, Eigen::Index n, unsigned seed) {
  EXPECT_EQ(neuromkl::testing::IsPackedStack(x), neuromkl::testing::IsPackedStack(y));
  EXPECT_EQ(x.Size(), 6);
  Eigen::VectorXd w(6);
  w << 0.3, 0.0, 1.7, 0.25, 1e-3, 0.9;  // six kernels: one group of four and a tail of one (kernel 1 unused)
  EXPECT_EQ(x.Combine(w), y.Combine(w));
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd A(n, 2);
  for (Eigen::Index i = 0; i < A.size(); ++i) A.data()[i] = normal(rng);
  for (Eigen::Index i = 0; i < n; i += 3) A.row(i).setZero();
  const auto nonzero = gram::NonZeroRows(A);
  const Eigen::VectorXd a = A.col(0);
  EXPECT_EQ(x.Quadratics(a), y.Quadratics(a));
  const std::vector<Eigen::Index> which{0, 3, 5};
  EXPECT_EQ(x.Products(which, a), y.Products(which, a));
  for (Eigen::Index k = 0; k < 6; ++k) {
    EXPECT_EQ(x.Form(A)->Value(k), y.Form(A)->Value(k)) << k;
    EXPECT_EQ(x.RootSpectralBound(k), y.RootSpectralBound(k)) << k;
  }
  return a;
}

TEST_P(ColumnStackModes, EveryOperationEqualsTheMatrixStackBitForBit) {
  const int n = GetParam();
  const auto p = MakeMklProblem(n, 6, {0, 2}, 1.0, 21);
  const MatrixColumns columns(p.kernels);
  const auto fromMatricesStack = gram::MakeStack(p.kernels), fromColumnsStack = columns.Stack();
  const gram::KernelStack &fromMatrices = *fromMatricesStack, &fromColumns = *fromColumnsStack;
  const Eigen::VectorXd a = ExpectSameOperations(fromColumns, fromMatrices, n, 5);
  // And the product is the kernel's (upper triangle mirrored) times the vector, to rounding: n products
  // of order-1 terms, 1e-12 of the result's scale is ~100x their rounding.
  const Eigen::MatrixXd K = p.kernels[3].selfadjointView<Eigen::Upper>();
  const Eigen::VectorXd dense = K * a;
  EXPECT_LE((fromColumns.Products({3}, a).col(0) - dense).cwiseAbs().maxCoeff(), 1e-12 * dense.cwiseAbs().maxCoeff());
}

learners::Model FitOn(const std::string& learner, const learners::ParamMap& params, const learners::KernelList& kernels,
                      const learners::Targets& t, bool asColumns, learners::MulticlassWeights mode = learners::MulticlassWeights::Shared) {
  const auto l = learners::MakeLearner(learner, params, mode);
  if (!asColumns) return l->Fit(kernels, t);
  const MatrixColumns columns(kernels);
  learners::TrainingKernelCache cache;  // as nested CV passes them: columns with a cache
  learners::FitOptions options;
  options.cache = &cache;
  options.kernels = &columns;
  return l->Fit({}, t, options);
}

void ExpectSameModel(const learners::Model& x, const learners::Model& y, const std::string& what) {
  EXPECT_EQ(x.beta, y.beta) << what;
  EXPECT_EQ(x.coef, y.coef) << what;
  EXPECT_EQ(x.bias, y.bias) << what;
  EXPECT_EQ(x.coefs, y.coefs) << what;
  EXPECT_EQ(x.biases, y.biases) << what;
  EXPECT_EQ(x.betas, y.betas) << what;
  EXPECT_EQ(x.info.iterations, y.info.iterations) << what;
}

TEST(KernelColumns, EveryLearnerOfKernelWeightsFitsColumnsAsItFitsTheMatrices) {
  // Same values, same operations in the same order: the same path and model bit for bit.
  const auto p = MakeMklProblem(60, 5, {1, 3}, 0.8, 23);
  auto regression = MakeMklProblem(60, 5, {1, 3}, 0.8, 24, learners::Task::Regression);
  learners::Targets multiclass{learners::Task::Multiclass, Eigen::VectorXd(60), 3};
  for (int i = 0; i < 60; ++i) multiclass.y[i] = i % 3;
  int checked = 0;
  for (const auto& info : learners::LearnerCatalog()) {
    if (!info.multipleKernels) {
      EXPECT_FALSE(info.kernelsInPlace) << info.name;
      continue;
    }
    ASSERT_TRUE(info.kernelsInPlace) << info.name;
    const learners::ParamMap use = info.name == "enmkl_krr" ? learners::ParamMap{{"lambda", 0.1}} : learners::ParamMap{{"c", 10}};
    if (info.classification) {
      ExpectSameModel(FitOn(info.name, use, p.kernels, p.targets, true), FitOn(info.name, use, p.kernels, p.targets, false), info.name + " binary");
      for (const auto mode : {learners::MulticlassWeights::Shared, learners::MulticlassWeights::PerClass})
        ExpectSameModel(FitOn(info.name, use, p.kernels, multiclass, true, mode), FitOn(info.name, use, p.kernels, multiclass, false, mode),
                        info.name + " multiclass");
    }
    if (info.regression)
      ExpectSameModel(FitOn(info.name, use, regression.kernels, regression.targets, true),
                      FitOn(info.name, use, regression.kernels, regression.targets, false), info.name + " regression");
    ++checked;
  }
  EXPECT_EQ(checked, 5);  // enmkl_svm, enmkl_krr, simplemkl, mkelm, mkl_bp
}

TEST(KernelColumns, EnmklReadsLargeKernelsThroughTheColumnsAsThroughTheMatrices) {
  // From kViewFrom subjects the stack reads the columns as it goes (no packed store): the same fit.
  const auto p = MakeMklProblem(static_cast<int>(gram::kPackedStackBelow) + 30, 3, {0}, 0.5, 25);
  ExpectSameModel(FitOn("enmkl_svm", {{"c", 1}}, p.kernels, p.targets, true), FitOn("enmkl_svm", {{"c", 1}}, p.kernels, p.targets, false),
                  "enmkl_svm, view stack");
}

TEST(KernelColumns, BadColumnsGetClearErrors) {
  auto p = MakeMklProblem(30, 3, {0}, 1.0, 26);
  const MatrixColumns columns(p.kernels);
  learners::FitOptions options;
  options.kernels = &columns;
  const auto expectError = [&](const std::string& learner, const learners::KernelList& train, const learners::Targets& t, const char* code,
                               const char* message) {
    try {
      learners::MakeLearner(learner, {})->Fit(train, t, options);
      ADD_FAILURE() << learner << ": expected " << code;
    } catch (const InputError& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_THAT(e.what(), HasSubstr(message));
    }
  };
  // A learner of the summed kernel needs matrices.
  expectError("svm", {}, p.targets, "learners:ColumnsUnsupported", "needs its training kernels as matrices");
  // Both at once is ambiguous.
  expectError("enmkl_svm", p.kernels, p.targets, "learners:KernelsTwice", "got 3 matrices and kernels in place");
  // Targets for another number of subjects.
  learners::Targets shorter{p.targets.task, p.targets.y.head(20)};
  expectError("enmkl_svm", {}, shorter, "learners:KernelShape", "training kernels are 30x30, expected 20x20");
  // A non-finite entry in the upper triangle of kernel 2 is found and named.
  p.kernels[2](4, 17) = std::numeric_limits<double>::infinity();
  expectError("simplemkl", {}, p.targets, "learners:NonFiniteKernel", "training kernel 2 has NaN or infinite entries");
}

TEST(KernelColumns, AFitsCheckAndStackAreSharedThroughTheCache) {
  // Nested CV fits a grid on one fold's columns: the finiteness check and the stack are made once.
  const auto p = MakeMklProblem(40, 4, {0}, 1.0, 27);
  const MatrixColumns columns(p.kernels);
  learners::TrainingKernelCache cache;
  learners::FitOptions options;
  options.cache = &cache;
  options.kernels = &columns;
  for (const double c : {0.1, 1.0, 10.0}) learners::MakeLearner("enmkl_svm", {{"c", c}})->Fit({}, p.targets, options);
  EXPECT_EQ(cache.checksRun(), 1);
  EXPECT_EQ(cache.stacksBuilt(), 1);
  EXPECT_GT(columns.reads, 0);
}

TEST(TestBlocks, DecisionsFromBlocksHandedOverOneAtATimeEqualTheHeldBlocks) {
  // Binary, multiclass with shared and with per-class weights: the same sums in the same order. Only the
  // blocks of kernels with a weight are asked for; shapes and counts are checked as for a list.
  const auto p = MakeMklProblem(50, 4, {1}, 3.0, 28);
  learners::KernelList train, test;
  for (const auto& K : p.kernels) {
    train.push_back(K.topLeftCorner(40, 40));
    test.push_back(K.bottomLeftCorner(10, 40));
  }
  const learners::Targets binary{learners::Task::Classification, p.targets.y.head(40)};
  learners::Targets multiclass{learners::Task::Multiclass, Eigen::VectorXd(40), 3};
  for (int i = 0; i < 40; ++i) multiclass.y[i] = i % 3;
  std::vector<Eigen::Index> asked;
  Eigen::MatrixXd buffer;
  const gram::TestBlocks oneAtATime{4, 10,
                                        [&](Eigen::Index j) -> const Eigen::MatrixXd& {
                                          asked.push_back(j);
                                          buffer = test[static_cast<std::size_t>(j)];
                                          return buffer;
                                        },
                                        {}};
  // Blocks held elsewhere (kernels held by several owners): only their products with the coefficients come back,
  // computed with TestProduct in the form the decision asks for; the decisions are those of the held blocks bit for bit.
  std::vector<int> forms;
  const gram::TestBlocks productsOnly{4, 10, [&](Eigen::Index) -> const Eigen::MatrixXd& { throw std::logic_error("no block here"); },
                                          [&](const std::vector<Eigen::Index>& which, const Eigen::MatrixXd& C, int form) {
                                            forms.push_back(form);
                                            std::vector<Eigen::MatrixXd> P;
                                            for (const auto j : which) P.push_back(gram::TestProduct(test[static_cast<std::size_t>(j)], C, form));
                                            return P;
                                          }};
  const auto model = learners::MakeLearner("enmkl_svm", {{"c", 1}, {"mu", 1}})->Fit(train, binary);
  ASSERT_LT((model.beta.array() > 0).count(), 4);  // mu = 1 is sparse here: some blocks are never needed
  EXPECT_EQ(model.Decision(oneAtATime), model.Decision(test));
  EXPECT_EQ(static_cast<Eigen::Index>(asked.size()), (model.beta.array() != 0).count());
  EXPECT_EQ(model.Decision(productsOnly), model.Decision(test));
  for (const auto mode : {learners::MulticlassWeights::Shared, learners::MulticlassWeights::PerClass}) {
    const auto m = learners::MakeLearner("enmkl_svm", {{"c", 10}}, mode)->Fit(train, multiclass);
    EXPECT_EQ(m.Scores(oneAtATime), m.Scores(test));
    EXPECT_EQ(m.Scores(productsOnly), m.Scores(test));
  }
  EXPECT_EQ(forms, (std::vector<int>{gram::kProductVector, gram::kProductMatrix, gram::kProductColumns}));
  const gram::TestBlocks tooFew{3, 10, oneAtATime.block, {}};
  EXPECT_THROW(model.Decision(tooFew), InputError);
  const Eigen::MatrixXd wrong = Eigen::MatrixXd::Zero(10, 39);
  const gram::TestBlocks misshapen{4, 10, [&](Eigen::Index) -> const Eigen::MatrixXd& { return wrong; }, {}};
  try {
    model.Decision(misshapen);
    ADD_FAILURE() << "expected learners:TestShape";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "learners:TestShape");
    EXPECT_THAT(e.what(), HasSubstr("is 10x39, expected 10x40"));
  }
}

TEST(TestBlocks, DecisionPartsAreEachKernelsProductAndAddUpToTheDecision) {
  // Transcribed: part_ij = beta_j (K_j(test, train) coef)_i, 0 for a kernel without weight; bias + the row = decision.
  const auto p = MakeMklProblem(50, 4, {1, 3}, 3.0, 29);
  learners::KernelList train, test;
  for (const auto& K : p.kernels) {
    train.push_back(K.topLeftCorner(40, 40));
    test.push_back(K.bottomLeftCorner(10, 40));
  }
  const learners::Targets binary{learners::Task::Classification, p.targets.y.head(40)};
  for (const double mu : {0.3, 1.0}) {
    const auto model = learners::MakeLearner("enmkl_svm", {{"c", 1}, {"mu", mu}})->Fit(train, binary);
    const Eigen::MatrixXd parts = model.DecisionParts(gram::HeldBlocks(test));
    ASSERT_EQ(parts.rows(), 10);
    ASSERT_EQ(parts.cols(), 4);
    for (std::size_t j = 0; j < 4; ++j) {
      const auto jj = static_cast<Eigen::Index>(j);
      const Eigen::VectorXd expected = model.beta[jj] == 0 ? Eigen::VectorXd::Zero(10) : Eigen::VectorXd(model.beta[jj] * (test[j] * model.coef));
      // the same products, up to the order of the matrix-vector sums
      EXPECT_LE((parts.col(jj) - expected).cwiseAbs().maxCoeff(), 1e-13 * std::max(1.0, expected.cwiseAbs().maxCoeff())) << "kernel " << j;
    }
    const Eigen::VectorXd decision = model.Decision(test);
    // Decision adds the same parts in the same order (fused multiply-adds at most): rounding only.
    EXPECT_LE(((parts.rowwise().sum().array() + model.bias).matrix() - decision).cwiseAbs().maxCoeff(), 1e-13 * std::max(1.0, decision.cwiseAbs().maxCoeff()));
  }
  learners::Targets multiclass{learners::Task::Multiclass, Eigen::VectorXd(40), 3};
  for (int i = 0; i < 40; ++i) multiclass.y[i] = i % 3;
  const auto m = learners::MakeLearner("enmkl_svm", {{"c", 10}})->Fit(train, multiclass);
  EXPECT_THROW(m.DecisionParts(gram::HeldBlocks(test)), InputError);
}

}  // namespace

// Float32 training kernels (gram::Float32Columns, the compact store's precision): below kPackedStackBelow the
// stack packs their values widened to double; from it the stack reads the float32 columns in place for the
// combination and the quadratics, widening each value as it is read, in the sums and order of the float64
// path. Either way every operation is the widened kernels' bit for bit.
namespace {
std::vector<Eigen::MatrixXf> Rounded(const learners::KernelList& kernels) {
  std::vector<Eigen::MatrixXf> out;
  for (const auto& K : kernels) out.push_back(K.cast<float>());
  return out;
}
learners::KernelList Widened(const std::vector<Eigen::MatrixXf>& kernels) {
  learners::KernelList out;
  for (const auto& K : kernels) out.push_back(K.cast<double>());
  return out;
}
}  // namespace

TEST_P(ColumnStackModes, Float32ColumnsGiveTheWidenedKernelsStack) {
  const int n = GetParam();
  const auto store = Rounded(MakeMklProblem(n, 6, {0, 2}, 1.0, 31).kernels);
  const learners::KernelList wide = Widened(store);
  const gram::Float32Columns columns(store);
  const auto fromFloatStack = columns.Stack(), fromWideStack = gram::MakeStack(wide);
  const gram::KernelStack &fromFloat = *fromFloatStack, &fromWide = *fromWideStack;
  EXPECT_EQ(neuromkl::testing::IsPackedStack(fromFloat), n < gram::kPackedStackBelow);
  ExpectSameOperations(fromFloat, fromWide, n, 7);
  if (n < gram::kPackedStackBelow) return;
  // The view's two ways of reading float32 kernels: in place (the combination and the quadratics read the float32
  // values, Float32Columns' stack) and through the widened columns; both are the widened kernels' bit for bit.
  const gram::detail::ViewStack inPlace(columns, &store), throughColumns(columns);
  ExpectSameOperations(inPlace, fromWide, n, 8);
  ExpectSameOperations(throughColumns, fromWide, n, 8);
}

TEST(Float32Columns, LearnersFitThemAsTheWidenedKernels) {
  // Packed (n = 60): every learner of kernel weights (ENMKL-KRR on a regression target); then ENMKL-SVM on a
  // view stack: the same model bit for bit.
  const auto p = MakeMklProblem(60, 5, {1, 3}, 0.8, 33);
  const auto store = Rounded(p.kernels);
  const learners::KernelList wide = Widened(store);
  const gram::Float32Columns columns(store);
  learners::FitOptions options;
  options.kernels = &columns;
  for (const char* name : {"enmkl_svm", "simplemkl", "mkelm", "mkl_bp"}) {
    const auto l = learners::MakeLearner(name, {{"c", 10}});
    ExpectSameModel(l->Fit({}, p.targets, options), l->Fit(wide, p.targets), name);
  }
  const auto r = MakeMklProblem(60, 5, {1, 3}, 0.8, 34, learners::Task::Regression);
  const auto rStore = Rounded(r.kernels);
  const gram::Float32Columns rColumns(rStore);
  learners::FitOptions rOptions;
  rOptions.kernels = &rColumns;
  const auto krr = learners::MakeLearner("enmkl_krr", {{"lambda", 0.1}});
  ExpectSameModel(krr->Fit({}, r.targets, rOptions), krr->Fit(Widened(rStore), r.targets), "enmkl_krr");
  const auto q = MakeMklProblem(static_cast<int>(gram::kPackedStackBelow) + 30, 4, {0, 2}, 0.5, 35);
  const auto big = Rounded(q.kernels);
  const gram::Float32Columns bigColumns(big);
  learners::FitOptions bigOptions;
  bigOptions.kernels = &bigColumns;
  const auto l = learners::MakeLearner("enmkl_svm", {{"c", 1}, {"mu", 0.5}});
  ExpectSameModel(l->Fit({}, q.targets, bigOptions), l->Fit(Widened(big), q.targets), "enmkl_svm, view stack");
}
