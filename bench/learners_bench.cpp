// Learner benchmarks.
//  - SVM vs LIBSVM (peer, same precomputed kernel, n = 500 and 2000): decision values must agree to
//    1e-6 relative (checked before timing, printed), then both are timed.
//  - ENMKL-SVM, SimpleMKL and ENMKL-KRR on n = 200 subjects x 116 region kernels with fixed C, mu:
//    iterations, inner solves, time, and the ratio to one SVM solve on the summed kernel.
//  - Active-set MKL: ENMKL-SVM fit vs one SVM solve in the same run, SimpleMKL at duality
//    gaps 1e-2, 1e-4, 1e-7, ENMKL on real vs permuted labels (192 x 116), ENMKL refit at n = 2000.
//  - KELM (one Cholesky solve) vs BSADMM-KELM (ADMM on the hinge QP) vs SMO-SVM on the same
//    kernel and C, n = 200, 500, 2000; the ADMM-with-bias solution is checked against SMO first
//    (decision values to 1e-4 relative). MK-ELM and MKL-BP on the 200 x 116 problem.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>

#include <tbb/task_arena.h>

#include "learner_fixtures.hpp"
#include "neuromkl/learners/learner.hpp"
#include "smo.hpp"  // the solver itself, for the shrinking on/off comparison
#ifdef NEUROMKL_HAVE_LIBSVM
#include <svm.h>
#endif

using namespace neuromkl;

namespace {

/// n subjects, m regions of 20..400 voxels, the first few with a class shift (the learner tests' generator).
using Problem = neuromkl::testing::MklProblem;
using neuromkl::testing::RegionLikeProblem;

Eigen::MatrixXd Sum(const learners::KernelList& ks) {
  Eigen::MatrixXd K = ks[0];
  for (std::size_t j = 1; j < ks.size(); ++j) K += ks[j];
  return K;
}

#ifdef NEUROMKL_HAVE_LIBSVM
struct LibsvmData {
  std::vector<std::vector<svm_node>> rows;
  std::vector<svm_node*> x;
  std::vector<double> y;
  svm_problem prob{};
  svm_parameter param{};
  LibsvmData(const Eigen::MatrixXd& K, const Eigen::VectorXd& labels, double C, double eps, bool shrinking) {
    const auto n = K.rows();
    rows.resize(static_cast<std::size_t>(n));
    for (Eigen::Index i = 0; i < n; ++i) {
      auto& r = rows[static_cast<std::size_t>(i)];
      r.push_back({0, static_cast<double>(i + 1)});  // LIBSVM's precomputed format: 0:sample id
      for (Eigen::Index j = 0; j < n; ++j) r.push_back({static_cast<int>(j + 1), K(i, j)});
      r.push_back({-1, 0});
      x.push_back(r.data());
      y.push_back(labels[i]);
    }
    prob.l = static_cast<int>(n);
    prob.y = y.data();
    prob.x = x.data();
    param.svm_type = C_SVC;
    param.kernel_type = PRECOMPUTED;
    param.C = C;
    param.eps = eps;
    param.cache_size = 200;
    param.shrinking = shrinking ? 1 : 0;
  }
};
#endif

const Problem& Shared(int n) {
  static std::map<int, Problem> cache;
  auto it = cache.find(n);
  if (it == cache.end()) it = cache.emplace(n, RegionLikeProblem(n, 1, 1, 42 + static_cast<unsigned>(n))).first;
  return it->second;
}

void BM_NeuromklSvm(benchmark::State& state) {
  const auto& p = Shared(static_cast<int>(state.range(0)));
  const auto svm = learners::MakeLearner("svm", {{"c", 1.0}, {"tolerance", 1e-3}});
  for (auto _ : state) benchmark::DoNotOptimize(svm->Fit(p.kernels, p.targets));
}
BENCHMARK(BM_NeuromklSvm)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond);

// The same solver without shrinking: what LIBSVM's shrinking heuristic saves, measured in the same run.
void BM_NeuromklSvmNoShrinking(benchmark::State& state) {
  const auto& p = Shared(static_cast<int>(state.range(0)));
  const Eigen::VectorXd minusOnes = Eigen::VectorXd::Constant(p.targets.y.size(), -1.0);
  for (auto _ : state) benchmark::DoNotOptimize(learners::SolveSmo(p.kernels[0], p.targets.y, minusOnes, 1.0, nullptr, 1e-3, 10'000'000, false));
}
BENCHMARK(BM_NeuromklSvmNoShrinking)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond);

#ifdef NEUROMKL_HAVE_LIBSVM
void BM_LibsvmShrinking(benchmark::State& state) {
  const auto& p = Shared(static_cast<int>(state.range(0)));
  LibsvmData d(p.kernels[0], p.targets.y, 1.0, 1e-3, true);
  for (auto _ : state) {
    svm_model* m = svm_train(&d.prob, &d.param);
    benchmark::DoNotOptimize(m);
    svm_free_and_destroy_model(&m);
  }
}
BENCHMARK(BM_LibsvmShrinking)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond);

void BM_LibsvmNoShrinking(benchmark::State& state) {
  const auto& p = Shared(static_cast<int>(state.range(0)));
  LibsvmData d(p.kernels[0], p.targets.y, 1.0, 1e-3, false);
  for (auto _ : state) {
    svm_model* m = svm_train(&d.prob, &d.param);
    benchmark::DoNotOptimize(m);
    svm_free_and_destroy_model(&m);
  }
}
BENCHMARK(BM_LibsvmNoShrinking)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond);

void CheckAgreementWithLibsvm() {
  for (int n : {500, 2000}) {
    const auto& p = Shared(n);
    for (auto [shrinking, eps] : {std::pair{false, 1e-3}, std::pair{true, 1e-3}, std::pair{true, 1e-8}}) {
      LibsvmData d(p.kernels[0], p.targets.y, 1.0, eps, shrinking);
      svm_set_print_string_function([](const char*) {});
      svm_model* m = svm_train(&d.prob, &d.param);
      const auto ours = learners::MakeLearner("svm", {{"c", 1.0}, {"tolerance", eps}})->Fit(p.kernels, p.targets);
      const Eigen::VectorXd f = ours.Decision(p.kernels);
      double worst = 0, scale = f.cwiseAbs().maxCoeff();
      for (int i = 0; i < n; ++i) {
        double dec = 0;
        svm_predict_values(m, d.x[static_cast<std::size_t>(i)], &dec);
        worst = std::max(worst, std::abs(dec - f[i]));
      }
      std::printf("agreement n=%d eps=%g LIBSVM shrinking=%d: max |f_ours - f_libsvm| / max|f| = %.2e (%s 1e-6)\n", n, eps, shrinking,
                  worst / scale, worst / scale <= 1e-6 ? "within" : "OUTSIDE");
      svm_free_and_destroy_model(&m);
    }
  }
}
#endif

const Problem& Regions() {
  static const Problem p = RegionLikeProblem(200, 116, 6, 7);
  return p;
}

void ReportMkl(benchmark::State& state, const learners::Model& m, double svmSeconds) {
  state.counters["iterations"] = m.info.iterations;
  state.counters["inner_solves"] = m.info.innerSolves;
  state.counters["selected"] = static_cast<double>((m.beta.array() > 1e-6).count());
  if (svmSeconds > 0) state.counters["x_one_svm"] = m.info.seconds / svmSeconds;
}

double OneSvmSeconds() {
  static const double s = [] {
    const auto& p = Regions();
    const auto K = Sum(p.kernels);
    double best = 1e9;
    for (int r = 0; r < 5; ++r) best = std::min(best, learners::MakeLearner("svm", {{"tolerance", 1e-5}})->Fit({K}, p.targets).info.seconds);
    return best;
  }();
  return s;
}

void BM_EnmklSvm_200x116(benchmark::State& state) {
  const auto& p = Regions();
  const auto l = learners::MakeLearner("enmkl_svm", {{"c", 1}, {"mu", 0.5}});
  learners::Model m;
  for (auto _ : state) m = l->Fit(p.kernels, p.targets);
  ReportMkl(state, m, OneSvmSeconds());
}
BENCHMARK(BM_EnmklSvm_200x116)->Unit(benchmark::kMillisecond);

void BM_SimpleMkl_200x116(benchmark::State& state) {
  const auto& p = Regions();
  const auto l = learners::MakeLearner("simplemkl", {{"c", 1}});
  learners::Model m;
  for (auto _ : state) m = l->Fit(p.kernels, p.targets);
  ReportMkl(state, m, OneSvmSeconds());
}
BENCHMARK(BM_SimpleMkl_200x116)->Unit(benchmark::kMillisecond);

void BM_EnmklKrr_200x116(benchmark::State& state) {
  auto p = Regions();
  p.targets.task = learners::Task::Regression;
  const auto l = learners::MakeLearner("enmkl_krr", {{"lambda", 1}, {"mu", 0.5}});
  learners::Model m;
  for (auto _ : state) m = l->Fit(p.kernels, p.targets);
  ReportMkl(state, m, 0);
}
BENCHMARK(BM_EnmklKrr_200x116)->Unit(benchmark::kMillisecond);

void BM_OneSvm_200_summed(benchmark::State& state) {
  const auto& p = Regions();
  const auto K = Sum(p.kernels);
  const auto l = learners::MakeLearner("svm", {{"tolerance", 1e-5}});
  for (auto _ : state) benchmark::DoNotOptimize(l->Fit({K}, p.targets));
}
BENCHMARK(BM_OneSvm_200_summed)->Unit(benchmark::kMillisecond);

// ---- active-set MKL ----
double CpuSeconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

/// CPU seconds per call of f, best of `reps` (CPU time: the machine may be shared).
template <class F>
double BestCpu(int reps, F&& f) {
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = CpuSeconds();
    f();
    best = std::min(best, CpuSeconds() - t0);
  }
  return best;
}

// ENMKL-SVM fit and one SVM solve on the summed kernel, timed in the same run (CPU time, best of
// 5): the ratio's target is <= 15. The SVM uses ENMKL's svm_tolerance (1e-8) and a looser
// 1e-5; both ratios are printed.
void BM_EnmklSvmVsOneSvm_200x116(benchmark::State& state) {
  const auto& p = Regions();
  const auto K = Sum(p.kernels);
  const auto enmkl = learners::MakeLearner("enmkl_svm", {{"c", 1}, {"mu", state.range(0) / 10.0}});
  learners::Model m;
  double fit = 0;
  for (auto _ : state) fit = BestCpu(5, [&] { m = enmkl->Fit(p.kernels, p.targets); });
  const double svm8 = BestCpu(20, [&] { benchmark::DoNotOptimize(learners::MakeLearner("svm", {{"tolerance", 1e-8}})->Fit({K}, p.targets)); });
  const double svm5 = BestCpu(20, [&] { benchmark::DoNotOptimize(learners::MakeLearner("svm", {{"tolerance", 1e-5}})->Fit({K}, p.targets)); });
  state.counters["fit_ms"] = 1e3 * fit;
  state.counters["svm_ms_tol1e-8"] = 1e3 * svm8;
  state.counters["x_svm_tol1e-8"] = fit / svm8;
  state.counters["x_svm_tol1e-5"] = fit / svm5;
  state.counters["iterations"] = m.info.iterations;
  state.counters["selected"] = static_cast<double>((m.beta.array() > 0).count());
}
BENCHMARK(BM_EnmklSvmVsOneSvm_200x116)->Arg(5)->Arg(10)->Unit(benchmark::kMillisecond)->Iterations(1);

// SimpleMKL at a tight duality gap and at the default.
void BM_SimpleMklGap_200x116(benchmark::State& state) {
  const auto& p = Regions();
  const double gap = std::pow(10.0, -static_cast<double>(state.range(0)));
  const auto l = learners::MakeLearner("simplemkl", {{"c", 1}, {"gap_tolerance", gap}, {"max_iterations", 100000}});
  learners::Model m;
  for (auto _ : state) m = l->Fit(p.kernels, p.targets);
  ReportMkl(state, m, 0);
  state.counters["gap"] = m.info.gap;
}
BENCHMARK(BM_SimpleMklGap_200x116)->Arg(2)->Arg(4)->Arg(7)->Unit(benchmark::kMillisecond)->Iterations(1);

// Permutation cost: ENMKL-SVM fits on a simulated 192 x 116 cohort with its real labels
// and with seeded permutations of them (near-null targets), over part of the default grid
// (c in {0.01, 1, 100} x mu in {0.1, 0.5, 1}); per-fit CPU time and iterations of each.
void BM_EnmklPermutedLabels_192x116(benchmark::State& state) {
  static const Problem real = RegionLikeProblem(192, 116, 6, 192);
  const bool permuted = state.range(0) != 0;
  std::vector<learners::Targets> targets;
  if (!permuted) targets.push_back(real.targets);
  for (unsigned r = 0; permuted && r < 3; ++r) {
    learners::Targets t = real.targets;
    std::mt19937 rng(100 + r);
    std::shuffle(t.y.data(), t.y.data() + t.y.size(), rng);
    targets.push_back(t);
  }
  double seconds = 0;
  long fits = 0, iterations = 0, smoIterations = 0, solves = 0;
  // One untimed fit first: the first fit of the process pays for first-touch page faults and cold caches (it took
  // twice as long as the same fit later), which would otherwise be charged to the real labels, timed first.
  static const bool warmed = [&] {
    benchmark::DoNotOptimize(learners::MakeLearner("enmkl_svm", {{"c", 0.01}, {"mu", 0.1}})->Fit(real.kernels, real.targets));
    return true;
  }();
  benchmark::DoNotOptimize(warmed);
  for (auto _ : state) {
    for (const auto& t : targets)
      for (double c : {0.01, 1.0, 100.0})
        for (double mu : {0.1, 0.5, 1.0}) {
          const double t0 = CpuSeconds();
          const auto m = learners::MakeLearner("enmkl_svm", {{"c", c}, {"mu", mu}})->Fit(real.kernels, t);
          seconds += CpuSeconds() - t0;
          iterations += m.info.iterations;
          smoIterations += m.info.innerIterations;
          solves += m.info.innerSolves;
          ++fits;
        }
  }
  // The target: a permuted fit no slower than a real one (the real labels run first, Arg(0)).
  static double realPerFit = 0;
  const double perFit = seconds / static_cast<double>(fits);
  if (!permuted) realPerFit = perFit;
  if (permuted && realPerFit > 0) {
    state.counters["x_real_labels"] = perFit / realPerFit;
    std::printf("ENMKL-SVM 192 x 116, per fit: permuted labels %.1f ms, real labels %.1f ms: %.2fx (target <= 1: %s)\n", 1e3 * perFit,
                1e3 * realPerFit, perFit / realPerFit, perFit <= realPerFit ? "met" : "NOT met");
  }
  state.counters["ms_per_fit"] = 1e3 * perFit;
  state.counters["iterations_per_fit"] = static_cast<double>(iterations) / static_cast<double>(fits);
  state.counters["svm_solves_per_fit"] = static_cast<double>(solves) / static_cast<double>(fits);
  state.counters["smo_iterations_per_fit"] = static_cast<double>(smoIterations) / static_cast<double>(fits);
}
BENCHMARK(BM_EnmklPermutedLabels_192x116)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(1);

// ENMKL-SVM refit at n = 2000 x 116 kernels (target <= 3 s). About 3.7 GB of kernels
// (the fit itself needs no copy of them: KernelStack is a view); run it on its own
// (--benchmark_filter=Refit). Prints the figure against the target.
/// fit() timed in every iteration of `state` (CPU and wall seconds of the last), its model returned.
template <typename Fit>
learners::Model TimedFit(benchmark::State& state, const Fit& fit, double& cpuSeconds, double& wallSeconds) {
  learners::Model m;
  for (auto _ : state) {
    const double t0 = CpuSeconds();
    const auto w0 = std::chrono::steady_clock::now();
    m = fit();
    cpuSeconds = CpuSeconds() - t0;
    wallSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  }
  return m;
}

void BM_EnmklSvmRefit_2000x116(benchmark::State& state) {
  const Problem p = RegionLikeProblem(2000, 116, 6, 2000);
  const auto l = learners::MakeLearner("enmkl_svm", {{"c", 1}, {"mu", 0.5}});
  double seconds = 0, wall = 0;
  const learners::Model m = TimedFit(state, [&] { return l->Fit(p.kernels, p.targets); }, seconds, wall);
  state.counters["fit_cpu_s"] = seconds;
  state.counters["fit_wall_s"] = wall;
  state.counters["iterations"] = m.info.iterations;
  state.counters["svm_solves"] = m.info.innerSolves;
  state.counters["smo_iterations"] = static_cast<double>(m.info.innerIterations);
  state.counters["selected"] = static_cast<double>((m.beta.array() > 0).count());
  std::printf("ENMKL-SVM refit n = 2000 x 116: %.2f s wall on %d threads (%.2f s CPU), %d iterations (target <= 3 s: %s)\n", wall,
              tbb::this_task_arena::max_concurrency(), seconds, m.info.iterations, wall <= 3.0 ? "met" : "NOT met");
}
BENCHMARK(BM_EnmklSvmRefit_2000x116)->Unit(benchmark::kMillisecond)->Iterations(1);

// The same refit on the kernels rounded to float32 (gram::Float32Columns: the compact store's precision,
// read widened to double), after the float64 refit in the same run: time, and the weights' and decisions'
// largest differences from the float64 fit.
void BM_EnmklSvmRefitFloat32_2000x116(benchmark::State& state) {
  const Problem p = RegionLikeProblem(2000, 116, 6, 2000);
  std::vector<Eigen::MatrixXf> store;
  for (const auto& K : p.kernels) store.push_back(K.cast<float>());
  const gram::Float32Columns columns(store);
  const auto l = learners::MakeLearner("enmkl_svm", {{"c", 1}, {"mu", 0.5}});
  double seconds = 0, wall = 0;
  const learners::Model m = TimedFit(state, [&] { return l->Fit({}, p.targets, learners::FitOptions{nullptr, nullptr, &columns}); }, seconds, wall);
  const auto reference = l->Fit(p.kernels, p.targets);
  const Eigen::VectorXd f = m.Decision(p.kernels), g = reference.Decision(p.kernels);
  state.counters["fit_cpu_s"] = seconds;
  state.counters["fit_wall_s"] = wall;
  state.counters["iterations"] = m.info.iterations;
  state.counters["selected"] = static_cast<double>((m.beta.array() > 0).count());
  std::printf("ENMKL-SVM refit n = 2000 x 116 on float32 kernels: %.2f s wall on %d threads (%.2f s CPU), %d iterations (float64: %d); "
              "weights within %.1e of float64, decisions within %.1e relative (target <= 3 s: %s)\n",
              wall, tbb::this_task_arena::max_concurrency(), seconds, m.info.iterations, reference.info.iterations,
              (m.beta - reference.beta).cwiseAbs().maxCoeff(), (f - g).cwiseAbs().maxCoeff() / g.cwiseAbs().maxCoeff(), wall <= 3.0 ? "met" : "NOT met");
}
BENCHMARK(BM_EnmklSvmRefitFloat32_2000x116)->Unit(benchmark::kMillisecond)->Iterations(1);

// ---- the three ways to train a kernel machine on one kernel ----
void BM_Kelm(benchmark::State& state) {
  const auto& p = Shared(static_cast<int>(state.range(0)));
  const auto l = learners::MakeLearner("kelm", {{"c", 1.0}, {"bias", 0}});
  for (auto _ : state) benchmark::DoNotOptimize(l->Fit(p.kernels, p.targets));
}
BENCHMARK(BM_Kelm)->Arg(200)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond);

void BM_BsadmmKelm(benchmark::State& state) {
  const auto& p = Shared(static_cast<int>(state.range(0)));
  const auto l = learners::MakeLearner("bsadmm_kelm", {{"c", 1.0}, {"bias", 0}});
  learners::Model m;
  for (auto _ : state) m = l->Fit(p.kernels, p.targets);
  state.counters["admm_iterations"] = m.info.iterations;
  state.counters["factorisations"] = m.info.innerSolves;
}
BENCHMARK(BM_BsadmmKelm)->Arg(200)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond);

void BM_SmoSvmPeer(benchmark::State& state) {  // SMO C-SVC (with a bias) on the same kernel and C: the peer
  const auto& p = Shared(static_cast<int>(state.range(0)));
  const auto l = learners::MakeLearner("svm", {{"c", 1.0}, {"tolerance", 1e-3}});
  for (auto _ : state) benchmark::DoNotOptimize(l->Fit(p.kernels, p.targets));
}
BENCHMARK(BM_SmoSvmPeer)->Arg(200)->Arg(500)->Arg(2000)->Unit(benchmark::kMillisecond);

void CheckAdmmAgainstSmo() {
  for (int n : {200, 500, 2000}) {
    const auto& p = Shared(n);
    const auto smo = learners::MakeLearner("svm", {{"c", 1.0}, {"tolerance", 1e-9}})->Fit(p.kernels, p.targets);
    const auto admm = learners::MakeLearner("bsadmm_kelm", {{"c", 1.0}, {"bias", 1}})->Fit(p.kernels, p.targets);
    const Eigen::VectorXd a = admm.Decision(p.kernels), b = smo.Decision(p.kernels);
    const double rel = (a - b).cwiseAbs().maxCoeff() / b.cwiseAbs().maxCoeff();
    std::printf("BSADMM-KELM (bias) vs SMO n=%d: max |f_admm - f_smo| / max|f| = %.2e (%s 1e-4), %d ADMM iterations, %.1f ms vs %.1f ms\n", n,
                rel, rel <= 1e-4 ? "within" : "OUTSIDE", admm.info.iterations, 1e3 * admm.info.seconds, 1e3 * smo.info.seconds);
  }
}

void BM_Mkelm_200x116(benchmark::State& state) {
  const auto& p = Regions();
  const auto l = learners::MakeLearner("mkelm", {{"c", 1}});
  learners::Model m;
  for (auto _ : state) m = l->Fit(p.kernels, p.targets);
  ReportMkl(state, m, OneSvmSeconds());
}
BENCHMARK(BM_Mkelm_200x116)->Unit(benchmark::kMillisecond);

void BM_MklBp_200x116(benchmark::State& state) {
  const auto& p = Regions();
  const auto l = learners::MakeLearner("mkl_bp", {{"c", 1}, {"p", 2}, {"v", 0.5}});
  learners::Model m;
  for (auto _ : state) m = l->Fit(p.kernels, p.targets);
  ReportMkl(state, m, OneSvmSeconds());
}
BENCHMARK(BM_MklBp_200x116)->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  CheckAdmmAgainstSmo();
#ifdef NEUROMKL_HAVE_LIBSVM
  CheckAgreementWithLibsvm();
#else
  std::printf("LIBSVM not found at build time (libsvm-dev): the SVM peer comparison is skipped\n");
#endif
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
