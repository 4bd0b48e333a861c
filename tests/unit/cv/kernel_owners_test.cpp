// Kernels held by several owners: every computation that reads a kernel runs on its owner and owner 0
// gets results only. With one owner every result is the one-process run's bit for bit (the same arithmetic, no sum
// across owners); with several, per-kernel results (fold scales, products, subject weights) stay bit for bit and the
// fits, whose combined kernels are sums of the owners' partial sums, agree to their rounding.
#include <algorithm>
#include <cmath>
#include <new>
#include <random>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

#include "gram_fixtures.hpp"
#include "neuromkl/gram/memory.hpp"

#include "../learners/learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/gram/owners.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/gram/compact.hpp"

using namespace neuromkl;

namespace {

/// Raw (uncentred, unnormalised) linear kernels of features with a common mean, as image kernels are; the first
/// `signal` carry the targets' sign in three features. n labelled subjects, then `unlabelled` more rows.
learners::KernelList RawKernels(const Eigen::VectorXd& y, int unlabelled, int m, int signal, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  const auto n = y.size() + unlabelled;
  learners::KernelList kernels;
  for (int j = 0; j < m; ++j) {
    Eigen::MatrixXd X(n, 5 + 3 * (j % 4));
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = 3.0 + normal(rng);
    if (j < signal) X.topLeftCorner(y.size(), 3).colwise() += 0.7 * y.array().sign().matrix();
    kernels.push_back(X * X.transpose());
  }
  return kernels;
}

learners::Targets Labels(int n, learners::Task task, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  learners::Targets t{task, Eigen::VectorXd(n)};
  if (task == learners::Task::Multiclass) t.classes = 3;
  for (int i = 0; i < n; ++i)
    t.y[i] = task == learners::Task::Classification ? (i % 2 ? 1.0 : -1.0) : task == learners::Task::Multiclass ? static_cast<double>(i % 3) : normal(rng);
  return t;
}

cv::InnerSplitter Inner(learners::Task task) {
  return [task](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({task == learners::Task::Regression ? cv::Scheme::KFold : cv::Scheme::StratifiedKFold, 3, 1}, task, y, {}, {}, 400 + f, "inner");
  };
}

std::vector<cv::Fold> Outer(const learners::Targets& t) {
  return cv::MakeFolds({t.task == learners::Task::Regression ? cv::Scheme::KFold : cv::Scheme::StratifiedKFold, 3, 1}, t.task, t.y, {}, {}, 21, "outer");
}

/// A design with an intercept and two random columns (rows: every kernel row).
std::shared_ptr<const gram::Covariates> Confounds(Eigen::Index rows, unsigned seed) {
  std::srand(seed);
  Eigen::MatrixXd design(rows, 3);
  design << Eigen::VectorXd::Ones(rows), Eigen::MatrixXd::Random(rows, 2);
  return std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
}

struct Case {
  learners::Task task;
  std::vector<cv::LearnerPlan> plans;
  int unlabelled = 0;
};

std::vector<Case> Cases() {
  using learners::Task;
  return {
      {Task::Classification,
       {{"en", "enmkl_svm", cv::ExpandGrid({}, {{"c", {0.1, 10}}, {"mu", {0.5, 1.0}}})},
        {"simple", "simplemkl", cv::ExpandGrid({{"c", 1}}, {})},
        {"mkelm", "mkelm", cv::ExpandGrid({{"c", 1}}, {})},
        {"mklbp", "mkl_bp", cv::ExpandGrid({}, {})},
        {"svm", "svm", cv::ExpandGrid({}, {{"c", {0.1, 1}}})},
        {"dkelm", "dkelm", cv::ExpandGrid({}, {})}},
       6},
      {Task::Regression, {{"enkrr", "enmkl_krr", cv::ExpandGrid({{"mu", 0.5}}, {{"lambda", {0.1, 10}}})}, {"mkelm", "mkelm", cv::ExpandGrid({{"c", 1}}, {})}, {"krr", "krr", cv::ExpandGrid({}, {})}}},
      {Task::Multiclass, {{"en", "enmkl_svm", cv::ExpandGrid({{"c", 1}, {"mu", 0.5}}, {})}, {"kelm", "kelm", cv::ExpandGrid({{"c", 1}}, {})}}},
  };
}

/// Runs `c` on the kernels in one process and on `owners` owners (the same kernels: float64 or the store).
/// `blockStarts`: the kernels dealt to the owners block by block (BlockOwners; empty: kernel j on owner j mod owners).
template <typename Kernels>
void Compare(const Kernels& kernels, const Case& c, int owners, const gram::Preprocessing& pre, bool exact, const std::string& what,
             const std::vector<std::size_t>& blockStarts = {}) {
  const int n = static_cast<int>(kernels[0].rows()) - c.unlabelled;
  const learners::Targets targets = Labels(n, c.task, 3);
  const auto outer = Outer(targets);
  cv::NestedCvOptions options;
  options.preprocessing = pre;
  options.unlabelled = c.unlabelled;
  options.probabilities = c.task == learners::Task::Classification;
  options.biasCorrection = c.task == learners::Task::Regression;
  options.float32FoldCopies = false;  // the owners prepare in double, as the one-process run then does
  const auto single = cv::RunNestedCv(gram::MemoryKernels(kernels), targets, outer, Inner(c.task), c.plans, options);
  gram::LocalKernelOwners held(kernels, owners, blockStarts);
  held.SetPreprocessing(pre);
  const auto owned = cv::RunNestedCv(held, targets, outer, Inner(c.task), c.plans, options);
  EXPECT_EQ(held.OpenFolds(), 0) << what;  // every fold closed on the owners
  ASSERT_EQ(single.size(), owned.size());
  for (std::size_t l = 0; l < single.size(); ++l)
    for (std::size_t f = 0; f < outer.size(); ++f) {
      const auto& x = single[l].folds[f];
      const auto& y = owned[l].folds[f];
      const std::string where = what + ", " + c.plans[l].label + ", fold " + std::to_string(f);
      ASSERT_TRUE(x.error.empty()) << where << ": " << x.error;
      ASSERT_TRUE(y.error.empty()) << where << ": " << y.error;
      EXPECT_EQ(x.chosen, y.chosen) << where;
      if (exact) {
        EXPECT_EQ(x.innerScores, y.innerScores) << where;
        EXPECT_EQ(x.model.beta, y.model.beta) << where;
        EXPECT_EQ(x.decision, y.decision) << where;
        EXPECT_EQ(x.scores, y.scores) << where;
        EXPECT_EQ(x.probability, y.probability) << where;
        EXPECT_EQ(single[l].innerIterations, owned[l].innerIterations) << where;
        continue;
      }
      // Several owners: the combined and summed kernels are sums of partial sums (rounding ~1e-16 relative), which
      // can turn a near-tie in SMO's working-set choice, so a solve stops elsewhere within its tolerance of the
      // same optimum. ENMKL's weights move less than its stopping rule's 1e-6, decisions less than 1e-5 of the
      // fold's largest; plain SVM stops at a KKT violation of 1e-3 (LIBSVM's default), so its decisions may move
      // by about that (1.4e-4 of the largest seen): 2e-3.
      ASSERT_EQ(x.model.beta.size(), y.model.beta.size()) << where;
      EXPECT_LE((x.model.beta - y.model.beta).cwiseAbs().maxCoeff(), 1e-5) << where;
      const double scale = std::max(1.0, x.decision.cwiseAbs().maxCoeff()) * (c.plans[l].name == "svm" ? 200.0 : 1.0);
      if (c.task == learners::Task::Multiclass) {
        EXPECT_LE((x.scores - y.scores).cwiseAbs().maxCoeff(), 1e-5 * std::max(1.0, x.scores.cwiseAbs().maxCoeff())) << where;
        EXPECT_EQ(x.decision, y.decision) << where;  // predicted classes
      } else {
        EXPECT_LE((x.decision - y.decision).cwiseAbs().maxCoeff(), 1e-5 * scale) << where;
      }
    }
}

TEST(OwnedKernels, OneOwnerIsTheOneProcessRunBitForBit) {
  for (const auto& c : Cases()) {
    const learners::Targets t = Labels(36, c.task, 3);
    const learners::KernelList kernels = RawKernels(t.y, c.unlabelled, 7, 2, 5);
    gram::Preprocessing pre;
    pre.kernelGroups = {0, 0, 0, 1, 1, 1, 1};
    Compare(kernels, c, 1, pre, true, "float64");
    pre.covariates = Confounds(kernels[0].rows(), 9);
    Compare(kernels, c, 1, pre, true, "float64 with covariates");
    pre.covariates.reset();
    Compare(gram::CompactKernels(kernels, true), c, 1, pre, true, "compact store");
  }
}

TEST(OwnedKernels, SeveralOwnersAgreeWithTheOneProcessRun) {
  // 3 owners of 7 kernels (2 or 3 each) and 9 (two own none); with and without covariates and source scales.
  for (const auto& c : Cases()) {
    const learners::Targets t = Labels(36, c.task, 3);
    const learners::KernelList kernels = RawKernels(t.y, c.unlabelled, 7, 2, 5);
    for (const int owners : {3, 9}) {
      gram::Preprocessing pre;
      Compare(kernels, c, owners, pre, false, std::to_string(owners) + " owners");
      pre.kernelGroups = {0, 1, 0, 1, 0, 1, 1};
      pre.covariates = Confounds(kernels[0].rows(), 9);
      Compare(kernels, c, owners, pre, false, std::to_string(owners) + " owners, covariates and groups");
    }
  }
}

// A study of several sources deals each source's kernels to the owners from owner 0 (kernel j of a source starting at s
// on owner (j - s) mod P): the same results as kernel j on owner j mod P, whatever the blocks.
TEST(OwnedKernels, KernelsDealtSourceBySourceAgreeWithTheOneProcessRun) {
  EXPECT_EQ(gram::BlockOwners(7, 3, {0, 3, 5}), (std::vector<int>{0, 1, 2, 0, 1, 0, 1}));
  EXPECT_EQ(gram::BlockOwners(5, 2, {}), (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(gram::BlockOwners(4, 3, {0, 1, 2, 3}), (std::vector<int>{0, 0, 0, 0}));  // one kernel per source: all on owner 0
  const learners::Targets t = Labels(36, learners::Task::Classification, 3);
  const learners::KernelList kernels = RawKernels(t.y, 6, 7, 2, 5);
  const auto cases = Cases();
  const Case& c = cases[0];  // classification, 6 unlabelled rows
  for (const int owners : {1, 2, 3}) {
    gram::Preprocessing pre;
    pre.kernelGroups = {0, 0, 0, 1, 1, 2, 2};
    Compare(kernels, c, owners, pre, owners == 1, std::to_string(owners) + " owners, three sources", {0, 3, 5});
    pre.covariates = Confounds(kernels[0].rows(), 9);
    Compare(kernels, c, owners, pre, owners == 1, std::to_string(owners) + " owners, three sources, covariates", {0, 3, 5});
    pre.covariates.reset();
    Compare(gram::CompactKernels(kernels, true), c, owners, pre, owners == 1, std::to_string(owners) + " owners, three sources, compact store", {0, 3, 5});
  }
  // Per-kernel results of every operation: gram's store conformance suite (every backend, blocks {0, 3, 5} too).
}

TEST(OwnedKernels, SelectedRowsAreTheKernelsOfThoseRows) {
  // The owners keep their kernels whole; SelectRows makes subject i their row rows[i] (a study's labelled subjects,
  // then its unlabelled ones). One owner: the one-process run on K(rows, rows) bit for bit, covariates included.
  const learners::Targets all = Labels(44, learners::Task::Classification, 3);
  const learners::KernelList full = RawKernels(all.y, 0, 5, 2, 13);
  std::vector<int> rows;
  for (int i = 43; i >= 0; i -= (i % 5 == 0 ? 2 : 1)) rows.push_back(i);  // reversed, some rows left out
  const Eigen::VectorXi r = Eigen::Map<const Eigen::VectorXi>(rows.data(), static_cast<Eigen::Index>(rows.size()));
  learners::KernelList selected;
  for (const auto& K : full) selected.push_back(K(r, r));
  const auto n = static_cast<int>(rows.size());
  const learners::Targets targets = Labels(n, learners::Task::Classification, 3);
  gram::Preprocessing pre;
  pre.covariates = Confounds(n, 5);
  cv::NestedCvOptions options;
  options.preprocessing = pre;
  const std::vector<cv::LearnerPlan> plans = {{"en", "enmkl_svm", cv::ExpandGrid({{"mu", 0.5}}, {{"c", {0.1, 10}}})}, {"svm", "svm", cv::ExpandGrid({{"c", 1}}, {})}};
  const auto outer = Outer(targets);
  const auto single = cv::RunNestedCv(selected, targets, outer, Inner(targets.task), plans, options);
  for (const int owners : {1, 2}) {
    gram::LocalKernelOwners held(full, owners);
    held.SelectRows(rows);
    held.SetPreprocessing(pre);
    EXPECT_EQ(held.Subjects(), n);
    const auto owned = cv::RunNestedCv(held, targets, outer, Inner(targets.task), plans, options);
    for (std::size_t l = 0; l < plans.size(); ++l)
      for (std::size_t f = 0; f < outer.size(); ++f) {
        ASSERT_TRUE(owned[l].folds[f].error.empty()) << owned[l].folds[f].error;
        if (owners == 1) {
          EXPECT_EQ(owned[l].folds[f].decision, single[l].folds[f].decision) << plans[l].label << " fold " << f;
        }
        EXPECT_LE((owned[l].folds[f].decision - single[l].folds[f].decision).cwiseAbs().maxCoeff(), 1e-3) << plans[l].label << " fold " << f;
      }
    const auto& fold = single[0].folds[0];
    const gram::FoldModel model{fold.train, fold.test, fold.model.coef, fold.model.beta};
    EXPECT_EQ(held.SubjectWeights(model, pre), gram::MemoryKernels(selected).SubjectWeights(model, pre)) << owners;
  }
}

TEST(OwnedKernels, FromKPackedStackBelowTrainingSubjectsTheOwnersReadTheirFoldKernelsInPlace) {
  // 1,300 subjects in 5 outer folds: training sets of 1,040, so every owner's stack reads its fold kernels in place
  // (no packed store), the screened norms ask for quadratics as one request, and the test blocks are not held.
  const learners::Targets targets = Labels(1300, learners::Task::Classification, 3);
  const learners::KernelList kernels = RawKernels(targets.y, 0, 3, 1, 17);
  const std::vector<cv::LearnerPlan> plans = {{"en", "enmkl_svm", cv::ExpandGrid({{"c", 1}, {"mu", 0.5}}, {})}, {"svm", "svm", cv::ExpandGrid({{"c", 1}}, {})}};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 5, 1}, targets.task, targets.y, {}, {}, 21, "outer");
  ASSERT_GE(static_cast<Eigen::Index>(outer[0].train.size()), gram::kPackedStackBelow);
  cv::NestedCvOptions options;
  options.preprocessing.kernelGroups = {0, 1, 1};
  const auto single = cv::RunNestedCv(gram::MemoryKernels(kernels), targets, outer, Inner(targets.task), plans, options);
  for (const int owners : {1, 2}) {
    gram::LocalKernelOwners held(kernels, owners);
    held.SetPreprocessing(options.preprocessing);
    const auto owned = cv::RunNestedCv(held, targets, outer, Inner(targets.task), plans, options);
    for (std::size_t l = 0; l < plans.size(); ++l)
      for (std::size_t f = 0; f < outer.size(); ++f) {
        const auto& x = single[l].folds[f];
        const auto& y = owned[l].folds[f];
        ASSERT_TRUE(y.error.empty()) << y.error;
        if (owners == 1) {
          EXPECT_EQ(x.model.beta, y.model.beta) << plans[l].label << " fold " << f;
          EXPECT_EQ(x.decision, y.decision) << plans[l].label << " fold " << f;
        } else {  // as in SeveralOwnersAgreeWithTheOneProcessRun
          EXPECT_LE((x.model.beta - y.model.beta).cwiseAbs().maxCoeff(), 1e-5) << plans[l].label << " fold " << f;
          EXPECT_LE((x.decision - y.decision).cwiseAbs().maxCoeff(), (plans[l].name == "svm" ? 2e-3 : 1e-5) * std::max(1.0, x.decision.cwiseAbs().maxCoeff()))
              << plans[l].label << " fold " << f;
        }
      }
    EXPECT_EQ(held.OpenFolds(), 0);
  }
}

/// In-process owners of which owner 1 fails the first request about a fold that reaches it (as a rank whose memory
/// runs out would): the rest of the protocol must go on as if that owner's reply were any failure.
class FailingOwners final : public gram::KernelOwners {
 public:
  FailingOwners(const learners::KernelList& kernels, int owners)
      : KernelOwners(owners, kernels.size(), kernels[0].rows(), false, false) {
    for (int p = 0; p < owners; ++p) {
      learners::KernelList share;
      for (std::size_t j = static_cast<std::size_t>(p); j < kernels.size(); j += static_cast<std::size_t>(owners)) share.push_back(kernels[j]);
      shards_.push_back(std::make_unique<gram::KernelShard>(p, owners, std::move(share)));
    }
  }
  int OpenFolds() const {
    int open = 0;
    for (const auto& s : shards_) open += s->OpenFolds();
    return open;
  }

 protected:
  void Exchange(const gram::OwnerRequest& request, const std::function<void(int, gram::OwnerReply&)>& consume) const override {
    for (std::size_t p = 0; p < shards_.size(); ++p) {
      gram::OwnerReply reply;
      if (p == 1 && request.fold != 0 && !failed_) {
        failed_ = true;
        reply.error = SerialiseError(std::make_exception_ptr(std::bad_alloc()));
      } else {
        reply = shards_[p]->Execute(request);
      }
      consume(static_cast<int>(p), reply);
    }
  }

 private:
  std::vector<std::unique_ptr<gram::KernelShard>> shards_;
  mutable bool failed_ = false;
};

TEST(OwnedKernels, AFoldOneOwnerCouldNotOpenIsClosedOnTheOthers) {
  const learners::Targets t = Labels(30, learners::Task::Classification, 3);
  const learners::KernelList kernels = RawKernels(t.y, 0, 4, 2, 7);
  FailingOwners held(kernels, 3);
  held.SetPreprocessing({});
  std::vector<int> train, test;
  for (int i = 0; i < 30; ++i) (i % 3 == 0 ? test : train).push_back(i);
  try {
    held.OpenFold(train, test, {});
    FAIL() << "expected owner 1's failure";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel owner 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(held.OpenFolds(), 0);  // owners 0 and 2 had opened it
  EXPECT_EQ(held.OpenFold(train, test, {})->Scales().size(), 4);  // the next request goes through
  EXPECT_EQ(held.OpenFolds(), 0);
}

TEST(OwnedKernels, AnOwnersFailureIsTheOneProcessError) {
  // A covariate design whose fit rows miss a fold's training set: covariates:NoFitRows from every owner, reported once
  // as the one-process run reports it; the fold opened on the other owners is closed.
  const learners::Targets t = Labels(30, learners::Task::Classification, 3);
  const learners::KernelList kernels = RawKernels(t.y, 0, 4, 2, 7);
  gram::Preprocessing pre;
  Eigen::MatrixXd design = Eigen::MatrixXd::Ones(30, 1);
  std::vector<char> fitRows(30, 0);
  fitRows[0] = 1;  // only subject 0 may fit the coefficients
  pre.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, fitRows, {}});
  std::vector<int> train, test;
  for (int i = 1; i < 30; ++i) (i % 3 == 0 ? test : train).push_back(i);
  std::string expected;
  try {
    gram::PrepareFold(gram::MemoryKernels(kernels), train, test, pre);
    FAIL() << "expected covariates:NoFitRows";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "covariates:NoFitRows");
    expected = e.what();
  }
  gram::LocalKernelOwners held(kernels, 3);
  held.SetPreprocessing(pre);
  try {
    held.OpenFold(train, test, pre);
    FAIL() << "expected covariates:NoFitRows";
  } catch (const InputError& e) {  // the same class, code and message
    EXPECT_EQ(e.code(), "covariates:NoFitRows");
    EXPECT_EQ(std::string(e.what()), expected);
  }
  EXPECT_EQ(held.OpenFolds(), 0);
  // A kernel with a NaN: the learner refuses the fold as in one process (training kernel 2 named).
  learners::KernelList bad = kernels;
  bad[2](4, 7) = bad[2](7, 4) = std::nan("");
  gram::LocalKernelOwners badHeld(bad, 2);
  badHeld.SetPreprocessing({});
  const std::vector<cv::LearnerPlan> plans = {{"en", "enmkl_svm", cv::ExpandGrid({{"c", 1}, {"mu", 0.5}}, {})}};
  const auto outer = Outer(t);
  const auto single = cv::RunNestedCv(bad, t, outer, Inner(t.task), plans, cv::NestedCvOptions{});
  const auto owned = cv::RunNestedCv(badHeld, t, outer, Inner(t.task), plans, cv::NestedCvOptions{});
  int refused = 0;  // folds with the NaN among their training subjects (the others predict NaN for a test subject)
  for (std::size_t f = 0; f < outer.size(); ++f) {
    refused += single[0].folds[f].error.find("training kernel 2 has NaN or infinite entries") != std::string::npos;
    EXPECT_FALSE(single[0].folds[f].error.empty());
    EXPECT_EQ(owned[0].folds[f].error, single[0].folds[f].error);
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(badHeld.OpenFolds(), 0);
}

}  // namespace
