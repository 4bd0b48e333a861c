// Nested-CV benchmark: n = 200 subjects, 116 region kernels (synthetic regions of
// 20..400 features, 6 carrying a class difference), 5 outer x 5 inner stratified folds:
//   ENMKL-SVM over the 7 x 10 (C x mu) grid of ENMKL (Mourao-Miranda et al.), SVM and SimpleMKL over C (7 values),
// on 1 and 2 threads (wall time and learner fits), then a permutation test.
// Usage: bench_nested_cv [permutations (default 100)] [permutation learner: svm|enmkl_svm|simplemkl (default svm)]
//                        [subjects (default 200)] [table: 1 = run the learner table first (default), 0 = permutations only,
//                        or a learner label (enmkl_svm, svm, simplemkl) = that learner's rows only]
// The permutation target: `bench_nested_cv 6 enmkl_svm 192 0` times 6 permutations (each a whole
// nested CV over the default 7 x 10 grid) and extrapolates to 1,000; permutations are independent, so the
// time is linear in their number. It runs twice, side by side: with the fits of a larger C taken from a smaller C's
// where no dual variable is at its bound (NestedCvOptions::reuseLargerC, the default), then with every grid point fitted.
// Memory mode (folds in flight): `bench_nested_cv memory n [budget GiB]` runs a 5 x 5 nested CV
// of SVM and KELM (fixed parameters, inner CV for Platt scaling, as `neuromkl run` does for a binary
// target) on n x 116 kernels and prints the peak RSS against the kernels; budget 0 (default) = the
// memory available; threads (4th argument, default all). Run it with the default and with a small budget
// (one fold at a time). It runs twice, side by side: the fold's summed kernel prepared in place (the
// default: svm and kelm fit the sum), then, for comparison, a copy of every kernel per fold (peak RSS is the
// process's, so the smaller run goes first); 5th argument `summed` or `copies` runs one of them only.
// `bench_nested_cv sweep [seeds (default 40)] [enmkl_svm|enmkl_krr] [l1]`: single ENMKL fits on small problems over seeds x mu x C
// (SweepMode), printing the fits that did not converge.
// `bench_nested_cv memory-mkl n [budget GiB] [threads] [both|columns|copies]` does the same for a learner of
// kernel weights (ENMKL-SVM, C = 1, mu = 0.5, no inner CV: the 5 outer refits): its training kernels read in
// place (FoldColumns, test blocks copied), then a copy of every kernel per fold.
// `bench_nested_cv memory-mkl n [budget GiB] [threads] compact` runs the same on the compact store (float32,
// gram::CompactKernels: the float64 kernels are never all held, each is made and rounded in turn), the
// n = 5,000 case (nested CV at 5,000 x 116 on a 24 GiB machine); `... float32-float64` runs the store, then the float64 kernels read in place,
// side by side (peak RSS, time, largest decision difference); `... store-copies` runs the store with copies of the
// training kernels, float32 (NestedCvOptions::float32FoldCopies, the default) then float64, side by side (peak RSS is
// the process's: the smaller run goes first).
#include <chrono>
#include <ctime>
#include <cstring>
#include <sys/resource.h>
#include <cstdio>
#include <algorithm>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/gram/memory.hpp"
#include "neuromkl/gram/compact.hpp"
#include "learner_fixtures.hpp"
#include "neuromkl/learners/learner.hpp"

using namespace neuromkl;
using Clock = std::chrono::steady_clock;

static double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
static double CpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

static double PeakRssGib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / (1024.0 * 1024.0);  // ru_maxrss is in KiB on Linux
}

static int MemoryMode(int n, double budgetGib, const std::string& way, bool mkl) {
  std::mt19937 rng(11);
  std::normal_distribution<double> normal;
  learners::Targets targets{learners::Task::Classification, Eigen::VectorXd(n)};
  for (int i = 0; i < n; ++i) targets.y[i] = i % 2 ? 1.0 : -1.0;
  const bool compact = way == "compact" || way == "float32-float64" || way == "store-copies";
  const bool float64 = way != "compact" && way != "store-copies";
  learners::KernelList kernels;
  gram::CompactKernelList store;
  store.centred = true;
  for (int j = 0; j < 116; ++j) {
    Eigen::MatrixXd X(n, 20);
    for (Eigen::Index k = 0; k < X.size(); ++k) X.data()[k] = normal(rng);
    if (j < 6) X.leftCols(5).colwise() += 0.4 * targets.y;
    Eigen::MatrixXd K = X * X.transpose();
    if (compact) gram::AppendCompactKernel(store, K);
    if (float64) kernels.push_back(std::move(K));
  }
  const double kernelGib = 116.0 * n * n * 8 / (1ULL << 30), storeGib = static_cast<double>(gram::CompactBytes(116, n)) / (1ULL << 30);
  const double before = PeakRssGib();
  const auto outer = cv::MakeFolds({cv::Scheme::StratifiedKFold, 5, 1}, targets.task, targets.y, {}, {}, 1, "outer");
  const cv::InnerSplitter inner = [](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return cv::MakeFolds({cv::Scheme::StratifiedKFold, 5, 1}, learners::Task::Classification, y, {}, {}, cv::DeriveSeed(1, 1000 + f), "inner");
  };
  std::vector<cv::LearnerPlan> plans;
  for (const char* name : mkl ? std::vector<const char*>{"enmkl_svm"} : std::vector<const char*>{"svm", "kelm"})
    plans.push_back({name, name, cv::ExpandGrid(mkl ? learners::ParamMap{{"c", 1}, {"mu", 0.5}} : learners::ParamMap{{"c", 1}}, {})});
  const char* inPlaceName = mkl ? "columns" : "summed";
  struct Run {
    bool store, inPlace, float32Copies = true;
  };
  std::vector<Run> runs;
  if (way == "store-copies") {
    runs.push_back({true, false, true});
    runs.push_back({true, false, false});
  } else if (compact) {
    runs.push_back({true, true});
    if (float64) runs.push_back({false, true});
  } else {
    for (const bool inPlace : {true, false})
      if (way == "both" || way == (inPlace ? inPlaceName : "copies")) runs.push_back({false, inPlace});
  }
  std::vector<cv::LearnerOutcome> previous;
  double largest = 0;
  for (const Run& run : runs) {
    const bool inPlace = run.inPlace;
    cv::NestedCvOptions options;
    options.probabilities = !mkl;
    if (mkl) options.columnsInPlace = inPlace ? cv::ColumnsInPlace::Always : cv::ColumnsInPlace::Never;
    if (!mkl) options.sumKernelsInPlace = inPlace;
    options.float32FoldCopies = run.float32Copies;
    options.memoryBudgetBytes = static_cast<std::uint64_t>(budgetGib * (1ULL << 30));
    const auto t = Clock::now();
    const double cpu0 = CpuSeconds();
    auto res = run.store ? cv::RunNestedCv(gram::MemoryKernels(store), targets, outer, inner, plans, options) : cv::RunNestedCv(kernels, targets, outer, inner, plans, options);
    const double wall = Since(t), cpu = CpuSeconds() - cpu0;
    const double stackGib = run.store ? storeGib : kernelGib;
    std::printf("n = %d x 116 kernels = %.2f GiB (%s); %s; budget %s; %d threads: nested CV %.1f s (CPU %.1f s), peak RSS %.2f GiB = %.2fx the "
                "kernels (%.2f GiB before the CV); BA %s %.3f\n",
                n, stackGib, run.store ? "float32 store" : "float64",
                inPlace ? (mkl ? "training kernels read in place" : "summed kernel in place")
                        : (run.store && mkl && run.float32Copies ? "float32 copies of every kernel" : "copies of every kernel"),
                budgetGib > 0 ? (std::to_string(budgetGib) + " GiB").c_str() : "available memory",
                static_cast<int>(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism)), wall, cpu, PeakRssGib(),
                PeakRssGib() / stackGib, before, plans[0].label.c_str(), cv::Summarise(res[0], targets).pooled.at("balanced_accuracy"));
    for (std::size_t l = 0; l < res.size(); ++l)
      for (const auto& fold : res[l].folds) largest = std::max(largest, fold.decision.cwiseAbs().maxCoeff());
    if (!previous.empty()) {
      double diff = 0;
      for (std::size_t l = 0; l < res.size(); ++l)
        for (std::size_t f = 0; f < res[l].folds.size(); ++f)
          diff = std::max(diff, (res[l].folds[f].decision - previous[l].folds[f].decision).cwiseAbs().maxCoeff());
      std::printf("largest decision difference between the two: %.2e (relative to the largest decision: %.2e)\n", diff, diff / largest);
    }
    previous = std::move(res);
  }
  return 0;
}

/// Convergence sweep: single ENMKL fits on the learner tests' problems, MakeMklProblem(60, 12, {0, 3, 7}, 0.8,
/// seed) (cosine-normalised linear kernels of 6 features, 3 of them shifted along the labels), over seeds x mu {0.3, 0.5,
/// 0.7, 0.9} (or mu = 1 alone: `sweep seeds learner l1`) x C (or lambda) {0.1, 1, 10, 100}. Prints every fit that did
/// not converge and the totals: a fit that cycles to its iteration cap is a defect (it costs time and returns weights
/// short of the optimum), and which fits cycle moves with the last bits of the quadratics, so a change of arithmetic is
/// checked here.
static int SweepMode(int seeds, const std::string& learner, bool l1) {
  const bool krr = learner == "enmkl_krr";
  long iterations = 0;
  int fits = 0, notConverged = 0, worst = 0;
  const auto t = Clock::now();
  for (int seed = 1; seed <= seeds; ++seed) {
    const auto p = testing::MakeMklProblem(60, 12, {0, 3, 7}, 0.8, static_cast<unsigned>(seed),
                                           krr ? learners::Task::Regression : learners::Task::Classification);
    for (const double mu : l1 ? std::vector<double>{1.0} : std::vector<double>{0.3, 0.5, 0.7, 0.9})
      for (const double C : {0.1, 1.0, 10.0, 100.0}) {
        const auto model = learners::MakeLearner(learner, {{krr ? "lambda" : "c", C}, {"mu", mu}})->Fit(p.kernels, p.targets);
        ++fits;
        iterations += model.info.iterations;
        worst = std::max(worst, model.info.iterations);
        if (model.info.status != learners::FitStatus::Converged) {
          ++notConverged;
          std::printf("not converged (%s): seed %d, mu %.1f, %s %g, %d iterations\n", std::string(learners::ToString(model.info.status)).c_str(), seed,
                      mu, krr ? "lambda" : "C", C, model.info.iterations);
        }
      }
  }
  std::printf("%s sweep: %d fits in %.1f s, %ld iterations (largest %d), %d not converged\n", learner.c_str(), fits, Since(t), iterations, worst,
              notConverged);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "sweep") == 0)
    return SweepMode(argc > 2 ? std::stoi(argv[2]) : 40, argc > 3 ? argv[3] : "enmkl_svm", argc > 4 && std::strcmp(argv[4], "l1") == 0);
  if (argc > 2 && (std::strcmp(argv[1], "memory") == 0 || std::strcmp(argv[1], "memory-mkl") == 0)) {
    const int threads = argc > 4 ? std::stoi(argv[4]) : 0;
    std::optional<tbb::global_control> limit;
    if (threads > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    return MemoryMode(std::stoi(argv[2]), argc > 3 ? std::stod(argv[3]) : 0.0, argc > 5 ? argv[5] : "both", std::strcmp(argv[1], "memory-mkl") == 0);
  }
  const int permutations = argc > 1 ? std::stoi(argv[1]) : 100;
  const std::string permLearner = argc > 2 ? argv[2] : "svm";
  const int n = argc > 3 ? std::stoi(argv[3]) : 200, m = 116;
  // 4th argument: 1 (default) the whole table, 0 none, or one learner's label (its rows only).
  const std::string tableArg = argc > 4 ? argv[4] : "1";
  const bool table = tableArg != "0";
  // 5th argument: one thread count only (for profiling one row); default both 1 and 2.
  const int onlyThreads = argc > 5 ? std::stoi(argv[5]) : 0;
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
  std::printf("n = %d, %d kernels, 5 x 5 nested CV (CPU = process CPU seconds, robust to a loaded machine)\n%-10s %8s %-13s %8s %10s %10s %8s\n", n, m,
              "learner", "threads", "fold work", "fits", "wall s", "CPU s", "BA");
  for (int threads : !table ? std::vector<int>{} : onlyThreads > 0 ? std::vector<int>{onlyThreads} : std::vector<int>{1, 2}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    for (const auto& plan : plans) {
      if (tableArg != "1" && tableArg != plan.label) continue;
      // Side by side in one run: every fit doing its own kernel check / stack / sum, then
      // shared per fold (learners::TrainingKernelCache); 1 thread only for the unshared peer.
      for (bool share : threads == 1 && onlyThreads == 0 ? std::vector<bool>{false, true} : std::vector<bool>{true}) {
        cv::NestedCvOptions options;
        options.shareFoldWork = share;
        const auto t = Clock::now();
        const double cpu0 = CpuSeconds();
        const auto res = cv::RunNestedCv(kernels, targets, outer, inner, {plan}, options);
        const double s = Since(t), cpu = CpuSeconds() - cpu0;
        // Inner fits that did not converge (capped or stalled) are counted: a fit cycling to its cap costs time
        // and compares a grid point short of its optimum, so a faster row with more of them is no gain.
        std::printf("%-10s %8d %-13s %8ld %10.2f %10.2f %8.3f   (inner fits not converged: %ld; a smaller C's: %ld; inner iterations %ld, SMO "
                    "iterations %ld)\n",
                    plan.label.c_str(), threads, share ? "shared" : "per fit", res[0].fits, s, cpu,
                    cv::Summarise(res[0], targets).pooled.at("balanced_accuracy"), res[0].innerNotConverged, res[0].innerReused, res[0].innerIterations,
                    res[0].innerSolverIterations);
        if (plan.label == "enmkl_svm" && threads == 2)
          std::printf("           target: ENMKL-SVM nested CV (7 x 10 grid) <= 4 s on 2 threads: %s (%.2f s)\n", s <= 4 ? "met" : "NOT met", s);
      }
    }
  }
  if (permutations > 0) {
    cv::LearnerPlan plan;
    for (const auto& p : plans)
      if (p.label == permLearner) plan = p;
    // Side by side in one run: the larger C's fits taken from a smaller C where its solution has no dual variable at the
    // bound (the default), then every grid point fitted. The null distributions agree up to the solvers' tolerances.
    std::vector<double> nullOf[2];
    double secondsOf[2] = {0, 0};
    for (const bool reuse : {true, false}) {
      cv::NestedCvOptions options;
      options.reuseLargerC = reuse;
      const auto t = Clock::now();
      std::vector<double>& null = nullOf[reuse ? 0 : 1];
      null.assign(static_cast<std::size_t>(permutations), 0.0);
      std::vector<long> fits(null.size()), steps(null.size()), smo(null.size()), notConverged(null.size()), reused(null.size());
      tbb::parallel_for(0, permutations, [&](int p) {
        const auto perm = cv::PermuteWithinGroups(n, {}, cv::DeriveSeed(9, static_cast<std::uint64_t>(p)));
        learners::Targets permuted{targets.task, Eigen::VectorXd(n)};
        for (int i = 0; i < n; ++i) permuted.y[i] = targets.y[perm[static_cast<std::size_t>(i)]];
        const auto res = cv::RunNestedCv(kernels, permuted, outer, inner, {plan}, options);
        const auto u = static_cast<std::size_t>(p);
        null[u] = cv::Summarise(res[0], permuted).pooled.at("balanced_accuracy");
        fits[u] = res[0].fits;
        steps[u] = res[0].innerIterations;
        smo[u] = res[0].innerSolverIterations;
        notConverged[u] = res[0].innerNotConverged;
        reused[u] = res[0].innerReused;
      });
      const double seconds = secondsOf[reuse ? 0 : 1] = Since(t);
      const double mean = std::accumulate(null.begin(), null.end(), 0.0) / permutations;
      const auto perPermutation = [&](const std::vector<long>& v) { return static_cast<double>(std::accumulate(v.begin(), v.end(), 0L)) / permutations; };
      std::printf("%d-permutation test of %s, n = %d (whole nested CV per permutation, %d threads), %s: %.1f s, null mean BA %.4f\n", permutations,
                  permLearner.c_str(), n, tbb::this_task_arena::max_concurrency(), reuse ? "larger C reused" : "every C fitted", seconds, mean);
      std::printf("           per permutation: %.0f fits (%.0f of them a smaller C's), %.0f inner weight steps, %.0f SMO iterations, %.1f inner fits not "
                  "converged\n",
                  perPermutation(fits), perPermutation(reused), perPermutation(steps), perPermutation(smo), perPermutation(notConverged));
      std::printf("           1,000 permutations extrapolated: %.1f min (goal for enmkl_svm at n = 192: <= 15 min on 2 cores)\n",
                  seconds * 1000.0 / permutations / 60.0);
    }
    double largest = 0;
    for (std::size_t p = 0; p < nullOf[0].size(); ++p) largest = std::max(largest, std::abs(nullOf[0][p] - nullOf[1][p]));
    std::printf("           reuse: %.2fx faster; largest difference of a permutation's BA between the two: %.2g\n", secondsOf[1] / secondsOf[0], largest);
  }
  return 0;
}
