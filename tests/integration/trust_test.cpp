// Results a reader can trust (issue 20): region summaries without size bias, fit status and grid
// edges reported wherever results are read.
#include <filesystem>
#include <set>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

/// A simulated cohort with signal in one large (Frontal_Mid_L, 4863 voxels) and one small
/// (Amygdala_L, 220 voxels) region and noise elsewhere; `learners` replaces the study's learners.
std::string SizeCohort(const TempDir& dir, const std::string& learners, const std::string& extra = "") {
  const auto r = RunCli("simulate --out " + (dir / "cohort") + " --subjects 60 --seed 3 --effect 0.6 --signal Frontal_Mid_L,Amygdala_L -q");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  const std::string path = dir / "cohort/study.json";
  WriteFile(path, R"({"name": "sizes", "subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "classification",
    "positive_class": "patient"}, "atlas": "aal", "cv": {"outer": {"scheme": "stratified_kfold", "k": 5}, "inner": {"k": 3}},
    "output": {"weight_maps": false}, "learners": )" + learners + extra + "}");
  return path;
}

// Before: mean |w| per voxel ranked the smallest regions first (Frontal_Mid_L, a signal region, came
// 27th of 116 on this cohort; rank correlated with region size at 0.97). ||w_r|| has no such bias.
TEST(Trust, SingleKernelRegionTablesRankTheSignalRegionsFirstWhateverTheirSize) {
  TempDir dir;
  const auto study = SizeCohort(dir, R"([{"name": "svm", "params": {"c": 1}}, {"name": "krr", "params": {"lambda": 1}},
                                         {"name": "kelm", "params": {"c": 1}}])");
  const auto r = RunCli("run " + study + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  for (const char* learner : {"svm", "krr", "kelm"}) {
    const auto rows = ReadTsv(dir / ("out/regions_" + std::string(learner) + ".tsv"));
    ASSERT_GT(rows.size(), 3u);
    EXPECT_EQ((std::set<std::string>{rows[1][2], rows[2][2]}), (std::set<std::string>{"Frontal_Mid_L", "Amygdala_L"})) << learner;
  }
  EXPECT_THAT(ReadFile(dir / "out/regions_svm.json"), HasSubstr("||w_r||"));
}

TEST(Trust, CappedFitsAndGridEdgesAreReportedOnTheConsoleInTheReportAndInResults) {
  TempDir dir;
  const auto study = SizeCohort(dir, R"([{"name": "simplemkl", "params": {"c": 1, "max_iterations": 2}},
                                         {"name": "krr", "grid": {"lambda": [0.001, 0.01, 0.1]}}])");
  const auto r = RunCli("run " + study + " --out " + (dir / "out"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("learner simplemkl: 5 of 5 outer folds did not converge (5 max_iterations_reached)"));
  // The effect is strong: every grid point scores perfectly and ties go to the most regularised point.
  EXPECT_THAT(r.output, HasSubstr("learner krr: lambda was chosen at the largest value of its grid (0.1) in 5 of 5 outer folds"));
  const std::string report = ReadFile(dir / "out/report.html");
  EXPECT_THAT(report, HasSubstr("outer folds 5 max_iterations_reached"));
  EXPECT_THAT(report, HasSubstr("not every fit converged"));
  EXPECT_THAT(report, HasSubstr("lambda = 0.1"));
  const auto results = nlohmann::json::parse(ReadFile(dir / "out/results.json"));
  bool warned = false;
  for (const auto& w : results["warnings"]) warned |= w.get<std::string>().find("did not converge") != std::string::npos;
  EXPECT_TRUE(warned);
  for (const auto& f : results["learners"][0]["folds"]) EXPECT_EQ(f["status"], "max_iterations_reached");
}

TEST(Trust, BatchSummaryNamesFitsThatDidNotConverge) {
  TempDir dir;
  const auto study = SizeCohort(dir, R"([{"name": "simplemkl", "params": {"c": 1, "max_iterations": 2}}])");
  WriteFile(dir / "cohort/batch.json", R"({"name": "b", "studies": [{"file": "study.json", "name": "capped"}]})");
  const auto r = RunCli("batch " + (dir / "cohort/batch.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(ReadFile(dir / "cohort/results/b/batch_summary.tsv"), HasSubstr("0/5 converged (5 max_iterations_reached)"));
}

}  // namespace
