// Class weights, probabilities and bias correction through the CLI: class weights on an imbalanced simulated cohort,
// probabilities in the outputs, bias-corrected regression outputs, and the configuration errors of both options.
#include <filesystem>

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
/// A simulated cohort (6 mm grid: fast) with the given extra simulate options; the study file is replaced by `study`.
std::string Cohort(const TempDir& dir, const std::string& name, const std::string& options, const std::string& study) {
  const auto r = RunCli("simulate --out " + (dir / name) + " --downsample 3 --seed 3 -q " + options);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  const std::string path = dir / (name + "/study.json");
  WriteFile(path, study);
  return path;
}

double Pooled(const nlohmann::json& results, const std::string& label, const std::string& metric) {
  for (const auto& l : results["learners"])
    if (l["label"] == label) return l["metrics"]["pooled"][metric].get<double>();
  ADD_FAILURE() << "no learner " << label;
  return 0;
}
}  // namespace

// 30 patients, 150 controls, a weak effect: the unweighted learners predict (nearly) everyone a control
// (balanced accuracy 0.5); "balanced" class weights raise it. Measured (seed 3, effect 0.2): enmkl_svm
// 0.500 -> 0.703, kelm 0.500 -> 0.593 (simplemkl 0.517 -> 0.567, not run here).
TEST(ClassWeightStudy, BalancedWeightsRaiseBalancedAccuracyOnAnImbalancedCohort) {
  TempDir dir;
  const std::string study = Cohort(dir, "imbalanced", "--subjects 180 --positive-fraction 0.1667 --effect 0.2", R"({
    "name": "imbalanced", "subjects": {"table": "participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "cv": {"outer": {"scheme": "stratified_kfold", "k": 5}, "inner": {"k": 3}}, "output": {"weight_maps": false},
    "learners": [{"name": "enmkl_svm", "params": {"mu": 0.5}},
                 {"name": "enmkl_svm", "label": "enmkl_svm_balanced", "params": {"mu": 0.5}, "class_weight": "balanced"},
                 {"name": "kelm"}, {"name": "kelm", "label": "kelm_balanced", "class_weight": {"patient": 5}}]})");
  const auto rows = ReadTsv(dir / "imbalanced/participants.tsv");
  int patients = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) patients += rows[i][2] == "patient";
  EXPECT_EQ(patients, 30);
  const auto r = RunCli("run " + study + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto results = nlohmann::json::parse(ReadFile(dir / "out/results.json"));
  EXPECT_GT(Pooled(results, "enmkl_svm_balanced", "balanced_accuracy"), Pooled(results, "enmkl_svm", "balanced_accuracy") + 0.1);
  EXPECT_GT(Pooled(results, "kelm_balanced", "balanced_accuracy"), Pooled(results, "kelm", "balanced_accuracy") + 0.05);
  // Probabilities in every binary study: a probability column, Brier and log-loss, Platt per fold.
  const auto predictions = ReadTsv(dir / "out/predictions.tsv");
  EXPECT_EQ(predictions[0].back(), "probability");
  for (std::size_t i = 1; i < predictions.size(); ++i) {
    const double p = std::stod(predictions[i].back());
    ASSERT_GE(p, 0.0);
    ASSERT_LE(p, 1.0);
  }
  EXPECT_LT(Pooled(results, "enmkl_svm", "brier"), 1.0);
  EXPECT_TRUE(results["learners"][0]["folds"][0]["platt"].contains("a"));
  EXPECT_THAT(ReadFile(dir / "out/report.html"), HasSubstr("reliability diagram"));
  // The resolved study keeps the class weights.
  EXPECT_THAT(ReadFile(dir / "out/study.resolved.json"), HasSubstr("\"class_weight\": \"balanced\""));
}

TEST(ClassWeightStudy, BadClassWeightsAndBiasCorrectionAreConfigErrorsAtTheirPointer) {
  TempDir dir;
  const std::string base = R"({"name": "x", "subjects": {"table": "participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "learners": [{"name": "svm", )";
  const auto study = Cohort(dir, "c", "--subjects 12", base + R"("class_weight": "balanced"}]})");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base + R"("class_weight": "equal"}]})", "/learners/0/class_weight"},
      {base + R"("class_weight": {"patient": -1}}]})", "/learners/0/class_weight/patient"},
      {base + R"("class_weight": {"patient": "2"}}]})", "/learners/0/class_weight/patient"},
      {base + R"("class_weight": {"AD": 2}}]})", "/learners/0/class_weight/AD"},
      {base + R"("class_weight": [1, 2]}]})", "/learners/0/class_weight"},
      {R"({"name": "x", "subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "classification", "bias_correction": "linear"},
          "learners": [{"name": "svm"}]})", "/target/bias_correction"},
      {R"({"name": "x", "subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "regression"},
          "learners": [{"name": "krr", "class_weight": "balanced"}]})", "/learners/0/class_weight"},
  };
  for (const auto& [text, pointer] : cases) {
    WriteFile(study, text);
    const auto r = RunCli("validate " + study);
    EXPECT_EQ(r.exitCode, 2) << text << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(pointer)) << text;
  }
}

// Brain age: a simulated regression cohort with linear bias correction. The gap of the corrected
// predictions has (about) no slope on the target while the uncorrected gap falls with it.
TEST(BiasCorrectionStudy, CorrectedPredictionsGapsAndMetrics) {
  TempDir dir;
  const std::string study = Cohort(dir, "age", "--subjects 120 --task regression --effect 0.5", R"({
    "name": "age", "subjects": {"table": "participants.tsv"},
    "target": {"column": "score", "task": "regression", "bias_correction": "linear"},
    "cv": {"outer": {"scheme": "kfold", "k": 5}, "inner": {"k": 4}}, "output": {"weight_maps": false},
    "learners": [{"name": "krr"}]})");
  const auto r = RunCli("run " + study + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto predictions = ReadTsv(dir / "out/predictions.tsv");
  ASSERT_GE(predictions[0].size(), 3u);
  const std::vector<std::string> tail(predictions[0].end() - 3, predictions[0].end());
  EXPECT_EQ(tail, (std::vector<std::string>{"prediction_corrected", "gap", "gap_corrected"}));
  const auto results = nlohmann::json::parse(ReadFile(dir / "out/results.json"));
  const double before = Pooled(results, "krr", "gap_slope"), after = Pooled(results, "krr", "corrected_gap_slope");
  std::printf("gap slope %.3f -> %.3f corrected\n", before, after);
  EXPECT_LT(before, -0.2);
  EXPECT_LT(std::abs(after), std::abs(before) / 2);
  EXPECT_TRUE(results["learners"][0]["folds"][0]["bias_correction"].contains("slope"));
  EXPECT_THAT(ReadFile(dir / "out/study.resolved.json"), HasSubstr("\"bias_correction\": \"linear\""));
}
