// Multiclass studies: a simulated 3-class cohort with class-specific signal regions, a
// null 3-class cohort, and the input checks.
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

/// Class A: Hippocampus_L + Amygdala_L; B: Precuneus_R; C: Frontal_Mid_L (6 mm grid: fast).
std::string ThreeClassCohort(const TempDir& dir, double effect, int subjects, const std::string& target, const std::string& rest) {
  static int made = 0;  // simulate never overwrites a cohort: one folder per call
  const std::string cohort = "cohort" + std::to_string(++made);
  const auto r = RunCli("simulate --out " + (dir / cohort) + " --subjects " + std::to_string(subjects) + " --classes 3 --downsample 3 --seed 4 --effect " +
                        std::to_string(effect) + " --signal \"Hippocampus_L,Amygdala_L;Precuneus_R;Frontal_Mid_L\" -q");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  const std::string path = dir / (cohort + "/study.json");
  WriteFile(path, R"({"name": "three", "subjects": {"table": "participants.tsv"}, "target": )" + target +
                      R"(, "atlas": "aal", "cv": {"outer": {"scheme": "stratified_kfold", "k": 5}, "inner": {"k": 3}}, )" + rest + "}");
  return path;
}

std::set<std::string> TopRegions(const std::string& tsv, std::size_t n) {
  const auto rows = ReadTsv(tsv);
  std::set<std::string> out;
  for (std::size_t i = 1; i <= n && i < rows.size(); ++i) out.insert(rows[i][2]);
  return out;
}

TEST(MulticlassStudy, ClassSpecificRegionsPerClassTablesAndTheUnionInTheSharedRanking) {
  TempDir dir;
  const std::string learners = R"("learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}, {"name": "svm", "params": {"c": 1}}])";
  // Per-class weights: each class's one-vs-rest table ranks that class's regions on top.
  const auto perClass = ThreeClassCohort(dir, 1.0, 60, R"({"column": "group", "task": "multiclass", "multiclass_weights": "per_class"})", learners);
  auto r = RunCli("run " + perClass + " --out " + (dir / "per_class") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  for (const std::string learner : {"enmkl_svm", "svm"}) {
    SCOPED_TRACE(learner);
    EXPECT_EQ(TopRegions(dir / ("per_class/regions_" + learner + "_class-A.tsv"), 2), (std::set<std::string>{"Hippocampus_L", "Amygdala_L"}));
    EXPECT_EQ(TopRegions(dir / ("per_class/regions_" + learner + "_class-B.tsv"), 1), (std::set<std::string>{"Precuneus_R"}));
    EXPECT_EQ(TopRegions(dir / ("per_class/regions_" + learner + "_class-C.tsv"), 1), (std::set<std::string>{"Frontal_Mid_L"}));
  }
  // Shared weights (the default): one ranking with the union of the class regions on top.
  const auto shared = ThreeClassCohort(dir, 1.0, 60, R"({"column": "group", "task": "multiclass"})", learners);
  r = RunCli("run " + shared + " --out " + (dir / "shared") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::set<std::string> all = {"Hippocampus_L", "Amygdala_L", "Precuneus_R", "Frontal_Mid_L"};
  EXPECT_EQ(TopRegions(dir / "shared/regions_enmkl_svm.tsv", 4), all);
  EXPECT_EQ(TopRegions(dir / "shared/regions_svm.tsv", 4), all);
  EXPECT_FALSE(std::filesystem::exists(dir / "shared/regions_enmkl_svm_class-A.tsv"));
  // Voxel maps: one mean map (with its sidecar) per learner and class.
  int classMaps = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "shared/weights")) {
    const std::string name = entry.path().filename().string();
    if (name.find("Class") != std::string::npos && name.ends_with("Mean_weights.nii.gz")) ++classMaps;
    if (name.find("ClassBMean_weights.json") != std::string::npos) {
      EXPECT_THAT(ReadFile(entry.path().string()), HasSubstr("\"Class\": \"B vs rest"));
    }
  }
  EXPECT_EQ(classMaps, 2 * 3);
  const auto results = nlohmann::json::parse(ReadFile(dir / "shared/results.json"));
  EXPECT_EQ(results["task"], "multiclass");
  EXPECT_EQ(results["target"]["classes"], nlohmann::json({"A", "B", "C"}));
  for (const auto& l : results["learners"]) {
    const double ba = l["metrics"]["pooled"]["balanced_accuracy"].get<double>();
    EXPECT_GT(ba, 0.8) << l["label"];
    EXPECT_TRUE(l["metrics"]["pooled"].contains("confusion_A_B"));
    EXPECT_TRUE(l["metrics"]["pooled"].contains("auc_C"));
    EXPECT_TRUE(l["metrics"]["pooled"].contains("kappa"));
  }
  // Predictions: the predicted class and one score per class; the report shows the confusion matrix and per-class ROC.
  const auto predictions = ReadTsv(dir / "shared/predictions.tsv");
  EXPECT_EQ(predictions[0], (std::vector<std::string>{"subject", "learner", "repeat", "fold", "target", "predicted", "score_A", "score_B", "score_C"}));
  EXPECT_EQ(predictions.size(), 1u + 2 * 60);
  const std::string report = ReadFile(dir / "shared/report.html");
  EXPECT_THAT(report, HasSubstr("aria-label=\"confusion matrix\""));
  EXPECT_THAT(report, HasSubstr("aria-label=\"per-class ROC curves\""));
  EXPECT_THAT(report, HasSubstr("macro balanced accuracy"));
}

TEST(MulticlassStudy, NullCohortIsAtChanceWithALargePermutationP) {
  TempDir dir;
  // No signal; 30 subjects, 19 permutations of one fixed-parameter SVM: a few seconds.
  const auto study = ThreeClassCohort(dir, 0.0, 30, R"({"column": "group", "task": "multiclass"})",
                                      R"("permutations": {"count": 19}, "output": {"weight_maps": false}, "learners": [{"name": "svm", "params": {"c": 1}}])");
  const auto r = RunCli("run " + study + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto results = nlohmann::json::parse(ReadFile(dir / "out/results.json"));
  const auto& l = results["learners"][0];
  // Chance is 1/3; with 30 subjects the SD of a chance balanced accuracy is about 0.09: 0.6 is > 2.9 SD above chance.
  EXPECT_LT(l["metrics"]["pooled"]["balanced_accuracy"].get<double>(), 0.6);
  EXPECT_GT(l["permutations"]["p_values"]["balanced_accuracy"].get<double>(), 0.05);
}

TEST(MulticlassStudy, ValidateReportsClassSizesAndRefusesAClassTooSmallForTheFolds) {
  TempDir dir;
  const auto study = ThreeClassCohort(dir, 1.0, 30, R"({"column": "group", "task": "multiclass"})", R"("learners": [{"name": "svm"}])");
  auto r = RunCli("validate " + study);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\"A\" n = 10, \"B\" n = 10, \"C\" n = 10"));
  // Class C cut to 4 subjects: fewer than the 5 outer folds.
  const std::string participants = (std::filesystem::path(study).parent_path() / "participants.tsv").string();
  auto rows = ReadTsv(participants);
  std::string table = "subject\timage\tgroup\n";
  int kept = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (rows[i][2] == "C" && ++kept > 4) continue;
    table += rows[i][0] + "\t" + rows[i][1] + "\t" + rows[i][2] + "\n";
  }
  WriteFile(participants, table);
  for (const std::string& command : {"validate " + study, "run " + study + " --out " + (dir / "never") + " -q"}) {
    r = RunCli(command);
    EXPECT_EQ(r.exitCode, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("class \"C\" of column \"group\" has 4 subjects, fewer than the 5 outer folds"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir / "never"));
}

TEST(MulticlassStudy, ConfigAndTaskChecks) {
  TempDir dir;
  // Three classes under the binary task: refused, pointing at task "multiclass".
  auto study = ThreeClassCohort(dir, 1.0, 30, R"({"column": "group", "task": "classification"})", R"("learners": [{"name": "svm"}])");
  auto r = RunCli("validate " + study);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("use task \"multiclass\""));
  study = ThreeClassCohort(dir, 1.0, 30, R"({"column": "group", "task": "classification", "multiclass_weights": "shared"})", R"("learners": [{"name": "svm"}])");
  r = RunCli("validate " + study);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("/target/multiclass_weights"));
  study = ThreeClassCohort(dir, 1.0, 30, R"({"column": "group", "task": "multiclass", "multiclass_weights": "each"})", R"("learners": [{"name": "svm"}])");
  r = RunCli("validate " + study);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("per_class"));
  // The inner criterion is checked against the task.
  study = ThreeClassCohort(dir, 1.0, 30, R"({"column": "group", "task": "multiclass"})",
                           R"("learners": [{"name": "svm", "grid": {"c": [0.1, 1]}}], "output": {"weight_maps": false})");
  std::string text = ReadFile(study);
  text.replace(text.find("\"cv\": {"), 7, "\"cv\": {\"criterion\": \"auc\", ");
  WriteFile(study, text);
  r = RunCli("validate " + study);
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("macro_auc"));
  text.replace(text.find("\"auc\""), 5, "\"kappa\"");
  WriteFile(study, text);
  r = RunCli("run " + study + " --out " + (dir / "kappa") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(ReadFile(dir / "kappa/results.json"), HasSubstr("kappa (mean over inner folds"));
}

}  // namespace
