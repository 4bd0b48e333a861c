// Nested-CV benchmark (issue 5): n = 200 subjects, 116 region kernels (synthetic regions of
// 20..400 features, 6 carrying a class difference), 5 outer x 5 inner stratified folds:
//   ENMKL-SVM over the 7 x 10 (C x mu) grid of seed 004, SVM and SimpleMKL over C (7 values),
// on 1 and 2 threads (wall time and learner fits), then a permutation test.
// Usage: bench_nested_cv [permutations (default 100)] [permutation learner: svm|enmkl_svm|simplemkl (default svm)]
#include <chrono>
#include <cstdio>
#include <random>
#include <string>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using Clock = std::chrono::steady_clock;

static double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int main(int argc, char** argv) {
  const int permutations = argc > 1 ? std::stoi(argv[1]) : 100;
  const std::string permLearner = argc > 2 ? argv[2] : "svm";
  const int n = 200, m = 116;
  std::mt19937 rng(7);
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int> size(20, 400);
  learners::Targets targets{learners::Task::Classification, Eigen::VectorXd(n)};
  for (int i = 0; i < n; ++i) targets.y[i] = i % 2 ? 1.0 : -1.0;
  learners::KernelList kernels;
  for (int j = 0; j < m; ++j) {
    Eigen::MatrixXd X(n, size(rng));
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = normal(rng) + 3.0;  // non-zero mean: centring matters
    if (j < 6) X.leftCols(5).colwise() += 0.4 * targets.y;
    kernels.push_back(X * X.transpose());
  }
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 5, 1}, targets.task, targets.y, {}, {}, 1, "outer");
  const cv::InnerSplitter inner = [](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({cv::Scheme::StratifiedKFold, 5, 1}, learners::Task::Classification, y, {}, {}, cv::DeriveSeed(1, 1000 + f), "inner");
  };
  const std::vector<double> C = {1e-3, 1e-2, 1e-1, 1, 10, 100, 1000};
  const std::vector<double> mu = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  const std::vector<cv::LearnerPlan> plans = {{"enmkl_svm", "enmkl_svm", cv::ExpandGrid({}, {{"c", C}, {"mu", mu}})},
                                              {"svm", "svm", cv::ExpandGrid({}, {{"c", C}})},
                                              {"simplemkl", "simplemkl", cv::ExpandGrid({}, {{"c", C}})}};
  std::printf("n = %d, %d kernels, 5 x 5 nested CV\n%-10s %8s %8s %10s %10s\n", n, m, "learner", "threads", "fits", "seconds", "BA");
  for (int threads : {1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    for (const auto& plan : plans) {
      const auto t = Clock::now();
      const auto res = cv::RunNestedCv(kernels, targets, outer, inner, {plan}, {});
      const double s = Since(t);
      std::printf("%-10s %8d %8ld %10.2f %10.3f\n", plan.label.c_str(), threads, res[0].fits, s,
                  cv::Summarise(res[0], targets).pooled.at("balanced_accuracy"));
      if (plan.label == "enmkl_svm" && threads == 2)
        std::printf("           target: ENMKL nested CV under 30 s on 2 cores: %s\n", s < 30 ? "met" : "NOT met");
    }
  }
  if (permutations > 0) {
    cv::LearnerPlan plan;
    for (const auto& p : plans)
      if (p.label == permLearner) plan = p;
    const auto t = Clock::now();
    std::vector<double> null(static_cast<std::size_t>(permutations));
    tbb::parallel_for(0, permutations, [&](int p) {
      const auto perm = cv::PermuteWithinGroups(n, {}, cv::DeriveSeed(9, static_cast<std::uint64_t>(p)));
      learners::Targets permuted{targets.task, Eigen::VectorXd(n)};
      for (int i = 0; i < n; ++i) permuted.y[i] = targets.y[perm[static_cast<std::size_t>(i)]];
      const auto res = cv::RunNestedCv(kernels, permuted, outer, inner, {plan}, {});
      null[static_cast<std::size_t>(p)] = cv::Summarise(res[0], permuted).pooled.at("balanced_accuracy");
    });
    double mean = 0;
    for (double v : null) mean += v;
    std::printf("%d-permutation test of %s (whole nested CV per permutation, 2 threads): %.1f s, null mean BA %.3f\n", permutations,
                permLearner.c_str(), Since(t), mean / permutations);
  }
  return 0;
}
