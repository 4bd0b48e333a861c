// What keeping every permutation's region shares costs a permutation test (docs/statistics.md), end to end through
// the library on a simulated cohort: the wall time of a block of permutations (nested CV on permuted targets, shares
// included) against the wall time of the shares alone, computed for as many permuted outcomes with the same
// parallelism. Goal: the shares add <= 5 % to the test.
// Usage: bench_permutation_weights [subjects (192)] [permutations (20)] [downsample (2)]
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <tbb/parallel_for.h>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/pipeline/study_context.hpp"
#include "neuromkl/simulate/simulate.hpp"

using namespace neuromkl;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::stoi(argv[1]) : 192, permutations = argc > 2 ? std::stoi(argv[2]) : 20, downsample = argc > 3 ? std::stoi(argv[3]) : 2;
  const std::string root = fs::temp_directory_path() / "neuromkl_bench_permutation_weights";
  fs::remove_all(root);
  simulate::SimulateOptions o;
  o.outDir = root;
  o.subjects = n;
  o.downsample = downsample;
  o.seed = 7;
  o.effect = 0.5;
  simulate::Simulate(o);
  // The issue's setting: ENMKL-SVM with its default 7 x 10 grid and an SVM with its default grid, 5 x 5 folds.
  std::ofstream(root + "/study.json") << R"({"name": "bench", "subjects": {"table": "participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal", "kernels": {"cache": false},
    "cv": {"outer": {"k": 5}, "inner": {"k": 5}}, "learners": [{"name": "enmkl_svm"}, {"name": "svm"}], "permutations": {"count": )"
                                      << permutations << "}}";
  const config::StudyConfig study = config::LoadStudyConfig(root + "/study.json");
  pipeline::StudyContext ctx = pipeline::LoadStudyInputs(study);
  fs::create_directories(root + "/scratch");
  pipeline::AttachKernels(ctx, root + "/scratch");

  auto t = Clock::now();
  const pipeline::PooledBlock block = pipeline::ComputePermutationBlock(ctx, 0, permutations);
  const double blockSeconds = std::chrono::duration<double>(Clock::now() - t).count();

  // The shares alone: the real targets' outcomes (the same folds, models of the same size), one share computation per
  // learner and permutation, spread over the threads as the permutations are.
  const auto outcomes = cv::RunNestedCv(*ctx.kernels, ctx.TargetsOf(ctx.cohort.y), ctx.outer, ctx.Inner(), ctx.plans, ctx.nestedOptions);
  t = Clock::now();
  tbb::parallel_for(0, permutations, [&](int) {
    for (const auto& outcome : outcomes) (void)pipeline::MeanKernelShares(ctx, outcome);
  });
  const double shareSeconds = std::chrono::duration<double>(Clock::now() - t).count();
  const double fraction = shareSeconds / (blockSeconds - shareSeconds);
  std::printf("n = %d, %zu kernels, %d permutations of ENMKL-SVM (7 x 10 grid) + SVM (7 values), 5 x 5 folds, %d threads\n", n, ctx.KernelCount(),
              permutations, static_cast<int>(cv::ActiveThreads()));
  std::printf("  permutation block with shares: %.2f s (%.3f s per permutation); shares alone: %.3f s\n", blockSeconds, blockSeconds / permutations,
              shareSeconds);
  std::printf("  keeping the shares adds %.2f %% to the test (goal <= 5 %%): %s\n", 100 * fraction, fraction <= 0.05 ? "met" : "NOT met");
  std::printf("  (%zu permutations kept %zu learners' shares)\n", block.shares.size(), block.shares.empty() ? 0 : block.shares[0].size());
  fs::remove_all(root);
  return 0;
}
