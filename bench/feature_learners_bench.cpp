// The feature form of the linear learners (learners::FitFeatures) against the kernel path and against peers.
//   bench_feature_learners agree [subjects 1000] [voxels 23200] [learner: only its cases]
//     one 80/20 split of a simulated cohort with 116 regions: svm, krr, enmkl_svm, enmkl_krr and simplemkl fitted on the region
//     kernels (formed, sliced, centred and normalised as nested CV does) and on the features; prints both fits' times,
//     the kernels' formation time and memory against the features', the largest decision gap relative to the largest
//     decision and the largest kernel-weight gap.
//   bench_feature_learners peer <folder> [subjects 10000] [voxels 55000] [C 1] [tolerance 1e-4] [lambda 1] [enmkl 1]
//     writes the feature matrix and targets as .npy in <folder>, fits svm (one region: the whole mask, centred, not
//     normalised) and krr on all subjects, and ENMKL-SVM over the 116 regions (default tolerances, mu 0.5; enmkl 0 skips
//     it), and writes their training decisions and times; bench/feature_peer.py fits
//     scikit-learn's LinearSVC and Ridge on the same files in the same run and compares.
//   bench_feature_learners scale [subjects 20000] [voxels 185405] [ENMKL weight steps 0] [storage float32]
//     one fold of a 5-fold CV at the feature form's scale (2 mm AAL voxels): the matrix's size, an svm and an ENMKL-SVM
//     fit (fixed parameters; the steps capped when given), the 5-fold time they imply and the peak RSS against the matrix.
//     Storage uint8 / int16: the voxels as integer codes with a scale per subject (images that store integers).
//   bench_feature_learners cv [subjects 20000] [voxels 185405] [grid 0] [storage float32] [signal 0.04]
//     a whole cross-validation of ENMKL-SVM through cv::RunNestedCv on the feature store, as a study on features runs it:
//     grid 0: 5 outer folds with fixed parameters (C 1, mu 0.5); grid 1: nested CV with C 0.1 / 1 (mu 0.5) chosen by a
//     3-fold inner CV in every outer fold; grid 2: the same over C 0.1 / 1 x mu 0.5 / 0.7 / 0.9 / 1 (the default grid's
//     top end, where the weights' steps contract slowest). `signal`: the label's shift of the signal voxels (float32). Prints each fold's chosen C, weight steps, status and regions kept, the time,
//     the pooled balanced accuracy and the peak RSS against the matrix.
//   bench_feature_learners mapped <folder> [subjects 2000] [voxels 185405] [storage float32] [signal 0.04] [in memory too 1]
//     the 5-fold CV of `cv` (fixed parameters) on a matrix written into <folder>/features.npy and mapped from it, as a
//     study on features with the kernel cache holds its voxels; with "in memory too", first on a copy in memory in the
//     same run: both times and whether the decisions are identical. Beyond the memory (float32, n = 40,000: 29.7 GB) the
//     mapping is paged from the disk: the time and the resident memory, anonymous and file-backed.
//   bench_feature_learners covariates [subjects 4000] [voxels 55000] [columns 3]
//     one fold (80/20) prepared without and with `columns` numeric covariates (and the intercept) removed inside it: the
//     fold's vectors (with covariates also the coefficient images, one pass over the training rows), an svm fit on each
//     and its time per coordinate step, and the fold's tables in memory; the fold without covariates is the floor.
#include <chrono>
#include <cstdio>
#include <numeric>
#include <type_traits>
#include <utility>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/core/mapped_file.hpp"
#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/cv/splits.hpp"
#include "neuromkl/gram/features.hpp"
#include "neuromkl/gram/preprocess.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/learners/feature_learners.hpp"
#include "neuromkl/learners/learner.hpp"

namespace nm = neuromkl;

namespace {

double Seconds(std::chrono::steady_clock::time_point since) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count(); }

/// Voxels like grey-matter fractions in `regions` regions of random sizes (at least 20 voxels); the label shifts a third
/// of the voxels of three regions by +-`shift` (with noise of SD ~0.17 per voxel; codes: by 20 / 250 = 0.08).
struct Cohort {
  nm::gram::FeatureMatrix x;
  Eigen::VectorXd label;
};
/// With `file`, the values are written into that file (a .npy of the matrix, mapped while it is written) as a study on
/// features writes its kernel cache entry, and the matrix maps it.
Cohort Simulate(Eigen::Index subjects, Eigen::Index voxels, std::size_t regions, unsigned seed,
                nm::gram::FeatureStorage storage = nm::gram::FeatureStorage::Float32, double shift = 0.04, const std::string& file = "") {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> share(0.5, 1.5);
  std::vector<double> shares(regions);
  double total = 0;
  for (auto& s : shares) total += s = share(rng);
  Cohort c;
  c.x.regionStart = {0};
  for (std::size_t r = 0; r + 1 < regions; ++r)
    c.x.regionStart.push_back(c.x.regionStart.back() + std::max<Eigen::Index>(20, static_cast<Eigen::Index>(static_cast<double>(voxels) * shares[r] / total)));
  c.x.regionStart.push_back(std::max(voxels, c.x.regionStart.back() + 20));
  if (file.empty()) {
    c.x.Resize(storage, subjects, c.x.regionStart.back());
  } else {
    const std::string prefix = nm::NpyRowsPrefix(subjects, c.x.regionStart.back(), nm::gram::NpyTypeOf(storage));
    auto mapped = nm::MappedFile::Create(file, prefix.size() + static_cast<std::uint64_t>(subjects) * static_cast<std::uint64_t>(c.x.regionStart.back()) * nm::gram::BytesPerValue(storage));
    std::copy(prefix.begin(), prefix.end(), mapped->MutableData());
    c.x.MapRows(storage, mapped, prefix.size(), subjects, c.x.regionStart.back());
  }
  c.label.resize(subjects);
  const bool codes = storage != nm::gram::FeatureStorage::Float32;
  std::uniform_real_distribution<float> uniform(0.2f, 0.8f);
  std::uniform_int_distribution<int> code(50, 200);  // compact: the same range as codes of 1/250 (a uint8 grey-matter map's scale)
  for (Eigen::Index i = 0; i < subjects; ++i) {
    c.label[i] = i % 2 ? 1.0 : -1.0;
    void* row = c.x.MutableRow(i);
    if (!codes) {
      auto* values = static_cast<float*>(row);
      for (Eigen::Index j = 0; j < c.x.Voxels(); ++j) values[j] = uniform(rng);
      for (const std::size_t r : {std::size_t{3}, std::size_t{40}, std::size_t{77}})
        for (Eigen::Index j = 0; j < c.x.RegionSize(r) / 3; ++j) values[c.x.regionStart[r] + j] += static_cast<float>(shift * c.label[i]);
      continue;
    }
    c.x.rowScale[i] = 1.0 / 250.0;
    const int up = c.label[i] > 0 ? 20 : 0;
    auto put = [&](auto* codesOfRow) {
      for (Eigen::Index j = 0; j < c.x.Voxels(); ++j) codesOfRow[j] = static_cast<std::remove_reference_t<decltype(codesOfRow[j])>>(code(rng));
      for (const std::size_t r : {std::size_t{3}, std::size_t{40}, std::size_t{77}})
        for (Eigen::Index j = 0; j < c.x.RegionSize(r) / 3; ++j) {
          auto& q = codesOfRow[c.x.regionStart[r] + j];
          q = static_cast<std::remove_reference_t<decltype(q)>>(q + up);
        }
    };
    if (storage == nm::gram::FeatureStorage::UInt8) put(static_cast<std::uint8_t*>(row));
    else put(static_cast<std::int16_t*>(row));
  }
  return c;
}

int Agree(Eigen::Index subjects, Eigen::Index voxels, const std::string& only) {
  const Cohort c = Simulate(subjects, voxels, 116, 7);
  std::vector<int> train, test;
  for (int i = 0; i < subjects; ++i) (i % 5 == 4 ? test : train).push_back(i);
  const Eigen::VectorXi trainIdx = Eigen::Map<const Eigen::VectorXi>(train.data(), static_cast<Eigen::Index>(train.size()));
  const Eigen::VectorXi testIdx = Eigen::Map<const Eigen::VectorXi>(test.data(), static_cast<Eigen::Index>(test.size()));
  auto start = std::chrono::steady_clock::now();
  nm::learners::KernelList ktrain, ktest;
  for (std::size_t r = 0; r < c.x.Regions(); ++r) {
    nm::gram::FoldKernel f = nm::gram::SliceFold(c.x.RegionKernel(r), trainIdx, testIdx);
    nm::gram::CentreFold(f);
    nm::gram::NormaliseFold(f);
    ktrain.push_back(std::move(f.train));
    ktest.push_back(std::move(f.testTrain));
  }
  const double kernelSeconds = Seconds(start);
  start = std::chrono::steady_clock::now();
  const nm::gram::FoldFeatures fold(c.x, train, test, true, true);
  const double foldSeconds = Seconds(start);
  const double kernelBytes = static_cast<double>(c.x.Regions()) * static_cast<double>(subjects) * static_cast<double>(subjects) * 8.0;
  const double featureBytes = static_cast<double>(c.x.values.size()) * 4.0;
  std::printf("%ld subjects x %ld voxels in %zu regions; 80/20 split\n", static_cast<long>(subjects), static_cast<long>(c.x.Voxels()), c.x.Regions());
  std::printf("kernels: formed and prepared in %.2f s, %.2f GB (float64, whole cohort); features %.3f GB (float32), fold vectors in %.3f s\n",
              kernelSeconds, kernelBytes / 1e9, featureBytes / 1e9, foldSeconds);
  std::printf("%-10s %4s %12s %12s %10s %10s %14s %12s %s\n", "learner", "mu", "kernel fit s", "feature fit s", "kernel it", "feature it", "decision gap", "beta gap", "feature status");
  nm::learners::Targets targets;
  targets.y.resize(static_cast<Eigen::Index>(train.size()));
  for (std::size_t i = 0; i < train.size(); ++i) targets.y[static_cast<Eigen::Index>(i)] = c.label[train[i]];
  const std::vector<std::pair<std::string, nm::learners::ParamMap>> cases = {
      {"svm", {{"c", 1.0}, {"tolerance", 1e-6}}},
      {"krr", {{"lambda", 1.0}}},
      // ENMKL at the defaults and at the agreement test's tolerances, and near mu = 1 (where the weights' steps contract
      // at a rate near 1 and both paths certify by Newton's steps); SimpleMKL stops at its duality gap on both paths, at
      // different points within it.
      {"enmkl_svm", {{"c", 1.0}, {"mu", 0.5}}},
      {"enmkl_krr", {{"lambda", 1.0}, {"mu", 0.5}}},
      {"enmkl_svm", {{"c", 1.0}, {"mu", 0.5}, {"svm_tolerance", 1e-10}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}},
      {"enmkl_krr", {{"lambda", 1.0}, {"mu", 0.5}, {"tolerance", 1e-10}, {"objective_tolerance", 1e-12}}},
      {"enmkl_svm", {{"c", 1.0}, {"mu", 0.9}}},
      {"enmkl_svm", {{"c", 1.0}, {"mu", 0.95}}},
      {"enmkl_svm", {{"c", 1.0}, {"mu", 1.0}}},
      {"enmkl_krr", {{"lambda", 1.0}, {"mu", 0.9}}},
      {"enmkl_krr", {{"lambda", 1.0}, {"mu", 1.0}}},
      {"simplemkl", {{"c", 1.0}}},
      {"simplemkl", {{"c", 1.0}, {"svm_tolerance", 1e-10}, {"gap_tolerance", 1e-9}, {"max_iterations", 5000}}},
  };
  bool ok = true;
  for (const auto& [learner, params] : cases) {
    if (!only.empty() && learner != only) continue;
    start = std::chrono::steady_clock::now();
    const nm::learners::Model reference = nm::learners::MakeLearner(learner, params)->Fit(ktrain, targets);
    const double kernelFit = Seconds(start);
    start = std::chrono::steady_clock::now();
    const nm::learners::Model model = nm::learners::FitFeatures(learner, params, fold, targets);
    const double featureFit = Seconds(start);
    const Eigen::VectorXd expected = reference.Decision(ktest), decision = nm::learners::FeatureDecision(model, fold);
    const double gap = (decision - expected).cwiseAbs().maxCoeff() / expected.cwiseAbs().maxCoeff();
    const double betaGap = (model.beta - reference.beta).cwiseAbs().maxCoeff();
    std::printf("%-10s %4.2f %12.3f %12.3f %10d %10d %14.2e %12.2e %s\n", learner.c_str(), params.count("mu") ? params.at("mu") : 1.0, kernelFit, featureFit,
                reference.info.iterations, model.info.iterations, gap, betaGap, std::string(nm::learners::ToString(model.info.status)).c_str());
    // The goals: kernel weights within 1e-5, decisions within 1e-6 relative (the SVMs' own tolerances bound what is reachable).
    ok = ok && betaGap <= 1e-5 && gap <= 1e-6;
  }
  std::printf("agreement (beta within 1e-5, decisions within 1e-6 relative): %s\n", ok ? "yes" : "NO");
  return ok ? 0 : 1;
}

int Peer(const std::string& folder, Eigen::Index subjects, Eigen::Index voxels, double C, double tolerance, double lambda, bool withEnmkl) {
  Cohort c = Simulate(subjects, voxels, 116, 11);
  std::vector<int> all(static_cast<std::size_t>(subjects));
  for (int i = 0; i < subjects; ++i) all[static_cast<std::size_t>(i)] = i;
  nm::learners::Targets targets;
  targets.y = c.label;
  std::ofstream times(folder + "/neuromkl_times.txt");
  if (withEnmkl) {  // ENMKL-SVM over the 116 regions (centred, normalised), default tolerances
    const nm::gram::FoldFeatures regions(c.x, all, {}, true, true);
    const auto start = std::chrono::steady_clock::now();
    const nm::learners::Model enmkl = nm::learners::FitFeatures("enmkl_svm", {{"c", C}, {"mu", 0.5}}, regions, targets);
    times << "enmkl_svm " << Seconds(start) << " " << enmkl.info.iterations << " " << nm::learners::ToString(enmkl.info.status) << " "
          << (enmkl.beta.array() > 0).count() << "\n";
  }
  // The whole mask as one region: LinearSVC and Ridge see one feature vector per subject.
  c.x.regionStart = {0, c.x.Voxels()};
  const Eigen::MatrixXf columnMajor = c.x.values;
  nm::WriteNpy(folder + "/features.npy", columnMajor);
  nm::WriteNpy(folder + "/labels.npy", Eigen::MatrixXd(c.label));
  auto start = std::chrono::steady_clock::now();
  const nm::gram::FoldFeatures fold(c.x, all, all, true, false);
  const double foldSeconds = Seconds(start);
  times << "fold_vectors " << foldSeconds << "\n";
  start = std::chrono::steady_clock::now();
  const nm::learners::Model svm = nm::learners::FitFeatures("svm", {{"c", C}, {"tolerance", tolerance}}, fold, targets);
  times << "svm " << Seconds(start) << " " << svm.info.iterations << "\n";
  nm::WriteNpy(folder + "/svm_decisions.npy", Eigen::MatrixXd(nm::learners::FeatureDecision(svm, fold)));
  nm::learners::Targets regression = targets;
  regression.task = nm::learners::Task::Regression;
  start = std::chrono::steady_clock::now();
  const nm::learners::Model krr = nm::learners::FitFeatures("krr", {{"lambda", lambda}}, fold, regression);
  times << "krr " << Seconds(start) << " " << krr.info.iterations << "\n";
  nm::WriteNpy(folder + "/krr_decisions.npy", Eigen::MatrixXd(nm::learners::FeatureDecision(krr, fold)));
  return 0;
}

/// The process's peak resident memory (VmHWM), in bytes; 0 where /proc is not there.
double PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      double kib = 0;
      status >> kib;
      return kib * 1024.0;
    }
    status.ignore(1 << 20, '\n');
  }
  return 0;
}

/// One fold of a 5-fold CV (80 % training) at the scale the feature form is for: the matrix's size and peak memory, an
/// svm fit and an ENMKL-SVM fit (C 1, mu 0.5, at most `iterations` weight steps; 0: the default cap), and the 5-fold time
/// they imply (5 fits; fixed parameters).
int Scale(Eigen::Index subjects, Eigen::Index voxels, int iterations, nm::gram::FeatureStorage storage) {
  auto start = std::chrono::steady_clock::now();
  const Cohort c = Simulate(subjects, voxels, 116, 13, storage);
  const double simulateSeconds = Seconds(start);
  const auto featureBytes = static_cast<double>(c.x.Bytes());
  std::printf("%ld subjects x %ld voxels in %zu regions: features %.2f GB (%s; the kernels would be %.0f GB in float64), simulated in %.1f s\n",
              static_cast<long>(subjects), static_cast<long>(c.x.Voxels()), c.x.Regions(), featureBytes / 1e9, nm::gram::ToString(storage),
              116.0 * static_cast<double>(subjects) * static_cast<double>(subjects) * 8.0 / 1e9, simulateSeconds);
  std::vector<int> train, test;
  for (int i = 0; i < subjects; ++i) (i % 5 == 4 ? test : train).push_back(i);
  start = std::chrono::steady_clock::now();
  const nm::gram::FoldFeatures fold(c.x, train, test, true, true);
  std::printf("fold vectors (training mean per voxel, per-region norms): %.1f s\n", Seconds(start));
  nm::learners::Targets targets;
  targets.y.resize(static_cast<Eigen::Index>(train.size()));
  for (std::size_t i = 0; i < train.size(); ++i) targets.y[static_cast<Eigen::Index>(i)] = c.label[train[i]];
  start = std::chrono::steady_clock::now();
  const nm::learners::Model svm = nm::learners::FitFeatures("svm", {{"c", 1.0}}, fold, targets);
  const double svmSeconds = Seconds(start);
  std::printf("svm (C 1, tolerance 1e-3): %.1f s, %d iterations\n", svmSeconds, svm.info.iterations);
  nm::learners::ParamMap params = {{"c", 1.0}, {"mu", 0.5}};
  if (iterations > 0) params["max_iterations"] = iterations;
  start = std::chrono::steady_clock::now();
  const nm::learners::Model enmkl = nm::learners::FitFeatures("enmkl_svm", params, fold, targets);
  const double enmklSeconds = Seconds(start);
  std::printf("enmkl_svm (C 1, mu 0.5%s): %.1f s, %d weight steps (%.1f s each), %s, %ld regions kept\n",
              iterations > 0 ? (", at most " + std::to_string(iterations) + " weight steps").c_str() : "", enmklSeconds, enmkl.info.iterations,
              enmklSeconds / std::max(1, enmkl.info.iterations), std::string(nm::learners::ToString(enmkl.info.status)).c_str(), static_cast<long>((enmkl.beta.array() > 0).count()));
  std::printf("5-fold CV with fixed parameters: svm ~%.0f s, enmkl_svm ~%.0f s (5 such fits%s)\n", 5 * svmSeconds, 5 * enmklSeconds,
              iterations > 0 ? "; capped" : "");
  const double peak = PeakRssBytes();
  std::printf("peak RSS %.2f GB: %.2fx the features\n", peak / 1e9, peak / featureBytes);
  return 0;
}

/// A cross-validation of ENMKL-SVM on the feature store `x` (cv::RunNestedCv, as a study on features runs it): fixed
/// parameters (`grid` 0) or a grid chosen by a 3-fold inner CV (1, 2); its seconds, its out-of-fold decisions in
/// `decisions`.
double RunCv(const std::shared_ptr<const nm::gram::FeatureMatrix>& x, const Eigen::VectorXd& label, int grid, Eigen::VectorXd* decisions = nullptr) {
  const auto store = nm::gram::MakeFeatureKernels(x);  // no fold forms its kernels (they would take 116 x n^2 x 8 bytes)
  nm::learners::Targets targets;
  targets.y = label;
  const auto outer = nm::cv::MakeFolds({nm::cv::Scheme::StratifiedKFold, 5, 1}, targets.task, targets.y, {}, {}, 7, "outer");
  const nm::cv::InnerSplitter inner = [](std::size_t f, const std::vector<int>&, const Eigen::VectorXd& y) {
    return nm::cv::MakeFolds({nm::cv::Scheme::StratifiedKFold, 3, 1}, nm::learners::Task::Classification, y, {}, {}, 50 + f, "inner");
  };
  const auto points = grid == 2   ? nm::cv::ExpandGrid({}, {{"c", {0.1, 1.0}}, {"mu", {0.5, 0.7, 0.9, 1.0}}})
                     : grid == 1 ? nm::cv::ExpandGrid({{"mu", 0.5}}, {{"c", {0.1, 1.0}}})
                                 : nm::cv::ExpandGrid({{"c", 1.0}, {"mu", 0.5}}, {});
  const std::vector<nm::cv::LearnerPlan> plans = {{"enmkl_svm", "enmkl_svm", points}};
  const auto start = std::chrono::steady_clock::now();
  const auto outcome = nm::cv::RunNestedCv(*store, targets, outer, inner, plans, {});
  const double seconds = Seconds(start);
  for (const auto& fold : outcome[0].folds) {
    if (!fold.error.empty()) {
      std::printf("fold %d failed: %s\n", fold.index, fold.error.c_str());
      continue;
    }
    std::printf("fold %d: C %g, mu %g, %d weight steps, %s, %ld regions kept\n", fold.index, outcome[0].grid[fold.chosen].at("c"),
                outcome[0].grid[fold.chosen].at("mu"), fold.model.info.iterations, std::string(nm::learners::ToString(fold.model.info.status)).c_str(),
                static_cast<long>((fold.model.beta.array() > 0).count()));
  }
  const double ba = nm::cv::Summarise(outcome[0], targets).pooled.at("balanced_accuracy");
  const char* what = grid == 2   ? "nested CV, C 0.1 / 1 x mu 0.5 / 0.7 / 0.9 / 1 by 3 inner folds, 5 outer folds"
                     : grid == 1 ? "nested CV, C 0.1 / 1 by 3 inner folds, 5 outer folds"
                                 : "5-fold CV, fixed parameters (C 1, mu 0.5)";
  std::printf("%s: %.1f s (%.1f min), %ld fits (inner fits not converged: %ld), pooled balanced accuracy %.3f\n", what, seconds, seconds / 60,
              outcome[0].fits, static_cast<long>(outcome[0].innerNotConverged), ba);
  if (decisions) {
    decisions->setZero(label.size());
    for (const auto& fold : outcome[0].folds)
      for (std::size_t k = 0; k < fold.test.size(); ++k) (*decisions)[fold.test[k]] = fold.decision[static_cast<Eigen::Index>(k)];
  }
  return seconds;
}

int CrossValidate(Eigen::Index subjects, Eigen::Index voxels, int grid, nm::gram::FeatureStorage storage, double shift) {
  auto start = std::chrono::steady_clock::now();
  Cohort c = Simulate(subjects, voxels, 116, 13, storage, shift);
  auto x = std::make_shared<const nm::gram::FeatureMatrix>(std::move(c.x));
  const auto featureBytes = static_cast<double>(x->Bytes());
  std::printf("%ld subjects x %ld voxels in %zu regions: features %.2f GB (%s), signal +-%g in a third of 3 regions, simulated in %.1f s\n",
              static_cast<long>(subjects), static_cast<long>(x->Voxels()), x->Regions(), featureBytes / 1e9, nm::gram::ToString(storage), shift,
              Seconds(start));
  RunCv(x, c.label, grid);
  const double peak = PeakRssBytes();
  std::printf("peak RSS %.2f GB: %.2fx the features\n", peak / 1e9, peak / featureBytes);
  return 0;
}

/// This process's resident memory now, split as /proc/self/status does: anonymous and file-backed pages.
std::pair<double, double> ResidentAnonAndFileBytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  double anon = 0, file = 0;
  while (status >> key) {
    double kib = 0;
    if (key == "RssAnon:" && status >> kib) anon = kib * 1024.0;
    else if (key == "RssFile:" && status >> kib) file = kib * 1024.0;
    status.ignore(1 << 20, '\n');
  }
  return {anon, file};
}

/// The cross-validation of CrossValidate (fixed parameters) on a feature matrix written into <folder>/features.npy and
/// mapped from it, as a study on features with the kernel cache runs: with `inMemory`, first on a copy of it in memory,
/// in the same run (the same decisions, bit for bit, and the times side by side). Beyond the memory the mapping is paged
/// from the disk: prints the time and the resident memory, anonymous and file-backed.
int Mapped(const std::string& folder, Eigen::Index subjects, Eigen::Index voxels, nm::gram::FeatureStorage storage, double shift, bool inMemory) {
  auto start = std::chrono::steady_clock::now();
  const std::string file = folder + "/features.npy";
  Cohort c = Simulate(subjects, voxels, 116, 13, storage, shift, file);
  c.x.mapped.file->Flush();
  auto x = std::make_shared<const nm::gram::FeatureMatrix>(std::move(c.x));
  const auto featureBytes = static_cast<double>(x->Bytes());
  std::printf("%ld subjects x %ld voxels in %zu regions: features %.2f GB (%s) written into %s and mapped, %.1f s; this machine's memory %.1f GB\n",
              static_cast<long>(subjects), static_cast<long>(x->Voxels()), x->Regions(), featureBytes / 1e9, nm::gram::ToString(storage), file.c_str(),
              Seconds(start), static_cast<double>(nm::PhysicalMemoryBytes()) / 1e9);
  Eigen::VectorXd memoryDecisions, mappedDecisions;
  double memorySeconds = 0;
  if (inMemory) {
    std::vector<std::size_t> all(x->Regions());
    std::iota(all.begin(), all.end(), std::size_t{0});
    auto copy = std::make_shared<const nm::gram::FeatureMatrix>(x->SelectRegions(all));
    std::printf("in memory (a copy):\n");
    memorySeconds = RunCv(copy, c.label, 0, &memoryDecisions);
  }
  std::printf("mapped:\n");
  const double mappedSeconds = RunCv(x, c.label, 0, &mappedDecisions);
  const auto [anon, resident] = ResidentAnonAndFileBytes();
  std::printf("resident now: %.2f GB anonymous, %.2f GB file-backed (the mapping's pages in memory); peak RSS %.2f GB (%.2fx the features)\n", anon / 1e9,
              resident / 1e9, PeakRssBytes() / 1e9, PeakRssBytes() / featureBytes);
  // (Printed in full so that runs in different processes, e.g. one under a memory limit, can be compared.)
  std::printf("decisions: sum %.17g, sum of squares %.17g\n", mappedDecisions.sum(), mappedDecisions.squaredNorm());
  if (inMemory)
    std::printf("mapped against in memory: %.1f s against %.1f s (%.2fx); decisions %s\n", mappedSeconds, memorySeconds, mappedSeconds / memorySeconds,
                mappedDecisions == memoryDecisions ? "identical" : "DIFFER");
  return inMemory && mappedDecisions != memoryDecisions ? 1 : 0;
}

/// A fold without covariates against the same fold with `columns` numeric covariates removed (fit on every training row).
int Covariates(Eigen::Index subjects, Eigen::Index voxels, int columns) {
  const Cohort c = Simulate(subjects, voxels, 116, 17);
  std::mt19937 rng(19);
  std::normal_distribution<double> normal(0.0, 1.0);
  nm::gram::Covariates covariates;
  covariates.design.resize(subjects, 1 + columns);
  for (Eigen::Index i = 0; i < subjects; ++i) {
    covariates.design(i, 0) = 1.0;
    for (int k = 0; k < columns; ++k) covariates.design(i, 1 + k) = 50.0 + 10.0 * normal(rng);
  }
  std::vector<int> train, test;
  for (int i = 0; i < subjects; ++i) (i % 5 == 4 ? test : train).push_back(i);
  nm::learners::Targets targets;
  targets.y.resize(static_cast<Eigen::Index>(train.size()));
  for (std::size_t i = 0; i < train.size(); ++i) targets.y[static_cast<Eigen::Index>(i)] = c.label[train[i]];
  std::printf("%ld subjects x %ld voxels in %zu regions (features %.2f GB), %d numeric covariates and the intercept\n", static_cast<long>(subjects),
              static_cast<long>(c.x.Voxels()), c.x.Regions(), static_cast<double>(c.x.Bytes()) / 1e9, columns);
  double floorVectors = 0, floorStep = 0;
  for (const bool with : {false, true}) {
    auto start = std::chrono::steady_clock::now();
    const nm::gram::FoldFeatures fold(c.x, train, test, true, true, with ? &covariates : nullptr);
    const double vectors = Seconds(start);
    start = std::chrono::steady_clock::now();
    const nm::learners::Model svm = nm::learners::FitFeatures("svm", {{"c", 1.0}}, fold, targets);
    const double fit = Seconds(start), step = fit / std::max(1, svm.info.iterations);
    const double tables = 8.0 * static_cast<double>(subjects) * static_cast<double>(c.x.Regions()) * (with ? 7 + 2 * columns : 5) / 1e6;
    std::printf("%s: fold vectors %.2f s, svm (C 1) %.2f s for %d coordinate steps (%.2f us each), fold tables ~%.0f MB", with ? "with covariates" : "without",
                vectors, fit, svm.info.iterations, 1e6 * step, tables);
    if (with) std::printf(" -> %.2fx the fold vectors' time, %.2fx the time per step", vectors / floorVectors, step / floorStep);
    std::printf("\n");
    floorVectors = vectors;
    floorStep = step;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "agree";
  const auto arg = [&](int i, double fallback) { return argc > i ? std::stod(argv[i]) : fallback; };
  if (mode == "agree") return Agree(static_cast<Eigen::Index>(arg(2, 1000)), static_cast<Eigen::Index>(arg(3, 23200)), argc > 4 ? argv[4] : "");
  if (mode == "peer" && argc > 2)
    return Peer(argv[2], static_cast<Eigen::Index>(arg(3, 10000)), static_cast<Eigen::Index>(arg(4, 55000)), arg(5, 1.0), arg(6, 1e-4), arg(7, 1.0),
                arg(8, 1) != 0);
  const std::string storage = argc > 5 ? argv[5] : "float32";
  const auto kind = storage == "uint8" ? nm::gram::FeatureStorage::UInt8 : storage == "int16" ? nm::gram::FeatureStorage::Int16 : nm::gram::FeatureStorage::Float32;
  if (mode == "cv") return CrossValidate(static_cast<Eigen::Index>(arg(2, 20000)), static_cast<Eigen::Index>(arg(3, 185405)), static_cast<int>(arg(4, 0)), kind, arg(6, 0.04));
  if (mode == "scale") {
    return Scale(static_cast<Eigen::Index>(arg(2, 20000)), static_cast<Eigen::Index>(arg(3, 185405)), static_cast<int>(arg(4, 0)), kind);
  }
  if (mode == "mapped" && argc > 2)
    return Mapped(argv[2], static_cast<Eigen::Index>(arg(3, 2000)), static_cast<Eigen::Index>(arg(4, 185405)),
                  argc > 5 && std::string(argv[5]) == "uint8" ? nm::gram::FeatureStorage::UInt8 : argc > 5 && std::string(argv[5]) == "int16" ? nm::gram::FeatureStorage::Int16 : nm::gram::FeatureStorage::Float32,
                  arg(6, 0.04), arg(7, 1) != 0);
  if (mode == "covariates")
    return Covariates(static_cast<Eigen::Index>(arg(2, 4000)), static_cast<Eigen::Index>(arg(3, 55000)), static_cast<int>(arg(4, 3)));
  std::fprintf(stderr, "usage: bench_feature_learners agree [subjects] [voxels] [learner] | peer <folder> [subjects] [voxels] [C] [tolerance] [lambda] [enmkl 0/1] | "
                       "scale [subjects] [voxels] [ENMKL weight steps, 0 = default cap] [float32 | uint8 | int16] | mapped <folder> [subjects] [voxels] [storage] [signal] [in memory too 0/1] | cv [subjects] [voxels] [grid 0/1/2] [float32 | uint8 | int16] [signal] | covariates [subjects] [voxels] [columns]\n");
  return 2;
}
