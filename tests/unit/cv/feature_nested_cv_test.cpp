// Nested CV on a study's kernels in feature form (gram::MakeFeatureKernels) against the same kernels formed: the same
// grid points chosen in every outer fold, the same decisions, and the store's other answers (products, subject weights
// for the maps, the zero-norm floor) equal to the kernel store's.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/cv/splits.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/residualise.hpp"

using namespace neuromkl;

namespace {

/// 90 subjects, 8 regions of 6-40 voxels like grey-matter fractions; regions 1 and 5 carry the label (classification)
/// and a score (regression) in half their voxels.
struct Cohort {
  std::shared_ptr<gram::FeatureMatrix> x = std::make_shared<gram::FeatureMatrix>();
  Eigen::VectorXd label, score;
};
Cohort MakeCohort(int n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.2f, 0.8f);
  std::normal_distribution<double> normal(0.0, 1.0);
  Cohort c;
  c.x->regionStart = {0};
  for (const Eigen::Index size : {12, 30, 6, 40, 18, 25, 9, 20}) c.x->regionStart.push_back(c.x->regionStart.back() + size);
  c.x->values.resize(n, c.x->regionStart.back());
  c.label.resize(n);
  c.score.resize(n);
  for (int i = 0; i < n; ++i) {
    c.label[i] = i % 2 ? 1.0 : -1.0;
    c.score[i] = normal(rng);
    for (Eigen::Index j = 0; j < c.x->Voxels(); ++j) c.x->values(i, j) = uniform(rng);
    for (const std::size_t r : {std::size_t{1}, std::size_t{5}})
      for (Eigen::Index j = 0; j < c.x->RegionSize(r) / 2; ++j)
        c.x->values(i, c.x->regionStart[r] + j) += static_cast<float>(0.05 * c.label[i] + 0.06 * c.score[i]);
  }
  return c;
}

/// Covariates of n subjects: an intercept, a numeric column that tracks region 1's signal voxels (so that removing it
/// changes the kernels), and a three-level categorical covariate (two dummies); one subject's numeric value and another's
/// category missing (NaN: imputed in every fold from its training rows). `fitOn`: only the even subjects fit the
/// coefficients (fit_on).
std::shared_ptr<const gram::Covariates> MakeCovariates(const Cohort& c, bool fitOn) {
  const Eigen::Index n = c.x->Subjects();
  auto cov = std::make_shared<gram::Covariates>();
  cov->design.resize(n, 4);
  cov->categoryOf = {-1, -1, 0, 0};
  for (Eigen::Index i = 0; i < n; ++i) {
    const int level = static_cast<int>((i * 7) % 3);
    cov->design.row(i) << 1.0, 60.0 + 30.0 * static_cast<double>(c.x->values(i, c.x->regionStart[1])) + 0.1 * static_cast<double>(i % 5), level == 1 ? 1.0 : 0.0,
        level == 2 ? 1.0 : 0.0;
    if (fitOn) cov->fitRow.push_back(i % 2 == 0 ? 1 : 0);
  }
  cov->design(3, 1) = std::nan("");
  cov->design(10, 2) = cov->design(10, 3) = std::nan("");
  return cov;
}

learners::KernelList Formed(const gram::FeatureMatrix& x) {
  learners::KernelList k;
  for (std::size_t r = 0; r < x.Regions(); ++r) k.push_back(x.RegionKernel(r));
  return k;
}

cv::InnerSplitter Inner(learners::Task task) {
  return [task](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({task == learners::Task::Classification ? cv::Scheme::StratifiedKFold : cv::Scheme::KFold, 3, 1}, task, y, {}, {}, 50 + f, "inner");
  };
}

}  // namespace

// Tolerances: the solvers stop at 1e-10 on both paths, so decisions agree to ~1e-8 of the largest (asserted at 1e-6);
// the inner scores are metrics of such decisions, so the chosen grid point is the same unless two points tie within
// that, which these grids do not.
TEST(FeatureNestedCv, ChoosesTheSameParametersAndPredictsTheSameAsTheKernels) {
  const Cohort c = MakeCohort(90, 31);
  const learners::KernelList kernels = Formed(*c.x);
  const auto features = gram::MakeFeatureKernels(c.x);
  for (const learners::Task task : {learners::Task::Classification, learners::Task::Regression}) {
    learners::Targets t;
    t.task = task;
    t.y = task == learners::Task::Classification ? c.label : c.score;
    const auto outer = cv::MakeFolds({task == learners::Task::Classification ? cv::Scheme::StratifiedKFold : cv::Scheme::KFold, 3, 1}, task, t.y, {}, {}, 7,
                                     "outer");
    std::vector<cv::LearnerPlan> plans = {
        {"enkrr", "enmkl_krr", cv::ExpandGrid({{"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, {{"lambda", {0.1, 10}}, {"mu", {0.3, 0.9}}})},
        {"krr", "krr", cv::ExpandGrid({}, {{"lambda", {0.01, 1, 100}}})}};
    if (task == learners::Task::Classification) {
      plans.push_back({"svm", "svm", cv::ExpandGrid({{"tolerance", 1e-10}}, {{"c", {0.01, 1, 100}}})});
      plans.push_back({"en", "enmkl_svm", cv::ExpandGrid({{"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}},
                                                         {{"c", {0.1, 10}}, {"mu", {0.3, 0.9}}})});
      plans.push_back({"simple", "simplemkl", cv::ExpandGrid({{"svm_tolerance", 1e-10}, {"gap_tolerance", 1e-9}, {"max_iterations", 5000}}, {{"c", {0.1, 10}}})});
    }
    const auto expected = cv::RunNestedCv(kernels, t, outer, Inner(task), plans, {});
    const auto found = cv::RunNestedCv(*features, t, outer, Inner(task), plans, {});
    ASSERT_EQ(found.size(), expected.size());
    for (std::size_t l = 0; l < found.size(); ++l) {
      ASSERT_EQ(found[l].folds.size(), expected[l].folds.size());
      for (std::size_t f = 0; f < found[l].folds.size(); ++f) {
        const auto& a = found[l].folds[f];
        const auto& b = expected[l].folds[f];
        ASSERT_TRUE(a.error.empty()) << a.error;
        EXPECT_EQ(a.chosen, b.chosen) << found[l].label << " fold " << f;
        const double scale = b.decision.cwiseAbs().maxCoeff();
        EXPECT_LT((a.decision - b.decision).cwiseAbs().maxCoeff() / scale, 1e-6) << found[l].label << " fold " << f;
        EXPECT_LT((a.model.beta - b.model.beta).cwiseAbs().maxCoeff(), 1e-5) << found[l].label << " fold " << f;
      }
    }
  }
}

// A store whose budget holds a fold's kernels forms them (each row centred with the training mean, products in double)
// and fits the kernel learners on them: the same chosen points and, since the kernels differ from the formed ones by
// rounding only (~1e-15 relative) and the solvers stop at 1e-10, decisions within 1e-8 and weights within 1e-7.
TEST(FeatureNestedCv, FoldsWithinTheBudgetFormTheirKernels) {
  const Cohort c = MakeCohort(90, 32);
  const learners::KernelList kernels = Formed(*c.x);
  const auto formed = gram::MakeFeatureKernels(c.x, std::uint64_t{1} << 30);
  const std::vector<int> train = {0, 1, 2, 3, 4, 5, 6, 7}, test = {8, 9};
  EXPECT_EQ(formed->OpenFold(train, test, {})->Features(), nullptr) << "a fold within the budget is a fold of kernels";
  EXPECT_NE(gram::MakeFeatureKernels(c.x, 100)->OpenFold(train, test, {})->Features(), nullptr) << "one beyond it is a fold of features";
  learners::Targets t;
  t.task = learners::Task::Classification;
  t.y = c.label;
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, t.task, t.y, {}, {}, 8, "outer");
  const std::vector<cv::LearnerPlan> plans = {
      {"svm", "svm", cv::ExpandGrid({{"tolerance", 1e-10}}, {{"c", {0.01, 1, 100}}})},
      {"en", "enmkl_svm", cv::ExpandGrid({{"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, {{"c", {0.1, 10}}, {"mu", {0.3, 0.9}}})}};
  const auto expected = cv::RunNestedCv(kernels, t, outer, Inner(t.task), plans, {});
  const auto found = cv::RunNestedCv(*formed, t, outer, Inner(t.task), plans, {});
  ASSERT_EQ(found.size(), expected.size());
  for (std::size_t l = 0; l < found.size(); ++l)
    for (std::size_t f = 0; f < found[l].folds.size(); ++f) {
      const auto& a = found[l].folds[f];
      const auto& b = expected[l].folds.at(f);
      ASSERT_TRUE(a.error.empty()) << a.error;
      EXPECT_EQ(a.chosen, b.chosen) << found[l].label << " fold " << f;
      EXPECT_LT((a.decision - b.decision).cwiseAbs().maxCoeff() / b.decision.cwiseAbs().maxCoeff(), 1e-8) << found[l].label << " fold " << f;
      EXPECT_LT((a.model.beta - b.model.beta).cwiseAbs().maxCoeff(), 1e-7) << found[l].label << " fold " << f;
    }
  // A budget between the two fold sizes (inner folds of 60 rows: 8 x 60^2 x 8 = 230 kB; outer folds of 90: 518 kB):
  // the grid is searched on formed inner folds, the outer refits run on the features. The tolerances of the first test.
  const auto mixed = gram::MakeFeatureKernels(c.x, 300000);
  const auto both = cv::RunNestedCv(*mixed, t, outer, Inner(t.task), plans, {});
  for (std::size_t l = 0; l < both.size(); ++l)
    for (std::size_t f = 0; f < both[l].folds.size(); ++f) {
      const auto& a = both[l].folds[f];
      const auto& b = expected[l].folds.at(f);
      ASSERT_TRUE(a.error.empty()) << a.error;
      EXPECT_EQ(a.chosen, b.chosen) << "mixed " << both[l].label << " fold " << f;
      EXPECT_LT((a.decision - b.decision).cwiseAbs().maxCoeff() / b.decision.cwiseAbs().maxCoeff(), 1e-6) << "mixed " << both[l].label << " fold " << f;
      EXPECT_LT((a.model.beta - b.model.beta).cwiseAbs().maxCoeff(), 1e-5) << "mixed " << both[l].label << " fold " << f;
    }
}

// The store's answers besides the fits: the fold's products K~_r A, the subject weights of a fold model (the voxel maps'
// arithmetic) and the largest centred self-similarities (the exported model's zero-norm floor) equal the kernel store's.
// Sums in double of float inputs in another order: 1e-10 relative.
TEST(FeatureNestedCv, StoreAnswersEqualTheKernelStores) {
  const Cohort c = MakeCohort(40, 37);
  const learners::KernelList kernels = Formed(*c.x);
  const gram::MemoryKernels formed(kernels);
  const auto features = gram::MakeFeatureKernels(c.x);
  std::vector<int> train, test;
  for (int i = 0; i < 40; ++i) (i % 5 == 0 ? test : train).push_back(i);
  const gram::Preprocessing pre;
  const auto a = features->OpenFold(train, test, pre);
  const auto b = formed.OpenFold(train, test, pre);
  ASSERT_NE(a->Features(), nullptr);
  EXPECT_EQ(b->Features(), nullptr);
  const Eigen::MatrixXd A = Eigen::MatrixXd::Random(static_cast<Eigen::Index>(train.size()), 3);
  const std::vector<std::size_t> which = {0, 3, 7};
  const Eigen::VectorXd scales = Eigen::VectorXd::LinSpaced(8, 1.0, 2.0);
  const auto pa = a->Products(which, A, scales), pb = b->Products(which, A, scales);
  for (std::size_t i = 0; i < which.size(); ++i) EXPECT_LT((pa[i] - pb[i]).cwiseAbs().maxCoeff(), 1e-10 * pb[i].cwiseAbs().maxCoeff()) << which[i];
  gram::FoldModel model;
  model.train = train;
  model.test = test;
  model.coef = Eigen::VectorXd::LinSpaced(static_cast<Eigen::Index>(train.size()), -1.0, 1.5);
  model.beta = Eigen::VectorXd::LinSpaced(8, 0.05, 0.2);
  for (const bool normalise : {true, false}) {
    gram::Preprocessing p;
    p.normalise = normalise;
    const Eigen::MatrixXd da = features->SubjectWeights(model, p), db = formed.SubjectWeights(model, p);
    EXPECT_LT((da - db).cwiseAbs().maxCoeff(), 1e-10 * db.cwiseAbs().maxCoeff()) << "normalise " << normalise;
  }
  const Eigen::VectorXd la = features->LargestCentredSelfSimilarities(train, pre), lb = formed.LargestCentredSelfSimilarities(train, pre);
  EXPECT_LT((la - lb).cwiseAbs().maxCoeff(), 1e-10 * lb.cwiseAbs().maxCoeff());
  // A subset keeps the regions asked for, in that order.
  const auto part = features->Subset({5, 1});
  ASSERT_EQ(part->Count(), 2u);
  const auto partFold = part->OpenFold(train, test, pre);
  const auto pp = partFold->Products({0, 1}, A, {});
  const auto pf = a->Products({5, 1}, A, {});
  EXPECT_EQ(pp[0], pf[0]);
  EXPECT_EQ(pp[1], pf[1]);
}

TEST(FeatureNestedCv, RefusesWhatTheFeatureFormCannotFit) {
  const Cohort c = MakeCohort(30, 41);
  const auto features = gram::MakeFeatureKernels(c.x);
  learners::Targets t;
  t.y = c.label;
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, t.y, {}, {}, 7, "outer");
  try {
    cv::RunNestedCv(*features, t, outer, Inner(learners::Task::Classification), {{"mk", "mkl_bp", cv::ExpandGrid({}, {})}}, {});
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "cv:NoFeatureForm");
    EXPECT_NE(std::string(e.what()).find("mkl_bp"), std::string::npos) << e.what();
  }
  // Source groups to weigh equally (the feature form holds one source), and covariates of other rows than the store's.
  cv::NestedCvOptions withGroups;
  withGroups.preprocessing.kernelGroups = {0, 0, 0, 0, 1, 1, 1, 1};
  cv::NestedCvOptions otherRows;
  auto covariates = std::make_shared<gram::Covariates>();
  covariates->design = Eigen::MatrixXd::Ones(29, 1);
  otherRows.preprocessing.covariates = covariates;
  for (const auto* options : {&withGroups, &otherRows}) {
    try {
      cv::RunNestedCv(*features, t, outer, Inner(learners::Task::Classification), {{"svm", "svm", cv::ExpandGrid({{"c", 1.0}}, {})}}, *options);
      ADD_FAILURE() << "expected an InputError";
    } catch (const InputError& e) {
      EXPECT_EQ(e.code(), "gram:FeaturesPreprocessing") << e.what();
    }
  }
}

// Covariates on features: a fold's rows residualised with coefficient images fitted on its (fit) training rows, then
// centred and normalised, as vectors. Every answer equals the kernel store's, which residualises the formed kernels
// (ResidualiseFold): the fold's products K~_r A for training and test rows, the subject weights of the maps rewritten for
// the raw rows, and the zero-norm floor, with and without centring, normalising and fit_on, a missing numeric value and
// a missing category. Sums in double of float inputs in another order, and the residualisation's expansions on either
// side (K_ij - a_i K_Qj - ... against x_i - c_i G): 1e-9 relative.
TEST(FeatureNestedCv, CovariatesAreRemovedAsFromTheKernels) {
  const Cohort c = MakeCohort(40, 43);
  const learners::KernelList kernels = Formed(*c.x);
  const gram::MemoryKernels formed(kernels);
  const auto features = gram::MakeFeatureKernels(c.x);
  std::vector<int> train, test;
  for (int i = 0; i < 40; ++i) (i % 5 == 1 ? test : train).push_back(i);
  const Eigen::MatrixXd A = Eigen::MatrixXd::Random(static_cast<Eigen::Index>(train.size()), 2);
  const std::vector<std::size_t> which = {0, 1, 5};
  gram::FoldModel model;
  model.train = train;
  model.test = test;
  model.coef = Eigen::VectorXd::LinSpaced(static_cast<Eigen::Index>(train.size()), -1.0, 1.5);
  model.beta = Eigen::VectorXd::LinSpaced(8, 0.05, 0.2);
  for (const bool fitOn : {false, true})
    for (const bool centre : {true, false})
      for (const bool normalise : {true, false}) {
        gram::Preprocessing pre;
        pre.centre = centre;
        pre.normalise = normalise;
        pre.covariates = MakeCovariates(c, fitOn);
        const std::string what = std::string("fit_on ") + (fitOn ? "1" : "0") + " centre " + (centre ? "1" : "0") + " normalise " + (normalise ? "1" : "0");
        const auto a = features->OpenFold(train, test, pre);
        const auto b = formed.OpenFold(train, test, pre);
        ASSERT_NE(a->Features(), nullptr);
        const auto pa = a->Products(which, A, {}), pb = b->Products(which, A, {});
        for (std::size_t i = 0; i < which.size(); ++i) EXPECT_LT((pa[i] - pb[i]).cwiseAbs().maxCoeff(), 1e-9 * pb[i].cwiseAbs().maxCoeff()) << what << " " << which[i];
        // The test rows' products: the decisions a fold model gives its held-out subjects.
        gram::WeightedKernels wa, wb;
        a->Weighted(gram::TrainingForm::Copies, wa);
        b->Weighted(gram::TrainingForm::Copies, wb);
        Eigen::MatrixXd bufferA, bufferB;
        const gram::TestBlocks ta = wa.Test(bufferA), tb = wb.Test(bufferB);
        for (const Eigen::Index j : {Eigen::Index{1}, Eigen::Index{6}}) {
          const Eigen::MatrixXd ba = ta.block(j), bb = tb.block(j);
          EXPECT_LT((ba - bb).cwiseAbs().maxCoeff(), 1e-9 * bb.cwiseAbs().maxCoeff()) << what << " test block " << j;
        }
        const Eigen::MatrixXd da = features->SubjectWeights(model, pre), db = formed.SubjectWeights(model, pre);
        EXPECT_LT((da - db).cwiseAbs().maxCoeff(), 1e-9 * db.cwiseAbs().maxCoeff()) << what;
        const Eigen::VectorXd la = features->LargestCentredSelfSimilarities(train, pre), lb = formed.LargestCentredSelfSimilarities(train, pre);
        EXPECT_LT((la - lb).cwiseAbs().maxCoeff(), 1e-9 * lb.cwiseAbs().maxCoeff()) << what;
      }
}

// Nested CV with covariates (fit_on, missing values) on the features, with folds of features and with folds that form
// their kernels, against the kernel store: the same grid points and, as in the first test, decisions within 1e-6 and
// kernel weights within 1e-5.
TEST(FeatureNestedCv, CovariatesGiveTheKernelRunsChoicesAndDecisions) {
  const Cohort c = MakeCohort(90, 47);
  const learners::KernelList kernels = Formed(*c.x);
  learners::Targets t;
  t.task = learners::Task::Classification;
  t.y = c.label;
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, t.task, t.y, {}, {}, 9, "outer");
  const std::vector<cv::LearnerPlan> plans = {
      {"svm", "svm", cv::ExpandGrid({{"tolerance", 1e-10}}, {{"c", {0.01, 1, 100}}})},
      {"krr", "krr", cv::ExpandGrid({}, {{"lambda", {0.01, 1, 100}}})},
      {"en", "enmkl_svm", cv::ExpandGrid({{"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}, {{"c", {0.1, 10}}, {"mu", {0.3, 0.9}}})}};
  cv::NestedCvOptions options;
  options.preprocessing.covariates = MakeCovariates(c, true);
  const auto expected = cv::RunNestedCv(kernels, t, outer, Inner(t.task), plans, options);
  for (const std::uint64_t budget : {std::uint64_t{0}, std::uint64_t{1} << 30}) {
    const auto features = gram::MakeFeatureKernels(c.x, budget);
    const auto found = cv::RunNestedCv(*features, t, outer, Inner(t.task), plans, options);
    ASSERT_EQ(found.size(), expected.size());
    for (std::size_t l = 0; l < found.size(); ++l)
      for (std::size_t f = 0; f < found[l].folds.size(); ++f) {
        const auto& a = found[l].folds[f];
        const auto& b = expected[l].folds.at(f);
        ASSERT_TRUE(a.error.empty()) << a.error;
        EXPECT_EQ(a.chosen, b.chosen) << "budget " << budget << " " << found[l].label << " fold " << f;
        EXPECT_LT((a.decision - b.decision).cwiseAbs().maxCoeff() / b.decision.cwiseAbs().maxCoeff(), 1e-6) << "budget " << budget << " " << found[l].label << " fold " << f;
        EXPECT_LT((a.model.beta - b.model.beta).cwiseAbs().maxCoeff(), 1e-5) << "budget " << budget << " " << found[l].label << " fold " << f;
      }
  }
}
