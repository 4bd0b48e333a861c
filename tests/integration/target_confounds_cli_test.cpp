// /target/confounds end to end: a simulated score that the images predict only through age (a confound of the score),
// the adjusted targets of predictions.tsv against the fold coefficients of results.json, an exported model applied
// with predict, and the errors of bad settings from validate and run alike.
#include <cmath>
#include <filesystem>
#include <map>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/core/strings.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

using Rows = std::vector<std::vector<std::string>>;

std::size_t Column(const Rows& rows, const std::string& name) {
  const auto at = std::find(rows[0].begin(), rows[0].end(), name);
  EXPECT_NE(at, rows[0].end()) << "no column " << name;
  return static_cast<std::size_t>(at - rows[0].begin());
}

/// subject -> a column's value in a subjects table.
std::map<std::string, double> ByParticipant(const Rows& table, const std::string& column) {
  std::map<std::string, double> out;
  for (std::size_t r = 1; r < table.size(); ++r) out[table[r][Column(table, "subject")]] = std::stod(table[r][Column(table, column)]);
  return out;
}

class TargetConfoundsCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    // "age only": the images carry age (Frontal_Sup_L, Occipital_Mid_L) and nothing of the score beyond it; age goes
    // with the score (r = 0.8). "signal": the score also shifts Hippocampus_L and Precuneus_R.
    for (const auto& [name, args] : {std::pair{"ageonly", "--signal none --seed 11"}, std::pair{"signal", "--signal Hippocampus_L,Precuneus_R --seed 12"},
                                     std::pair{"newsubjects", "--signal Hippocampus_L,Precuneus_R --seed 13"}}) {
      const auto r = RunCli(std::string("simulate --task regression --subjects 80 --downsample 3 --age-regions Frontal_Sup_L,Occipital_Mid_L "
                                        "--age-target-correlation 0.8 --age-effect 2 --effect 1 -q --out ") +
                            (*dir_ / name) + " " + args);
      ASSERT_EQ(r.exitCode, 0) << r.output;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  /// A KRR study of the score on `cohort` with `target` members after column and task; returns its path.
  static std::string Study(const std::string& name, const std::string& cohort, const std::string& target, const std::string& extra = "") {
    const std::string path = *dir_ / (name + ".json");
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": ")" + cohort + R"(/participants.tsv"},
      "target": {"column": "score", "task": "regression")" + target + R"(}, "atlas": "aal",
      "learners": [{"name": "krr", "params": {"lambda": 1.0}}], "output": {"weight_maps": false}, "seed": 5)" + extra + "}");
    return path;
  }
  static nlohmann::json Results(const std::string& name) { return nlohmann::json::parse(ReadFile(*dir_ / ("results/" + name + "/results.json"))); }
  static double PooledR(const std::string& name) { return Results(name)["learners"][0]["metrics"]["pooled"]["pearson_r"].get<double>(); }
  static TempDir* dir_;
};
TempDir* TargetConfoundsCli::dir_ = nullptr;

// The images predict the score through age alone: unadjusted, the study reports r = 0.7; adjusted for age, what is left
// of the score is not in the images and the study is at chance, as it should be (observed r 0.74, permutation p 0.02, and r -0.09, p 0.62).
TEST_F(TargetConfoundsCli, AScorePredictedOnlyThroughAgeIsAtChanceOnceAdjusted) {
  ASSERT_EQ(RunCli("run " + Study("raw", "ageonly", "") + " -q").exitCode, 0);
  const auto r = RunCli("run " + Study("adjusted", "ageonly", R"(, "confounds": ["age"])", R"(, "permutations": {"count": 49})") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_GT(PooledR("raw"), 0.5);
  EXPECT_LT(std::abs(PooledR("adjusted")), 0.25);
  const auto j = Results("adjusted");
  EXPECT_GT(j["learners"][0]["permutations"]["p_values"]["pearson_r"].get<double>(), 0.05);
  // results.json: the design, the in-sample R^2 (r = 0.8 by design: ~0.64) and one coefficient pair per outer fold.
  ASSERT_TRUE(j.contains("target_confounds"));
  EXPECT_EQ(j["target_confounds"]["design_columns"], nlohmann::json::array({"age"}));
  EXPECT_NEAR(j["target_confounds"]["target_r2"].get<double>(), 0.64, 0.15);
  EXPECT_EQ(j["target_confounds"]["coefficients_per_outer_fold"].size(), 5u);  // the default 5 outer folds
  EXPECT_FALSE(Results("raw").contains("target_confounds"));
  EXPECT_THAT(ReadFile(*dir_ / "results/adjusted/report.html"), HasSubstr("regressed out of the target inside every fold"));
}

// Each held-out subject's adjusted target is its score minus its fold's fitted age effect (coefficients in
// results.json, written with 17 significant digits); the gap is taken from it. Tolerance 1e-9: the cells are printed to
// 10 significant digits at least.
TEST_F(TargetConfoundsCli, PredictionsCarryTheAdjustedTargetOfTheirFold) {
  const auto r = RunCli("run " + Study("signal_adjusted", "signal", R"(, "confounds": ["age"])") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_GT(PooledR("signal_adjusted"), 0.3);  // the score's own signal is left to predict (observed 0.47)
  const auto j = Results("signal_adjusted");
  const auto& coefficients = j["target_confounds"]["coefficients_per_outer_fold"];
  const Rows table = ReadTsv(*dir_ / "signal/participants.tsv");
  const auto score = ByParticipant(table, "score"), age = ByParticipant(table, "age");
  const Rows predictions = ReadTsv(*dir_ / "results/signal_adjusted/predictions.tsv");
  const std::size_t subject = Column(predictions, "subject"), fold = Column(predictions, "fold"), adjusted = Column(predictions, "target_adjusted");
  ASSERT_EQ(predictions.size(), 81u);
  double mean = 0;
  for (std::size_t k = 1; k < predictions.size(); ++k) {
    const auto& row = predictions[k];
    const auto& b = coefficients[std::stoul(row[fold])];
    const double expected = score.at(row[subject]) - b[0].get<double>() - b[1].get<double>() * age.at(row[subject]);
    EXPECT_NEAR(std::stod(row[adjusted]), expected, 1e-9 * (1 + std::abs(expected))) << row[subject];
    mean += std::stod(row[adjusted]) / 80;
  }
  EXPECT_LT(std::abs(mean), 0.3);  // residuals of training fits: near zero on average for the held-out subjects too
}

// With the brain-age bias correction too: the correction is fitted on the inner-CV predictions of the adjusted targets,
// and both gaps are taken from the adjusted target. The score is shifted by +10 here: fitted against the raw score, the
// correction's offset is near (1 - slope) x 10 (observed 7.0-7.4 per fold); against the adjusted one, whose mean is 0,
// it is near 0 (observed |offset| <= 0.004).
TEST_F(TargetConfoundsCli, BiasCorrectionWorksOnTheAdjustedTarget) {
  const Rows table = ReadTsv(*dir_ / "signal/participants.tsv");
  std::string shifted;
  for (std::size_t r = 0; r < table.size(); ++r) {
    for (std::size_t c = 0; c < table[r].size(); ++c)
      shifted += (c ? "\t" : "") + (r > 0 && table[0][c] == "score" ? neuromkl::FormatDouble(std::stod(table[r][c]) + 10) : table[r][c]);
    shifted += "\n";
  }
  WriteFile(*dir_ / "signal/participants_shifted.tsv", shifted);
  const std::string path = *dir_ / "corrected.json";
  WriteFile(path, R"({"name": "corrected", "subjects": {"table": "signal/participants_shifted.tsv"},
    "target": {"column": "score", "task": "regression", "confounds": ["age"], "bias_correction": "linear"}, "atlas": "aal",
    "learners": [{"name": "krr", "params": {"lambda": 1.0}}], "output": {"weight_maps": false}, "seed": 5})");
  const auto r = RunCli("run " + path + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const Rows predictions = ReadTsv(*dir_ / "results/corrected/predictions.tsv");
  const std::size_t decision = Column(predictions, "decision"), adjusted = Column(predictions, "target_adjusted"), gap = Column(predictions, "gap"),
                    corrected = Column(predictions, "prediction_corrected"), gapCorrected = Column(predictions, "gap_corrected");
  ASSERT_EQ(predictions.size(), 81u);
  for (std::size_t k = 1; k < predictions.size(); ++k) {
    const auto& row = predictions[k];
    EXPECT_NEAR(std::stod(row[gap]), std::stod(row[decision]) - std::stod(row[adjusted]), 1e-9);
    EXPECT_NEAR(std::stod(row[gapCorrected]), std::stod(row[corrected]) - std::stod(row[adjusted]), 1e-9);
  }
  for (const auto& fold : Results("corrected")["learners"][0]["folds"]) EXPECT_LT(std::abs(fold["bias_correction"]["offset"].get<double>()), 0.05);
  // KRR's predictions of what age leaves barely follow it (fold slopes 0.02-0.08): the correction would amplify their
  // noise (corrected gap slope +1.46 against -0.92 uncorrected), and the warnings say so.
  EXPECT_THAT(Results("corrected")["warnings"].dump(), HasSubstr("the bias correction's slope (of the inner-CV predictions on the target) is below 0.1"));
}

// The exported model predicts the adjusted score of new subjects; predict adjusts their known scores with the final
// model's coefficients (target_adjusted, gap, metrics), and without the age column it still predicts, with no metrics.
TEST_F(TargetConfoundsCli, PredictScoresNewSubjectsAgainstTheirAdjustedTargets) {
  ASSERT_EQ(RunCli("run " + Study("exported", "signal", R"(, "confounds": ["age"])") + " -q").exitCode, 0);
  const auto card = nlohmann::json::parse(ReadFile(*dir_ / "results/exported/model/Krr/model.json"));
  ASSERT_TRUE(card.contains("target_confounds")) << card.dump();
  const auto b = card["target_confounds"]["coefficients"].get<std::vector<double>>();
  ASSERT_EQ(b.size(), 2u);
  auto r = RunCli("predict " + (*dir_ / "results/exported/model") + " " + (*dir_ / "newsubjects/participants.tsv") + " --out " +
                  (*dir_ / "predicted") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const Rows table = ReadTsv(*dir_ / "newsubjects/participants.tsv");
  const auto score = ByParticipant(table, "score"), age = ByParticipant(table, "age");
  const Rows predictions = ReadTsv(*dir_ / "predicted/predictions.tsv");
  const std::size_t subject = Column(predictions, "subject"), adjusted = Column(predictions, "target_adjusted"), gap = Column(predictions, "gap"),
                    prediction = Column(predictions, "prediction");
  ASSERT_EQ(predictions.size(), 81u);
  for (std::size_t k = 1; k < predictions.size(); ++k) {
    const auto& row = predictions[k];
    const double expected = score.at(row[subject]) - b[0] - b[1] * age.at(row[subject]);
    EXPECT_NEAR(std::stod(row[adjusted]), expected, 1e-9 * (1 + std::abs(expected)));
    EXPECT_NEAR(std::stod(row[gap]), std::stod(row[prediction]) - std::stod(row[adjusted]), 1e-9);
  }
  const auto summary = nlohmann::json::parse(ReadFile(*dir_ / "predicted/summary.json"));
  EXPECT_GT(summary["performance"]["krr"]["pearson_r"].get<double>(), 0.3) << summary.dump();
  // The same subjects without their age: predictions, a warning, no metrics.
  std::string withoutAge;
  for (std::size_t r0 = 0; r0 < table.size(); ++r0) {
    std::string line;
    for (std::size_t c = 0; c < table[r0].size(); ++c)
      if (table[0][c] != "age") line += (line.empty() ? "" : "\t") + table[r0][c];
    withoutAge += line + "\n";
  }
  WriteFile(*dir_ / "newsubjects/participants_noage.tsv", withoutAge);
  r = RunCli("predict " + (*dir_ / "results/exported/model") + " " + (*dir_ / "newsubjects/participants_noage.tsv") + " --out " +
             (*dir_ / "predicted_noage"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("the table lacks their column(s) age"));
  EXPECT_EQ(ReadTsv(*dir_ / "predicted_noage/predictions.tsv").size(), 81u);
  EXPECT_FALSE(nlohmann::json::parse(ReadFile(*dir_ / "predicted_noage/summary.json"))["performance"].contains("krr"));
}

// A batch comparing learners on the adjusted score reads target_adjusted from each study's predictions.tsv: its paired
// tests score what the studies score (the MSE of each side equals that study's pooled MSE).
TEST_F(TargetConfoundsCli, BatchComparisonsScoreTheAdjustedTargets) {
  Study("batchbase", "signal", R"(, "confounds": ["age"])");
  const std::string batch = *dir_ / "batch.json";
  WriteFile(batch, R"({"name": "batch", "output": {"dir": ")" + (*dir_ / "batch") + R"("}, "studies": [], "matrix": {"base": "batchbase.json",
    "learners": [{"name": "krr", "params": {"lambda": 1.0}}, {"name": "enmkl_krr", "params": {"lambda": 1.0, "mu": 0.5}}]}})");
  const auto r = RunCli("batch " + batch + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto rows = neuromkl::testing::ReadTsvByColumn(*dir_ / "batch/batch_comparisons.tsv");
  bool tested = false;
  for (const auto& row : rows) {
    if (row.at("test") != "corrected_resampled_t") continue;
    tested = true;
    for (const auto& [study, value] : {std::pair{row.at("study_a"), row.at("value_a")}, std::pair{row.at("study_b"), row.at("value_b")}}) {
      const auto j = nlohmann::json::parse(ReadFile(*dir_ / ("batch/studies/" + study + "/results.json")));
      EXPECT_NEAR(std::stod(value), j["learners"][0]["metrics"]["pooled"]["mse"].get<double>(), 1e-12) << study;
    }
  }
  EXPECT_TRUE(tested) << "no paired t-test in batch_comparisons.tsv";
}

TEST_F(TargetConfoundsCli, BadConfoundsAreRefusedByValidateAndRunAlike) {
  // A column that copies the score (x 2 + 1) leaves nothing to predict.
  const Rows table = ReadTsv(*dir_ / "signal/participants.tsv");
  std::string copied;
  for (std::size_t r = 0; r < table.size(); ++r) {
    std::string line;
    for (const auto& cell : table[r]) line += cell + "\t";
    copied += line + (r == 0 ? "score2" : neuromkl::FormatDouble(2 * std::stod(table[r][Column(table, "score")]) + 1)) + "\n";
  }
  WriteFile(*dir_ / "signal/participants_copy.tsv", copied);
  const std::string copyStudy = *dir_ / "copy.json";
  WriteFile(copyStudy, R"({"name": "copy", "subjects": {"table": "signal/participants_copy.tsv"}, "target": {"column": "score",
    "task": "regression", "confounds": ["age", "score2"]}, "atlas": "aal", "learners": [{"name": "krr"}], "output": {"weight_maps": false}})");
  struct Case {
    std::string study, expected;
  };
  const std::vector<Case> cases = {
      {Study("agee", "signal", R"(, "confounds": ["agee"])"), "/target/confounds/0: column \"agee\" is not in the subjects table"},
      {Study("self", "signal", R"(, "confounds": ["age", "score"])"), "/target/confounds: the target column \"score\" cannot be its own confound"},
      {Study("fiton", "signal", R"(, "confounds": {"columns": ["age"], "fit_on": {"column": "age", "value": "1"}})"),
       "/target/confounds/fit_on/value: no subject used has \"1\" in column \"age\""},
      {copyStudy, "[target:ConfoundsExplainTarget]"},
  };
  for (const auto& c : cases)
    for (const std::string command : {"validate ", "run "}) {
      const auto r = RunCli(command + c.study);
      EXPECT_EQ(r.exitCode, 2) << command << c.study << "\n" << r.output;
      EXPECT_THAT(r.output, HasSubstr(c.expected)) << command << c.study;
    }
  // Confounds of a class label are not defined: a config error at the key.
  const std::string classification = *dir_ / "classification.json";
  WriteFile(classification, R"({"name": "classification", "subjects": {"table": "signal/participants.tsv"}, "target": {"column": "score",
    "task": "classification", "confounds": ["age"]}, "atlas": "aal", "learners": [{"name": "svm"}]})");
  const auto r = RunCli("validate " + classification);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/target/confounds: confounds applies to task \"regression\" only"));
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "results/copy"));
  EXPECT_FALSE(std::filesystem::exists(*dir_ / "results/agee"));
}

}  // namespace
