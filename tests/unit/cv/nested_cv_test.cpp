#include <cmath>
#include <sstream>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <gtest/gtest.h>

#include "../learners/learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/gram/memory.hpp"
#include "gram_fixtures.hpp"

using namespace neuromkl;

namespace {

learners::KernelList LinearKernels(const std::vector<Eigen::MatrixXd>& features) {
  learners::KernelList ks;
  for (const auto& X : features) ks.push_back(X * X.transpose());
  return ks;
}

cv::InnerSplitter Inner(int k) {
  return [k](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({cv::Scheme::StratifiedKFold, k, 1}, learners::Task::Classification, y, {}, {}, 100 + f, "inner");
  };
}

std::vector<cv::LearnerPlan> Plans() {
  return {{"en", "enmkl_svm", cv::ExpandGrid({}, {{"c", {0.1, 10}}, {"mu", {0.5, 1.0}}})},
          {"svm", "svm", cv::ExpandGrid({}, {{"c", {1, 0.01}}})}};
}

TEST(NestedCv, GridIsOrderedFromTheMostRegularised) {
  const auto g = cv::ExpandGrid({{"tolerance", 1e-3}}, {{"c", {10, 0.1, 1}}, {"mu", {0.2, 1.0}}});
  ASSERT_EQ(g.size(), 6u);
  EXPECT_EQ(g[0].at("c"), 0.1);
  EXPECT_EQ(g[0].at("mu"), 1.0);
  EXPECT_EQ(g[1].at("mu"), 0.2);
  EXPECT_EQ(g[5].at("c"), 10);
  EXPECT_EQ(g[3].at("tolerance"), 1e-3);
  const auto k = cv::ExpandGrid({}, {{"lambda", {0.1, 100}}});
  EXPECT_EQ(k[0].at("lambda"), 100);  // larger ridge first
}

TEST(NestedCv, HeldOutSubjectsDoNotLeakIntoTheirFold) {
  auto p = neuromkl::testing::MakeMklProblem(30, 3, {0}, 1.0, 5);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, p.targets.y, {}, {}, 9, "outer");
  const auto a = cv::RunNestedCv(LinearKernels(p.features), p.targets, outer, Inner(3), Plans(), {});
  // Change every feature of one held-out subject of fold 0 (its kernel rows and columns change).
  const int victim = outer[0].test[1];
  auto features = p.features;
  for (auto& X : features) X.row(victim) = X.row(victim) * -3.0 + Eigen::RowVectorXd::Constant(X.cols(), 5.0);
  const auto b = cv::RunNestedCv(LinearKernels(features), p.targets, outer, Inner(3), Plans(), {});
  for (std::size_t l = 0; l < a.size(); ++l) {
    const auto &fa = a[l].folds[0], &fb = b[l].folds[0];
    EXPECT_EQ(fa.chosen, fb.chosen);
    EXPECT_EQ(fa.innerScores, fb.innerScores);
    EXPECT_EQ(fa.model.beta, fb.model.beta);
    EXPECT_EQ(fa.model.coef, fb.model.coef);
    EXPECT_EQ(fa.model.bias, fb.model.bias);
    EXPECT_EQ(fa.decision[0], fb.decision[0]);  // another test subject of that fold: same prediction
    EXPECT_NE(fa.decision[1], fb.decision[1]);  // the changed subject: its own prediction moves
    EXPECT_NE(a[l].folds[1].decision, b[l].folds[1].decision);  // where it trains, it matters
  }
}

TEST(NestedCv, InnerFoldsComeFromTheOuterTrainingSet) {
  auto p = neuromkl::testing::MakeMklProblem(24, 2, {0}, 1.0, 6);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 4, 1}, learners::Task::Classification, p.targets.y, {}, {}, 1, "outer");
  std::vector<std::vector<int>> seen(outer.size());
  const cv::InnerSplitter spy = [&](std::size_t f, const std::vector<int>& train, const Eigen::VectorXd& y) {
    seen[f] = train;
    EXPECT_EQ(y.size(), static_cast<Eigen::Index>(train.size()));
    return Inner(3)(f, train, y);
  };
  cv::RunNestedCv(LinearKernels(p.features), p.targets, outer, spy, Plans(), {});
  for (std::size_t f = 0; f < outer.size(); ++f) EXPECT_EQ(seen[f], outer[f].train);
}

TEST(NestedCv, BitwiseIdenticalForOneAndTwoThreads) {
  auto p = neuromkl::testing::MakeMklProblem(40, 4, {0, 2}, 0.8, 7);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 4, 1}, learners::Task::Classification, p.targets.y, {}, {}, 2, "outer");
  std::vector<cv::LearnerOutcome> one, two;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    one = cv::RunNestedCv(LinearKernels(p.features), p.targets, outer, Inner(4), Plans(), {});
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    two = cv::RunNestedCv(LinearKernels(p.features), p.targets, outer, Inner(4), Plans(), {});
  }
  for (std::size_t l = 0; l < one.size(); ++l)
    for (std::size_t f = 0; f < one[l].folds.size(); ++f) {
      EXPECT_EQ(one[l].folds[f].decision, two[l].folds[f].decision);
      EXPECT_EQ(one[l].folds[f].innerScores, two[l].folds[f].innerScores);
      EXPECT_EQ(one[l].folds[f].model.beta, two[l].folds[f].model.beta);
    }
}

TEST(NestedCv, TiesGoToTheMostRegularisedPoint) {
  // Well separated classes: every C in the grid classifies the inner test sets perfectly.
  auto p = neuromkl::testing::MakeMklProblem(30, 1, {0}, 8.0, 8);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, p.targets.y, {}, {}, 3, "outer");
  const auto res = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), {{"svm", "svm", cv::ExpandGrid({}, {{"c", {100, 1, 0.5}}})}}, {});
  for (const auto& f : res[0].folds) {
    EXPECT_EQ(f.innerScores[0], f.innerScores[2]);
    EXPECT_EQ(f.chosen, 0u);
    EXPECT_EQ(res[0].grid[f.chosen].at("c"), 0.5);
  }
  EXPECT_EQ(res[0].fits, 3 + 3 * 3 * 3);
}

// Inner-CV fits are counted with their convergence (an inner fit that runs to its iteration cap is otherwise unseen:
// only the outer folds' status is reported per fold). 3 outer x 3 inner folds x 2 grid
// points = 18 inner fits per learner: all capped for SimpleMKL held to 1 iteration at gap 1e-12 (three kernels
// carry the signal, so the optimum is not a vertex that one step could reach), none for the SVM.
TEST(NestedCv, InnerFitsThatDidNotConvergeAreCounted) {
  auto p = neuromkl::testing::MakeMklProblem(36, 4, {0, 1, 2}, 0.5, 5);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, p.targets.y, {}, {}, 9, "outer");
  const std::vector<cv::LearnerPlan> plans = {
      {"capped", "simplemkl", cv::ExpandGrid({{"max_iterations", 1}, {"gap_tolerance", 1e-12}}, {{"c", {1, 10}}})},
      {"svm", "svm", cv::ExpandGrid({}, {{"c", {1, 0.01}}})}};
  const auto res = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), plans, {});
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0].innerFits, 18);
  EXPECT_EQ(res[0].innerNotConverged, 18);
  EXPECT_EQ(res[0].innerCapped, 18);  // capped, not stalled
  EXPECT_EQ(res[1].innerFits, 18);
  EXPECT_EQ(res[1].innerNotConverged, 0);
  EXPECT_EQ(res[1].innerCapped, 0);
}

TEST(NestedCv, SignalIsFoundAndNoSignalIsChance) {
  for (double shift : {1.5, 0.0}) {
    auto p = neuromkl::testing::MakeMklProblem(60, 4, {1}, shift, 9);
    const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 5, 1}, learners::Task::Classification, p.targets.y, {}, {}, 4, "outer");
    const auto res = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(5), Plans(), {});
    for (const auto& o : res) {
      const double ba = cv::Summarise(o, p.targets).pooled.at("balanced_accuracy");
      if (shift > 0) EXPECT_GT(ba, 0.7) << o.label;  // chance is 0.5 +- 0.065 (1 SD) at n = 60
      else EXPECT_LT(std::abs(ba - 0.5), 0.2) << o.label;  // 60 subjects: chance +- ~2 SD
    }
  }
}

}  // namespace

namespace {

TEST(NestedCv, SharingFoldWorkBetweenFitsChangesNothing) {
  // The per-fold training-kernel cache is shared by every grid point of every learner on
  // a fold, supervised and semi-supervised: the results must be bit-identical to fits that each do
  // their own kernel check, stack and sum.
  const auto p = neuromkl::testing::MakeMklProblem(36, 3, {0}, 1.0, 23);
  const learners::Targets labelled{learners::Task::Classification, p.targets.y.head(30)};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, labelled.y, {}, {}, 8, "outer");
  auto plans = Plans();
  plans.push_back({"sm", "simplemkl", cv::ExpandGrid({}, {{"c", {0.1, 10}}})});
  plans.push_back({"dk", "dkelm", cv::ExpandGrid({{"neighbours", 4}, {"deformation", 2}}, {{"c", {0.1, 10}}})});
  cv::NestedCvOptions shared, perFit;
  shared.unlabelled = perFit.unlabelled = 6;
  shared.probabilities = perFit.probabilities = true;
  perFit.shareFoldWork = false;
  const auto a = cv::RunNestedCv(p.kernels, labelled, outer, Inner(3), plans, shared);
  const auto b = cv::RunNestedCv(p.kernels, labelled, outer, Inner(3), plans, perFit);
  for (std::size_t l = 0; l < a.size(); ++l)
    for (std::size_t f = 0; f < a[l].folds.size(); ++f) {
      EXPECT_EQ(a[l].folds[f].decision, b[l].folds[f].decision) << a[l].label;
      EXPECT_EQ(a[l].folds[f].innerScores, b[l].folds[f].innerScores) << a[l].label;
      EXPECT_EQ(a[l].folds[f].model.beta, b[l].folds[f].model.beta) << a[l].label;
      EXPECT_EQ(a[l].folds[f].model.coef, b[l].folds[f].model.coef) << a[l].label;
    }
}

// Separable folds (30 training subjects, 60 features per kernel): from some C on the SVMs' dual variables stay inside
// their box, and the fits at every larger C of the grid are taken from that one. Against fitting every grid point:
// the same inner scores (balanced accuracies of decisions that agree to the tolerances) and so the same choices (a
// reused point ties with its source and is never chosen over it; the outer refits are then the same fits), with fewer
// solver iterations. With Platt scaling on, the calibration reads the chosen point's out-of-fold decisions.
TEST(NestedCv, FitsAtALargerCAreTheSmallerCsWhoseBoxIsInactive) {
  const auto p = neuromkl::testing::MakeMklProblem(45, 4, {0, 1}, 0.6, 31, learners::Task::Classification, 60);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, p.targets.y, {}, {}, 4, "outer");
  const std::vector<double> C = {1e-3, 0.1, 10, 1000, 1e5};
  const std::vector<cv::LearnerPlan> plans = {
      {"en", "enmkl_svm", cv::ExpandGrid({{"svm_tolerance", 1e-11}, {"tolerance", 1e-10}}, {{"c", C}, {"mu", {0.4, 1.0}}})},
      {"svm", "svm", cv::ExpandGrid({{"tolerance", 1e-11}}, {{"c", C}})},
      {"sm", "simplemkl", cv::ExpandGrid({{"svm_tolerance", 1e-11}, {"gap_tolerance", 1e-8}}, {{"c", C}})}};
  cv::NestedCvOptions reuse, everyC;
  reuse.probabilities = everyC.probabilities = true;
  everyC.reuseLargerC = false;
  const auto a = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), plans, reuse);
  const auto b = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), plans, everyC);
  for (std::size_t l = 0; l < a.size(); ++l) {
    EXPECT_GT(a[l].innerReused, 0) << a[l].label;
    EXPECT_EQ(b[l].innerReused, 0) << a[l].label;
    EXPECT_EQ(a[l].innerNotConverged, 0) << a[l].label;
    if (a[l].label != "svm") {
      EXPECT_LT(a[l].innerSolverIterations, b[l].innerSolverIterations) << a[l].label;
    }
    for (std::size_t f = 0; f < a[l].folds.size(); ++f) {
      const auto &x = a[l].folds[f], &y = b[l].folds[f];
      EXPECT_EQ(x.innerScores, y.innerScores) << a[l].label << " fold " << f;
      EXPECT_EQ(x.chosen, y.chosen) << a[l].label << " fold " << f;
      EXPECT_EQ(x.decision, y.decision) << a[l].label << " fold " << f;
      EXPECT_NEAR(x.platt.a, y.platt.a, 1e-6 * std::abs(y.platt.a)) << a[l].label << " fold " << f;
    }
  }
}

TEST(NestedCv, FoldsInFlightFollowTheMemoryBudget) {
  EXPECT_EQ(cv::FoldsInFlight(100, 1000, 2), 2u);  // room for more than the threads: one per thread
  EXPECT_EQ(cv::FoldsInFlight(100, 250, 8), 2u);   // the budget holds two
  EXPECT_EQ(cv::FoldsInFlight(100, 150, 2), 1u);
  EXPECT_EQ(cv::FoldsInFlight(100, 50, 2), 1u);  // not even one fits: one still runs
  EXPECT_EQ(cv::FoldsInFlight(0, 0, 4), 4u);
  EXPECT_EQ(cv::FoldsInFlight(100, 1000, 0), 1u);
  EXPECT_GT(AvailableMemoryBytes(), 0u);
}

TEST(NestedCv, ActiveThreadsFollowAStudysThreadLimit) {
  // Memory shares (folds in flight, permutations) divide by the threads that may actually run: a study's
  // `threads` (tbb::global_control) caps the arena's concurrency.
  EXPECT_EQ(cv::ActiveThreads(), static_cast<std::size_t>(tbb::this_task_arena::max_concurrency()));
  tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
  EXPECT_EQ(cv::ActiveThreads(), 1u);
}

TEST(NestedCv, FewerFoldsInFlightChangeNothing) {
  // A budget too small for two folds at once runs them one at a time (large n on one machine),
  // and, as not even one fold's copies fit, enmkl_svm reads its training kernels in place (FoldColumns);
  // every result must be bit-identical to the run with a fold per thread and copies.
  const auto p = neuromkl::testing::MakeMklProblem(36, 3, {0}, 1.0, 29);
  const learners::Targets labelled{learners::Task::Classification, p.targets.y.head(30)};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, labelled.y, {}, {}, 9, "outer");
  auto plans = Plans();
  plans.push_back({"dk", "dkelm", cv::ExpandGrid({{"neighbours", 4}, {"deformation", 2}}, {{"c", {0.1, 10}}})});
  cv::NestedCvOptions wide, narrow;
  wide.unlabelled = narrow.unlabelled = 6;
  wide.probabilities = narrow.probabilities = true;
  wide.columnsInPlace = cv::ColumnsInPlace::Never;  // copies (at this size Auto reads in place too)
  narrow.memoryBudgetBytes = 1;
  const auto a = cv::RunNestedCv(p.kernels, labelled, outer, Inner(3), plans, wide);
  const auto b = cv::RunNestedCv(p.kernels, labelled, outer, Inner(3), plans, narrow);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t l = 0; l < a.size(); ++l)
    for (std::size_t f = 0; f < a[l].folds.size(); ++f) {
      EXPECT_EQ(a[l].folds[f].decision, b[l].folds[f].decision) << a[l].label;
      EXPECT_EQ(a[l].folds[f].innerScores, b[l].folds[f].innerScores) << a[l].label;
      EXPECT_EQ(a[l].folds[f].chosen, b[l].folds[f].chosen) << a[l].label;
      EXPECT_EQ(a[l].folds[f].model.beta, b[l].folds[f].model.beta) << a[l].label;
    }
}

TEST(NestedCv, AFoldThatCannotFitTheMemoryIsReportedBeforeItRuns) {
  // The system's out-of-memory killer ends a process without a message: the run says first that one
  // fold's kernels exceed the memory available (info/warning once per process, debug afterwards), and that
  // the learners of kernel weights then read their training kernels in place.
  std::ostringstream captured;
  const auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured));
  logger->set_level(spdlog::level::debug);
  spdlog::set_default_logger(logger);
  const auto p = neuromkl::testing::MakeMklProblem(30, 2, {0}, 1.0, 31);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, p.targets.y, {}, {}, 5, "outer");
  cv::NestedCvOptions options;
  options.memoryBudgetBytes = 1;
  const auto result = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), Plans(), options);
  spdlog::set_default_logger(previous);
  EXPECT_EQ(result.size(), Plans().size());
  EXPECT_NE(captured.str().find("one fold's kernels need"), std::string::npos) << captured.str();
  EXPECT_NE(captured.str().find("read the training kernels in place"), std::string::npos) << captured.str();
  EXPECT_NE(captured.str().find("outer folds"), std::string::npos) << captured.str();
}

TEST(NestedCv, UnlabelledSubjectsReachOnlySemiSupervisedLearnersAndNeverTheirTestFold) {
  // 30 labelled + 6 unlabelled subjects (the last 6 rows of the kernels).
  const auto p = neuromkl::testing::MakeMklProblem(36, 2, {0}, 1.0, 19);
  const learners::Targets labelled{learners::Task::Classification, p.targets.y.head(30)};
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, labelled.y, {}, {}, 7, "outer");
  const std::vector<cv::LearnerPlan> plans = {{"dk", "dkelm", cv::ExpandGrid({{"neighbours", 4}, {"deformation", 2}}, {{"c", {0.1, 10}}})},
                                              {"svm", "svm", cv::ExpandGrid({}, {{"c", {0.1, 10}}})}};
  cv::NestedCvOptions withU;
  withU.unlabelled = 6;
  const auto a = cv::RunNestedCv(p.kernels, labelled, outer, Inner(3), plans, withU);
  for (const auto& f : a[0].folds) {
    EXPECT_EQ(f.unlabelled, (std::vector<int>{30, 31, 32, 33, 34, 35}));
    EXPECT_EQ(f.model.coef.size(), static_cast<Eigen::Index>(f.train.size() + 6));
    for (int t : f.test) EXPECT_LT(t, 30);
  }
  // The supervised learner never sees the unlabelled rows: identical to a run without them.
  learners::KernelList cut;
  for (const auto& K : p.kernels) cut.push_back(K.topLeftCorner(30, 30));
  const auto b = cv::RunNestedCv(cut, labelled, outer, Inner(3), {plans[1]}, {});
  for (std::size_t f = 0; f < outer.size(); ++f) {
    EXPECT_TRUE(a[1].folds[f].unlabelled.empty());
    EXPECT_EQ(a[1].folds[f].decision, b[0].folds[f].decision);
  }
  // No leakage: changing one test subject's kernel entries leaves the other test subjects'
  // decision values of that fold unchanged (the test fold is never in the graph).
  const int moved = outer[0].test[0];
  learners::KernelList changed = p.kernels;
  for (auto& K : changed) {
    K.row(moved) *= 0.3;
    K.col(moved) *= 0.3;
  }
  const auto c = cv::RunNestedCv(changed, labelled, outer, Inner(3), {plans[0]}, withU);
  for (std::size_t i = 1; i < outer[0].test.size(); ++i)
    EXPECT_NEAR(c[0].folds[0].decision[static_cast<Eigen::Index>(i)], a[0].folds[0].decision[static_cast<Eigen::Index>(i)], 1e-12) << i;
}

}  // namespace

// A failed outer fold (decision NaN) is not scored; the summary says how many failed.
TEST(NestedCv, FailedFoldsAreLeftOutOfTheSummaryAndCounted) {
  cv::LearnerOutcome o;
  const double nan = std::nan("");
  learners::Targets t{learners::Task::Classification, Eigen::VectorXd(8)};
  t.y << 1, -1, 1, -1, -1, -1, -1, -1;
  cv::OuterFoldResult ok;
  ok.test = {0, 1, 2, 3};
  ok.decision = Eigen::Vector4d(1, -1, -1, 1);  // half right: balanced accuracy 0.5
  cv::OuterFoldResult failed;
  failed.index = 1;
  failed.test = {4, 5, 6, 7};  // all negative: scored, the NaNs would count as four correct negatives
  failed.decision = Eigen::Vector4d::Constant(nan);
  failed.error = "only one class in the training set";
  o.folds = {ok, failed};
  const cv::Summary s = cv::Summarise(o, t);
  EXPECT_DOUBLE_EQ(s.pooled.at("balanced_accuracy"), 0.5);  // not 0.667 (6 of 8 "correct")
  EXPECT_DOUBLE_EQ(s.pooled.at("accuracy"), 0.5);
  EXPECT_DOUBLE_EQ(s.pooled.at("failed_folds"), 1);
  EXPECT_DOUBLE_EQ(s.pooled.at("scored_subjects"), 4);
  EXPECT_DOUBLE_EQ(s.foldMean.at("balanced_accuracy"), 0.5);  // the failed fold is not a fold of the mean
  EXPECT_DOUBLE_EQ(s.foldMean.at("n"), 4);
  EXPECT_TRUE(cv::FoldFailed(failed));
  EXPECT_FALSE(cv::FoldFailed(ok));
  o.folds = {failed};  // every fold failed: nothing is scored
  const cv::Summary none = cv::Summarise(o, t);
  EXPECT_TRUE(std::isnan(none.pooled.at("balanced_accuracy")));
  EXPECT_TRUE(std::isnan(none.pooled.at("auc")));
  EXPECT_DOUBLE_EQ(none.pooled.at("failed_folds"), 1);
  EXPECT_DOUBLE_EQ(none.pooled.at("scored_subjects"), 0);
}

namespace {

TEST(SourceWeighting, GroupScalesEqualiseGroupTracesAndKeepTheirSum) {
  // Three kernels of trace 1 in group 0 and one in group 1: T = (3, 1), mean 2 -> g = (2/3, 2/3, 2/3, 2).
  const Eigen::VectorXd g = gram::GroupScales({1, 1, 1, 1}, {0, 0, 0, 1});
  EXPECT_NEAR(g[0], 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(g[2], 2.0 / 3.0, 1e-15);
  EXPECT_NEAR(g[3], 2.0, 1e-15);
  // Already equal: unchanged. No groups: ones. A group whose kernels are all zero keeps scale 1.
  EXPECT_TRUE(gram::GroupScales({2, 2, 2, 6}, {0, 0, 0, 1}).isApprox(Eigen::VectorXd::Ones(4), 1e-15));
  EXPECT_TRUE(gram::GroupScales({5, 7}, {}).isApprox(Eigen::VectorXd::Ones(2), 0.0));
  const Eigen::VectorXd z = gram::GroupScales({0, 0, 4}, {0, 0, 1});
  EXPECT_EQ(z[0], 1.0);
  EXPECT_NEAR(z[2], 1.0, 1e-15);  // the only group with a trace is its own mean
}

TEST(SourceWeighting, FoldKernelsOfEveryGroupHaveOneTotalTraceFromTrainingSubjectsOnly) {
  // Random linear kernels: 4 in group 0, 1 in group 1; not normalised, so traces differ.
  const int n = 20;
  std::vector<Eigen::MatrixXd> kernels;
  for (int k = 0; k < 5; ++k) {
    Eigen::MatrixXd X = Eigen::MatrixXd::Random(n, 3 + k) * (1.0 + k);
    kernels.push_back(X * X.transpose());
  }
  gram::Preprocessing pre;
  pre.centre = true;
  pre.normalise = false;
  pre.kernelGroups = {0, 0, 0, 0, 1};
  std::vector<int> train, test;
  for (int i = 0; i < n; ++i) (i % 5 == 0 ? test : train).push_back(i);
  const auto fold = gram::PrepareFold(gram::MemoryKernels(kernels), train, test, pre);
  double t0 = 0;
  for (int k = 0; k < 4; ++k) t0 += fold.train[static_cast<std::size_t>(k)].trace();
  EXPECT_NEAR(t0, fold.train[4].trace(), 1e-10 * t0);
  // The scales FoldScales reports are those PrepareFold applied (one kernel at a time gives the same blocks).
  const Eigen::VectorXi tr = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const Eigen::VectorXi te = Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size()));
  const Eigen::VectorXd g = neuromkl::testing::FoldScalesAt(gram::MemoryKernels(kernels), tr, te, pre);
  for (int k = 0; k < 5; ++k) {
    const auto one = gram::PrepareFoldKernel(kernels[static_cast<std::size_t>(k)], tr, te, pre, g[k]);
    EXPECT_TRUE(one.train.isApprox(fold.train[static_cast<std::size_t>(k)], 1e-14));
    EXPECT_TRUE(one.testTrain.isApprox(fold.test[static_cast<std::size_t>(k)], 1e-14));
  }
  // No leakage: a held-out subject's data change nothing of the training blocks (the scales come from them).
  auto changed = kernels;
  for (auto& K : changed) {
    K.row(test[1]) *= 3.0;
    K.col(test[1]) *= 3.0;
  }
  const auto again = gram::PrepareFold(gram::MemoryKernels(changed), train, test, pre);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(again.train[static_cast<std::size_t>(k)], fold.train[static_cast<std::size_t>(k)]);
}

}  // namespace

// Learners of the summed kernel get it prepared in place (gram::PreparedFold::Summed), not from a copy of every
// kernel.
namespace {

struct SummedFixture {
  std::vector<Eigen::MatrixXd> kernels;
  std::vector<int> train, test;
  Eigen::VectorXi tr, te;  ///< the same as index vectors
};

/// Centring, normalising and equal source weighting (groups {0, 1, 1}) each on and off.
std::vector<gram::Preprocessing> EveryPreprocessing() {
  std::vector<gram::Preprocessing> out;
  for (const bool centre : {true, false})
    for (const bool normalise : {true, false})
      for (const bool groups : {false, true}) {
        gram::Preprocessing pre;
        pre.centre = centre;
        pre.normalise = normalise;
        if (groups) pre.kernelGroups = {0, 1, 1};
        out.push_back(pre);
      }
  return out;
}

/// Three linear kernels of different scales over 47 subjects; test subject 2 equals the training mean
/// in kernel 0's features, so its centred self-similarity is 0 (a zero row after normalising).
SummedFixture MakeSummedFixture() {
  SummedFixture f;
  const int n = 47;
  for (int i = 0; i < n; ++i) (i % 4 == 2 ? f.test : f.train).push_back(i);
  std::swap(f.train[3], f.train[7]);  // fold orders are not always sorted
  for (int k = 0; k < 3; ++k) {
    Eigen::MatrixXd X = Eigen::MatrixXd::Random(n, 4 + 3 * k) * (1.0 + 2.0 * k);
    if (k == 0) {
      Eigen::RowVectorXd mean = Eigen::RowVectorXd::Zero(X.cols());
      for (int i : f.train) mean += X.row(i);
      X.row(2) = mean / static_cast<double>(f.train.size());
    }
    f.kernels.push_back(X * X.transpose());
  }
  f.tr = Eigen::Map<const Eigen::VectorXi>(f.train.data(), static_cast<Eigen::Index>(f.train.size()));
  f.te = Eigen::Map<const Eigen::VectorXi>(f.test.data(), static_cast<Eigen::Index>(f.test.size()));
  return f;
}

std::vector<int> WithUnlabelledRows(std::vector<int> train, const std::vector<int>& unlabelled) {
  train.insert(train.end(), unlabelled.begin(), unlabelled.end());
  return train;
}

/// PrepareFold's kernels summed as the learners sum them (CombineKernels: 0 + K_0 + K_1 + ...).
gram::FoldKernels SumOfPrepared(const SummedFixture& f, const gram::Preprocessing& pre) {
  const auto fold = gram::PrepareFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre);
  gram::FoldKernels sum;
  sum.train.assign(1, Eigen::MatrixXd::Zero(fold.train[0].rows(), fold.train[0].cols()));
  sum.test.assign(1, Eigen::MatrixXd::Zero(fold.test[0].rows(), fold.test[0].cols()));
  for (std::size_t j = 0; j < fold.train.size(); ++j) {
    sum.train[0] += fold.train[j];
    sum.test[0] += fold.test[j];
  }
  return sum;
}

TEST(SummedFold, EqualsTheSumOfPreparedKernelsForEveryPreprocessing) {
  // Copies and the summed kernel come from the same fold vectors and the same arithmetic per entry
  // (gram::PreparedEntry), added in kernel order as CombineKernels adds: equal bit for bit. Both agree
  // with the step-by-step preparation (SliceFold, CentreFold, NormaliseFold) to a few ulps.
  const auto f = MakeSummedFixture();
  const Eigen::VectorXi& tr = f.tr;
  const Eigen::VectorXi& te = f.te;
  for (const gram::Preprocessing& pre : EveryPreprocessing()) {
    const bool centre = pre.centre, normalise = pre.normalise;
    const std::string what = "centre " + std::to_string(centre) + " normalise " + std::to_string(normalise) + " groups " +
                             std::to_string(!pre.kernelGroups.empty());
    const auto expected = SumOfPrepared(f, pre);
    const auto got = neuromkl::testing::SummedFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre);
    ASSERT_EQ(got.train.size(), 1u);
    ASSERT_EQ(got.test.size(), 1u);
    EXPECT_EQ(got.train[0], expected.train[0]) << what;
    EXPECT_EQ(got.test[0], expected.test[0]) << what;
    // Against the step-by-step preparation of each kernel (means summed in another order: raw entries
    // up to ~1e3 without normalising, 1e-13 of the largest is a few hundred ulps).
    const auto fold = gram::PrepareFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre);
    const Eigen::VectorXd g = neuromkl::testing::FoldScalesAt(gram::MemoryKernels(f.kernels), tr, te, pre);
    for (std::size_t j = 0; j < f.kernels.size(); ++j) {
      gram::FoldKernel fk = gram::SliceFold(f.kernels[j], tr, te);
      if (centre) gram::CentreFold(fk);
      if (normalise) gram::NormaliseFold(fk);
      const double scale = fk.train.cwiseAbs().maxCoeff() * g[static_cast<Eigen::Index>(j)];
      EXPECT_LE((fold.train[j] - g[static_cast<Eigen::Index>(j)] * fk.train).cwiseAbs().maxCoeff(), 1e-13 * scale) << what;
      EXPECT_LE((fold.test[j] - g[static_cast<Eigen::Index>(j)] * fk.testTrain).cwiseAbs().maxCoeff(), 1e-13 * scale) << what;
    }
    if (normalise && centre) {  // the test subject at the training mean of kernel 0 has a zero row there
      EXPECT_EQ(fold.test[0].row(0).cwiseAbs().maxCoeff(), 0.0);
      EXPECT_TRUE(got.test[0].allFinite());
    }
  }
}

TEST(SummedFold, NoKernelsGiveNoKernelNotAZeroKernel) {
  // A learner given no kernel says so (learners:NoKernel); a summed kernel of zeros would fit silently.
  const auto f = MakeSummedFixture();
  const auto none = neuromkl::testing::SummedFold(gram::MemoryKernels(learners::KernelList{}), f.train, f.test, gram::Preprocessing{});
  EXPECT_TRUE(none.train.empty());
  EXPECT_TRUE(none.test.empty());
  const learners::Targets y{learners::Task::Classification, Eigen::VectorXd::Ones(static_cast<Eigen::Index>(f.train.size()))};
  EXPECT_THROW(learners::MakeLearner("svm", {})->Fit(none.train, y), InputError);
}

TEST(SummedFold, WithCovariatesIsTheSumOfPreparedKernelsExactly) {
  // Residualising mixes rows: the kernels are prepared as PrepareFold prepares them and added in order.
  const auto f = MakeSummedFixture();
  const int n = static_cast<int>(f.kernels[0].rows());
  Eigen::MatrixXd design(n, 2);
  design.col(0).setOnes();
  design.col(1) = Eigen::VectorXd::LinSpaced(n, -1.0, 1.0).array().square();
  for (const bool groups : {false, true}) {
    gram::Preprocessing pre;
    pre.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
    if (groups) pre.kernelGroups = {0, 1, 1};
    const auto expected = SumOfPrepared(f, pre);
    const auto got = neuromkl::testing::SummedFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre);
    EXPECT_EQ(got.train[0], expected.train[0]) << groups;
    EXPECT_EQ(got.test[0], expected.test[0]) << groups;
  }
}

TEST(SummedFold, IdenticalOnOneAndTwoThreads) {
  const auto f = MakeSummedFixture();
  gram::Preprocessing pre;
  pre.kernelGroups = {0, 0, 1};
  gram::FoldKernels one, two;
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 1);
    one = neuromkl::testing::SummedFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre);
  }
  {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 2);
    two = neuromkl::testing::SummedFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre);
  }
  EXPECT_EQ(one.train[0], two.train[0]);
  EXPECT_EQ(one.test[0], two.test[0]);
}

TEST(SummedFold, NestedCvOnTheSummedKernelGivesTheResultsOfTheCopies) {
  // Every summed-kernel learner, binary, multiclass and regression: the fold's summed kernel (no copies)
  // against a copy of every kernel summed by the learner. The summed kernel is the copies' sum bit for bit,
  // so the fits are identical (same coefficients); test decisions differ only in the order of their sums
  // (sum_j beta_j (K_j coef) against (sum_j K_j) coef): a few ulps, 1e-12 of their scale is the bound.
  // The reported model is over the study's kernels (beta_j = 1 / R) and predicts the same test decisions.
  const auto p = neuromkl::testing::MakeMklProblem(42, 4, {0, 2}, 1.0, 37);
  const learners::Targets labelled{learners::Task::Classification, p.targets.y.head(36)};
  learners::Targets multiclass{learners::Task::Multiclass, Eigen::VectorXd(36), 3};
  learners::Targets regression{learners::Task::Regression, Eigen::VectorXd(36)};
  for (int i = 0; i < 36; ++i) {
    multiclass.y[i] = i % 3;
    regression.y[i] = p.targets.y[i] + 0.1 * (i % 5);
  }
  const std::vector<cv::LearnerPlan> classifiers = {{"svm", "svm", cv::ExpandGrid({}, {{"c", {0.1, 10}}})},
                                                    {"kelm", "kelm", cv::ExpandGrid({}, {{"c", {0.1, 10}}})},
                                                    {"admm", "bsadmm_kelm", cv::ExpandGrid({}, {})},
                                                    {"dk", "dkelm", cv::ExpandGrid({{"neighbours", 4}, {"deformation", 2}}, {})}};
  const std::vector<cv::LearnerPlan> multi = {classifiers[0], classifiers[1]};
  const std::vector<cv::LearnerPlan> regressors = {{"krr", "krr", cv::ExpandGrid({}, {{"lambda", {10, 0.1}}})}};
  struct Case {
    const learners::Targets* targets;
    const std::vector<cv::LearnerPlan>* plans;
    cv::Scheme scheme;
  };
  for (const Case& c : {Case{&labelled, &classifiers, cv::Scheme::StratifiedKFold}, Case{&multiclass, &multi, cv::Scheme::StratifiedKFold},
                        Case{&regression, &regressors, cv::Scheme::KFold}}) {
    const auto& t = *c.targets;
    const auto outer = cv::MakeFolds({c.scheme, 3, 1}, t.task, t.y, {}, {}, 11, "outer");
    const cv::InnerSplitter inner = [&](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
      return cv::MakeFolds({c.scheme, 3, 1}, t.task, y, {}, {}, 200 + f, "inner");
    };
    cv::NestedCvOptions summed, copies;
    summed.unlabelled = copies.unlabelled = 6;
    summed.probabilities = copies.probabilities = true;
    summed.biasCorrection = copies.biasCorrection = true;
    copies.sumKernelsInPlace = false;
    const auto a = cv::RunNestedCv(p.kernels, t, outer, inner, *c.plans, summed);
    const auto b = cv::RunNestedCv(p.kernels, t, outer, inner, *c.plans, copies);
    ASSERT_EQ(a.size(), c.plans->size());
    for (std::size_t l = 0; l < a.size(); ++l)
      for (std::size_t f = 0; f < outer.size(); ++f) {
        const auto& x = a[l].folds[f];
        const auto& y = b[l].folds[f];
        ASSERT_TRUE(x.error.empty()) << a[l].label << ": " << x.error;
        EXPECT_EQ(x.chosen, y.chosen) << a[l].label;
        EXPECT_EQ(x.model.beta, y.model.beta) << a[l].label;
        EXPECT_EQ(x.model.beta.size(), 4);
        const double scale = std::max(1.0, y.decision.cwiseAbs().maxCoeff());
        EXPECT_LE((x.decision - y.decision).cwiseAbs().maxCoeff(), 1e-12 * scale) << a[l].label;
        for (std::size_t g = 0; g < x.innerScores.size(); ++g)
          EXPECT_NEAR(x.innerScores[g], y.innerScores[g], 1e-12 * std::max(1.0, std::abs(y.innerScores[g]))) << a[l].label;
        if (t.task == learners::Task::Multiclass) {
          EXPECT_EQ(x.model.coefs, y.model.coefs) << a[l].label;
          EXPECT_LE((x.scores - y.scores).cwiseAbs().maxCoeff(), 1e-12 * std::max(1.0, y.scores.cwiseAbs().maxCoeff())) << a[l].label;
        } else {
          EXPECT_EQ(x.model.coef, y.model.coef) << a[l].label;
          // The expanded model applied to the study's own fold kernels predicts what the fold reported.
          const auto rows = x.unlabelled.empty() ? x.train : WithUnlabelledRows(x.train, x.unlabelled);
          const auto fold = gram::PrepareFold(gram::MemoryKernels(p.kernels), rows, x.test, gram::Preprocessing{});
          EXPECT_LE((x.model.Decision(fold.test) - x.decision).cwiseAbs().maxCoeff(), 1e-12 * scale) << a[l].label;
        }
        // Calibration is fitted on the inner out-of-fold decisions: the same to the decisions' rounding.
        ASSERT_EQ(x.probability.size(), y.probability.size());
        ASSERT_EQ(x.corrected.size(), y.corrected.size());
        if (x.probability.size() > 0) {
          EXPECT_LE((x.probability - y.probability).cwiseAbs().maxCoeff(), 1e-10) << a[l].label;
        }
        if (x.corrected.size() > 0) {
          EXPECT_LE((x.corrected - y.corrected).cwiseAbs().maxCoeff(), 1e-10 * scale) << a[l].label;
        }
      }
  }
}

TEST(SummedFold, ALearnersResultsDoNotDependOnTheOtherLearnersOfTheStudy) {
  // svm fits the fold's summed kernel whether or not a learner of kernel weights (which needs a copy of
  // every kernel) runs beside it: its results are the same bit for bit.
  const auto p = neuromkl::testing::MakeMklProblem(36, 3, {0}, 1.0, 41);
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 3, 1}, learners::Task::Classification, p.targets.y, {}, {}, 12, "outer");
  const auto plans = Plans();  // enmkl_svm, svm
  const auto both = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), plans, {});
  const auto alone = cv::RunNestedCv(p.kernels, p.targets, outer, Inner(3), {plans[1]}, {});
  for (std::size_t f = 0; f < outer.size(); ++f) {
    EXPECT_EQ(both[1].folds[f].decision, alone[0].folds[f].decision);
    EXPECT_EQ(both[1].folds[f].innerScores, alone[0].folds[f].innerScores);
    EXPECT_EQ(both[1].folds[f].model.coef, alone[0].folds[f].model.coef);
  }
}

TEST(SummedFold, AFoldKernelViewGivesTheProductsAndScalesOfThePreparedKernels) {
  // The weights stage's products K~_r A, from the kernels in place (no covariates) or from each fold copy.
  const auto f = MakeSummedFixture();
  const Eigen::VectorXi& tr = f.tr;
  const Eigen::VectorXi& te = f.te;
  const Eigen::MatrixXd A = Eigen::MatrixXd::Random(tr.size(), 3);
  const int n = static_cast<int>(f.kernels[0].rows());
  Eigen::MatrixXd design(n, 2);
  design.col(0).setOnes();
  design.col(1) = Eigen::VectorXd::LinSpaced(n, 0.0, 1.0);
  for (const bool covariates : {false, true}) {
    gram::Preprocessing pre;
    pre.kernelGroups = {0, 1, 1};
    if (covariates) pre.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
    const gram::MemoryKernels kernels(f.kernels);
    const auto view = kernels.OpenFold(f.train, f.test, pre);
    const Eigen::VectorXd scales = neuromkl::testing::FoldScalesAt(kernels, tr, te, pre);
    EXPECT_LE((view->Scales() - scales).cwiseAbs().maxCoeff(), 1e-14) << covariates;
    for (std::size_t r = 0; r < f.kernels.size(); ++r) {
      const Eigen::MatrixXd expected = gram::PrepareFoldKernel(f.kernels[r], tr, te, pre, 0.7).train * A;
      // Normalised entries are <= 1 and A's are <= 1: sums of 35 terms agree to 1e-13.
      EXPECT_LE((neuromkl::testing::FoldProducts(*view, r, A, 0.7, f.kernels.size()) - expected).cwiseAbs().maxCoeff(), 1e-13) << covariates;
    }
  }
}

TEST(SummedFold, PreparingIntoAnotherFoldsKernelsGivesTheSameBlocks) {
  // Nested CV hands a finished fold task's copies to the next task: whatever they held before (another
  // fold of the same size, or of another size), the blocks are PrepareFold's.
  const auto f = MakeSummedFixture();
  gram::Preprocessing pre;
  pre.kernelGroups = {0, 1, 1};
  std::vector<int> otherTrain = f.train, otherTest = f.test;
  std::swap(otherTrain[0], otherTest[0]);  // same sizes, other subjects
  std::vector<int> smallerTrain(f.train.begin(), f.train.end() - 5);
  const auto expected = gram::PrepareFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre);
  for (const auto* before : {&otherTrain, &smallerTrain}) {
    gram::FoldKernels out = gram::PrepareFold(gram::MemoryKernels(f.kernels), *before, before == &otherTrain ? otherTest : f.test, pre);
    const double* storage = out.train[0].data();
    neuromkl::testing::PrepareFoldInto(gram::MemoryKernels(f.kernels), f.train, f.test, pre, out);
    if (before == &otherTrain) {
      EXPECT_EQ(out.train[0].data(), storage);  // the same size: its storage is reused
    }
    for (std::size_t j = 0; j < f.kernels.size(); ++j) {
      EXPECT_EQ(out.train[j], expected.train[j]);
      EXPECT_EQ(out.test[j], expected.test[j]);
    }
  }
}

}  // namespace

// Learners of kernel weights read each fold's training kernels in place (gram::TrainingForm::InPlace), not from a
// copy of every kernel.
namespace {

TEST(FoldColumns, AreThePreparedCopiesColumnsBitForBit) {
  // Every preprocessing: each column's upper part is PrepareFold's training copy's, the test blocks are its test
  // blocks (equal source weighting scales both).
  const SummedFixture f = MakeSummedFixture();
  const Eigen::VectorXi& tr = f.tr;
  for (const gram::Preprocessing& pre : EveryPreprocessing()) {
    const gram::MemoryKernels kernels(f.kernels);
    const gram::FoldKernels copies = gram::PrepareFold(kernels, f.train, f.test, pre);
    const gram::WeightedKernels inPlace = neuromkl::testing::WeightedFold(kernels, f.train, f.test, pre, gram::TrainingForm::InPlace);
    ASSERT_TRUE(inPlace.train.empty());
    ASSERT_EQ(inPlace.kernels->Count(), 3);
    ASSERT_EQ(inPlace.kernels->Size(), tr.size());
    // A unit weight combines one kernel: its upper triangle as the stack read it, mirrored, bit for bit.
    const auto stack = inPlace.kernels->Stack();
    for (Eigen::Index k = 0; k < 3; ++k) {
      const Eigen::MatrixXd expected = copies.train[static_cast<std::size_t>(k)].selfadjointView<Eigen::Upper>();
      EXPECT_EQ(stack->Combine(Eigen::VectorXd::Unit(3, k)), expected) << k;
    }
    // Below kPackedStackBelow the test blocks are held, the copies' bit for bit.
    EXPECT_EQ(inPlace.test, copies.test);
  }
}

TEST(FoldColumns, RefuseCovariates) {
  // Residualising mixes rows: such folds are not columns of the study's kernels (nested CV copies them).
  const SummedFixture f = MakeSummedFixture();
  gram::Preprocessing pre;
  const Eigen::MatrixXd design = Eigen::MatrixXd::Random(47, 2);
  pre.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
  try {
    neuromkl::testing::WeightedFold(gram::MemoryKernels(f.kernels), f.train, f.test, pre, gram::TrainingForm::InPlace);
    ADD_FAILURE() << "expected cv:ColumnsWithCovariates";
  } catch (const InputError& e) {
    EXPECT_EQ(e.code(), "cv:ColumnsWithCovariates");
  }
}

TEST(FoldColumns, NestedCvOnColumnsGivesTheResultsOfTheCopiesBitForBit) {
  // Every learner of kernel weights, binary (with a grid, probabilities and equal source weighting),
  // multiclass (shared and per-class weights) and regression (bias correction): the training kernels read in
  // place are the copies' values, so every fit, inner score and decision is the same bit for bit. With
  // covariates both runs copy (the option changes nothing), checked too.
  const auto p = neuromkl::testing::MakeMklProblem(42, 4, {0, 2}, 1.0, 43);
  learners::Targets multiclass{learners::Task::Multiclass, Eigen::VectorXd(42), 3};
  learners::Targets regression{learners::Task::Regression, Eigen::VectorXd(42)};
  for (int i = 0; i < 42; ++i) {
    multiclass.y[i] = i % 3;
    regression.y[i] = p.targets.y[i] + 0.1 * (i % 5);
  }
  const std::vector<cv::LearnerPlan> classifiers = {{"en", "enmkl_svm", cv::ExpandGrid({}, {{"c", {0.1, 10}}, {"mu", {0.5, 1.0}}})},
                                                    {"simple", "simplemkl", cv::ExpandGrid({}, {{"c", {1, 10}}})},
                                                    {"mkelm", "mkelm", cv::ExpandGrid({}, {})},
                                                    {"bp", "mkl_bp", cv::ExpandGrid({}, {})},
                                                    {"svm", "svm", cv::ExpandGrid({}, {})}};  // a summed learner beside them
  const std::vector<cv::LearnerPlan> multi = {classifiers[0], classifiers[2]};
  const std::vector<cv::LearnerPlan> regressors = {{"enkrr", "enmkl_krr", cv::ExpandGrid({}, {{"lambda", {10, 0.1}}})},
                                                   {"simple", "simplemkl", cv::ExpandGrid({}, {})}};
  struct Case {
    const learners::Targets* targets;
    const std::vector<cv::LearnerPlan>* plans;
    cv::Scheme scheme;
    learners::MulticlassWeights weights;
    bool covariates;
  };
  const Eigen::MatrixXd design = Eigen::MatrixXd::Random(42, 2);
  for (const Case& c : {Case{&p.targets, &classifiers, cv::Scheme::StratifiedKFold, learners::MulticlassWeights::Shared, false},
                        Case{&p.targets, &classifiers, cv::Scheme::StratifiedKFold, learners::MulticlassWeights::Shared, true},
                        Case{&multiclass, &multi, cv::Scheme::StratifiedKFold, learners::MulticlassWeights::Shared, false},
                        Case{&multiclass, &multi, cv::Scheme::StratifiedKFold, learners::MulticlassWeights::PerClass, false},
                        Case{&regression, &regressors, cv::Scheme::KFold, learners::MulticlassWeights::Shared, false}}) {
    const auto& t = *c.targets;
    const auto outer = cv::MakeFolds({c.scheme, 3, 1}, t.task, t.y, {}, {}, 13, "outer");
    const cv::InnerSplitter inner = [&](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
      return cv::MakeFolds({c.scheme, 3, 1}, t.task, y, {}, {}, 300 + f, "inner");
    };
    cv::NestedCvOptions columns, copies;
    columns.probabilities = copies.probabilities = true;
    columns.biasCorrection = copies.biasCorrection = true;
    columns.multiclassWeights = copies.multiclassWeights = c.weights;
    columns.preprocessing.kernelGroups = copies.preprocessing.kernelGroups = {0, 0, 1, 1};
    if (c.covariates) columns.preprocessing.covariates = copies.preprocessing.covariates = std::make_shared<const gram::Covariates>(gram::Covariates{design, {}, {}});
    columns.columnsInPlace = cv::ColumnsInPlace::Always;
    copies.columnsInPlace = cv::ColumnsInPlace::Never;
    const auto a = cv::RunNestedCv(p.kernels, t, outer, inner, *c.plans, columns);
    const auto b = cv::RunNestedCv(p.kernels, t, outer, inner, *c.plans, copies);
    ASSERT_EQ(a.size(), c.plans->size());
    for (std::size_t l = 0; l < a.size(); ++l)
      for (std::size_t f = 0; f < outer.size(); ++f) {
        const auto& x = a[l].folds[f];
        const auto& y = b[l].folds[f];
        ASSERT_TRUE(x.error.empty()) << a[l].label << ": " << x.error;
        EXPECT_EQ(x.chosen, y.chosen) << a[l].label;
        EXPECT_EQ(x.model.beta, y.model.beta) << a[l].label;
        EXPECT_EQ(x.model.betas, y.model.betas) << a[l].label;
        EXPECT_EQ(x.model.coef, y.model.coef) << a[l].label;
        EXPECT_EQ(x.model.coefs, y.model.coefs) << a[l].label;
        EXPECT_EQ(x.decision, y.decision) << a[l].label;
        EXPECT_EQ(x.scores, y.scores) << a[l].label;
        EXPECT_EQ(x.probability, y.probability) << a[l].label;
        EXPECT_EQ(x.corrected, y.corrected) << a[l].label;
        for (std::size_t g = 0; g < x.innerScores.size(); ++g) {
          if (!std::isnan(y.innerScores[g])) {
            EXPECT_EQ(x.innerScores[g], y.innerScores[g]) << a[l].label;
          }
        }
      }
  }
}

}  // namespace
