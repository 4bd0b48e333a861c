// The training-kernel cache shares the kernels' check and packed stack between fits on
// the same kernels (a grid search). It must change nothing but the time: these tests compare fits
// with and without a cache bit for bit, count the work it saves, and check that it neither accepts
// bad input nor survives a change of kernel list.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "learner_fixtures.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using learners::FitOptions;
using learners::MakeLearner;
using learners::TrainingKernelCache;
using neuromkl::testing::MakeMklProblem;

namespace {

/// A grid search as nested CV runs it: warm starts from the previous point, one cache for all points.
std::vector<learners::Model> GridFits(const std::string& name, const std::string& param, const std::vector<double>& values,
                                      const learners::KernelList& K, const learners::Targets& t, TrainingKernelCache* cache) {
  std::vector<learners::Model> fits;
  for (double v : values) {
    FitOptions options;
    options.cache = cache;
    if (!fits.empty()) options.warmStart = &fits.back();
    fits.push_back(MakeLearner(name, {{param, v}})->Fit(K, t, options));
  }
  return fits;
}

}  // namespace

TEST(TrainingKernelCache, FitsAreBitIdenticalWithAndWithoutCache) {
  const auto p = MakeMklProblem(60, 12, {1, 4}, 0.8, 11);
  const auto reg = MakeMklProblem(50, 8, {2}, 0.8, 12, learners::Task::Regression);
  struct Case {
    std::string learner, param;
    std::vector<double> values;
    bool regression;
  };
  const std::vector<Case> cases = {{"enmkl_svm", "mu", {0.2, 0.6, 1.0}, false},  {"enmkl_krr", "mu", {0.3, 1.0}, true},
                                   {"simplemkl", "c", {0.1, 1, 10}, false},       {"mkl_bp", "c", {0.1, 1}, false},
                                   {"mkelm", "c", {0.1, 10}, false},              {"svm", "c", {0.1, 1}, false},
                                   {"krr", "lambda", {0.1, 1}, true},             {"kelm", "c", {0.1, 10}, false},
                                   {"bsadmm_kelm", "c", {0.1, 1}, false},         {"dkelm", "c", {0.1, 1}, false}};
  for (const auto& c : cases) {
    const auto& prob = c.regression ? reg : p;
    TrainingKernelCache cache;
    const auto with = GridFits(c.learner, c.param, c.values, prob.kernels, prob.targets, &cache);
    const auto without = GridFits(c.learner, c.param, c.values, prob.kernels, prob.targets, nullptr);
    for (std::size_t g = 0; g < with.size(); ++g) {
      // Exact equality: the cache hands the fit the same stack it would build itself.
      EXPECT_EQ(with[g].beta, without[g].beta) << c.learner << " point " << g;
      EXPECT_EQ(with[g].coef, without[g].coef) << c.learner << " point " << g;
      EXPECT_EQ(with[g].bias, without[g].bias) << c.learner << " point " << g;
    }
    EXPECT_EQ(cache.checksRun(), 1) << c.learner;  // one check of the kernels for the whole grid
    // Learners on the summed kernel build the sum once and no stack; the MKL learners the reverse.
    const bool onSum = c.learner == "svm" || c.learner == "krr" || c.learner == "kelm" || c.learner == "bsadmm_kelm" || c.learner == "dkelm";
    EXPECT_EQ(cache.stacksBuilt(), onSum ? 0 : 1) << c.learner;
    EXPECT_EQ(cache.sumsBuilt(), onSum ? 1 : 0) << c.learner;
  }
}

TEST(TrainingKernelCache, MulticlassOneVsRestSharesOneStack) {
  auto p = MakeMklProblem(60, 6, {0, 3}, 0.8, 13);
  p.targets.task = learners::Task::Multiclass;
  p.targets.classes = 3;
  for (Eigen::Index i = 0; i < p.targets.y.size(); ++i) p.targets.y[i] = static_cast<double>(i % 3);
  TrainingKernelCache cache;
  const auto perClass = MakeLearner("enmkl_svm", {}, learners::MulticlassWeights::PerClass);
  const auto with = perClass->Fit(p.kernels, p.targets, FitOptions{nullptr, &cache});
  const auto without = perClass->Fit(p.kernels, p.targets);
  EXPECT_EQ(with.coefs, without.coefs);
  EXPECT_EQ(with.betas, without.betas);
  EXPECT_EQ(cache.stacksBuilt(), 1);  // three one-vs-rest fits, one stack
}

TEST(TrainingKernelCache, AnotherKernelListRebindsTheCache) {
  const auto a = MakeMklProblem(40, 5, {1}, 0.8, 21), b = MakeMklProblem(40, 5, {3}, 0.8, 22);
  TrainingKernelCache cache;
  const auto learner = MakeLearner("enmkl_svm", {});
  const auto fa = learner->Fit(a.kernels, a.targets, FitOptions{nullptr, &cache});
  const auto fb = learner->Fit(b.kernels, b.targets, FitOptions{nullptr, &cache});
  EXPECT_EQ(cache.stacksBuilt(), 2);
  EXPECT_EQ(cache.checksRun(), 2);
  EXPECT_EQ(fb.beta, learner->Fit(b.kernels, b.targets).beta);  // not a's stack
  EXPECT_NE(fa.beta, fb.beta);
}

// The kernels that are not identically zero are found once per kernel list: a list bound after one
// with a zero kernel must not inherit its active set (here the zero kernel is the signal kernel of the
// next list, so an inherited set would change the fit).
TEST(TrainingKernelCache, TheActiveKernelsFollowTheBoundList) {
  auto withZero = MakeMklProblem(40, 5, {3}, 0.8, 23);
  withZero.kernels[1].setZero();
  const auto signalInOne = MakeMklProblem(40, 5, {1}, 0.8, 24);
  TrainingKernelCache cache;
  const auto learner = MakeLearner("enmkl_svm", {{"mu", 0.5}});
  const auto first = learner->Fit(withZero.kernels, withZero.targets, FitOptions{nullptr, &cache});
  EXPECT_EQ(first.beta[1], 0.0);
  const auto second = learner->Fit(signalInOne.kernels, signalInOne.targets, FitOptions{nullptr, &cache});
  EXPECT_GT(second.beta[1], 0.0);
  EXPECT_EQ(second.beta, learner->Fit(signalInOne.kernels, signalInOne.targets).beta);
}

TEST(TrainingKernelCache, BadInputIsRefusedOnEveryFit) {
  auto p = MakeMklProblem(30, 4, {1}, 0.8, 31);
  p.kernels[2](3, 5) = std::numeric_limits<double>::quiet_NaN();
  TrainingKernelCache cache;
  const auto learner = MakeLearner("enmkl_svm", {});
  // A failed check is not remembered as a pass.
  EXPECT_THROW(learner->Fit(p.kernels, p.targets, FitOptions{nullptr, &cache}), InputError);
  EXPECT_THROW(learner->Fit(p.kernels, p.targets, FitOptions{nullptr, &cache}), InputError);
  EXPECT_EQ(cache.checksRun(), 0);
  // Kernels checked once are still refused against targets of another size.
  const auto q = MakeMklProblem(30, 4, {1}, 0.8, 32);
  learner->Fit(q.kernels, q.targets, FitOptions{nullptr, &cache});
  learners::Targets shorter = q.targets;
  shorter.y.conservativeResize(29);
  EXPECT_THROW(learner->Fit(q.kernels, shorter, FitOptions{nullptr, &cache}), InputError);
}
