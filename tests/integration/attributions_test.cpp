// Why this subject: every out-of-fold decision value split over the kernels (attributions.tsv), end to end. The parts
// add up to the decision value predictions.tsv has, for each learner, with one or several sources and with covariates;
// each source's sum is the sum of its kernels' parts; the planted regions carry the split; multiclass writes none.
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::ReadTsvByColumn;
using neuromkl::testing::RunCli;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

class Attributions : public neuromkl::testing::SimulatedCohortSuite<Attributions> {
 protected:
  // Signal in Hippocampus_L, Precuneus_R and Frontal_Mid_L of the first modality; an age confound in Amygdala_R.
  static void SetUpTestSuite() {
    SimulateCohort("--subjects 60 --downsample 3 --seed 5 --effect 0.8 --second-modality --age-regions Amygdala_R --clinical-effect 1");
  }
  static std::string Run(const std::string& name, const std::string& extra) {
    const std::string study = Cohort() + "/" + name + ".json";
    WriteFile(study, R"({"name": ")" + name + R"(", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "params": {"c": 0.01}}, {"name": "simplemkl", "params": {"c": 1.0}}],
      "cv": {"outer": {"k": 4}, "inner": {"k": 3}}, "seed": 5)" + extra + "}");
    const auto r = RunCli("run " + study + " --out " + Cohort() + "/" + name + "-out -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return Cohort() + "/" + name + "-out";
  }
  using Row = std::map<std::string, std::string>;
  static double Number(const Row& row, const std::string& column) { return std::stod(row.at(column)); }
  /// An out-of-fold prediction's identity in attributions.tsv and predictions.tsv.
  static std::string Key(const Row& row) { return row.at("subject") + "|" + row.at("learner") + "|" + row.at("repeat") + "|" + row.at("fold"); }
  static std::pair<std::vector<std::string>, std::vector<Row>> Table(const std::string& path) { return {ReadTsv(path).at(0), ReadTsvByColumn(path)}; }
  /// Checks bias + parts = decision = predictions.tsv's decision for every row; returns the kernel columns.
  static std::vector<std::string> CheckSums(const std::string& out) {
    const auto [header, rows] = Table(out + "/attributions.tsv");
    std::vector<std::string> kernels;
    for (std::size_t c = 6; c < header.size(); ++c)
      if (header[c].rfind("source:", 0) != 0) kernels.push_back(header[c]);
    std::map<std::string, double> predicted;  // subject|learner|repeat|fold -> decision
    for (const auto& p : ReadTsvByColumn(out + "/predictions.tsv")) predicted[Key(p)] = Number(p, "decision");
    EXPECT_EQ(rows.size(), predicted.size());  // every out-of-fold prediction of every learner
    for (const auto& row : rows) {
      double sum = Number(row, "bias");
      for (const auto& k : kernels) sum += Number(row, k);
      const double decision = Number(row, "decision");
      // 1e-9 relative: the parts are the decision's own products; the files' 17 significant digits add 1e-16 each
      EXPECT_NEAR(sum, decision, 1e-9 * std::max(1.0, std::abs(decision))) << row.at("subject") << " " << row.at("learner");
      const std::string key = Key(row);
      EXPECT_EQ(predicted.count(key), 1u) << key;
      if (predicted.count(key)) {
        EXPECT_EQ(decision, predicted.at(key)) << key;
      }
    }
    return kernels;
  }
};

TEST_F(Attributions, PartsAddUpToEveryDecisionAndThePlantedRegionsCarryThem) {
  const std::string out = Run("one-source", "");
  const auto kernels = CheckSums(out);
  EXPECT_EQ(kernels.size(), 116u);
  // The planted regions hold most of what separates the classes: their parts' mean |value| over subjects is above
  // that of every other region but the age region (without covariates the confound is a signal too), per learner.
  const auto [header, rows] = Table(out + "/attributions.tsv");
  for (const std::string learner : {"enmkl_svm", "svm", "simplemkl"}) {
    std::map<std::string, double> meanAbs;
    for (const auto& row : rows)
      if (row.at("learner") == learner)
        for (const auto& k : kernels) meanAbs[k] += std::abs(Number(row, k));
    const double planted = std::min({meanAbs["Hippocampus_L"], meanAbs["Precuneus_R"], meanAbs["Frontal_Mid_L"]});
    for (const auto& [k, v] : meanAbs)
      if (k != "Hippocampus_L" && k != "Precuneus_R" && k != "Frontal_Mid_L" && k != "Amygdala_R") {
        EXPECT_LT(v, planted) << learner << " " << k;
      }
  }
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_EQ(j["attributions"]["table"], "attributions.tsv");
  EXPECT_THAT(j["attributions"]["note"].get<std::string>(), HasSubstr("bias + the parts = the decision value"));
}

TEST_F(Attributions, SeveralSourcesWithCovariatesGiveEachSourcesSum) {
  const std::string out = Run("sources", R"(, "covariates": ["age"], "kernels": {"sources": [{"name": "mri", "kind": "images"},
      {"name": "noise", "kind": "images", "image_column": "image_b"}, {"name": "clin", "kind": "tabular", "tabular": {"table": "participants.tsv", "groups": {"clinical": ["clinical"]}}}]})");
  const auto kernels = CheckSums(out);
  const auto [header, rows] = Table(out + "/attributions.tsv");
  EXPECT_THAT(header, ::testing::IsSupersetOf({"source:mri", "source:noise", "source:clin", "clin:clinical", "mri:Hippocampus_L"}));
  for (const auto& row : rows)
    for (const std::string source : {"mri", "noise", "clin"}) {
      double sum = 0;
      for (const auto& k : kernels)
        if (k.rfind(source + ":", 0) == 0) sum += Number(row, k);
      EXPECT_NEAR(Number(row, "source:" + source), sum, 1e-12 * std::max(1.0, std::abs(sum))) << source;
    }
  // With age removed inside the folds the age region no longer drives the decisions: its parts are below the planted
  // regions' for every learner.
  for (const std::string learner : {"enmkl_svm", "svm", "simplemkl"}) {
    std::map<std::string, double> meanAbs;
    for (const auto& row : rows)
      if (row.at("learner") == learner)
        for (const std::string k : {"mri:Amygdala_R", "mri:Hippocampus_L", "mri:Precuneus_R", "mri:Frontal_Mid_L"}) meanAbs[k] += std::abs(Number(row, k));
    EXPECT_LT(meanAbs["mri:Amygdala_R"], std::min({meanAbs["mri:Hippocampus_L"], meanAbs["mri:Precuneus_R"], meanAbs["mri:Frontal_Mid_L"]})) << learner;
  }
}

TEST_F(Attributions, MulticlassStudiesWriteNone) {
  neuromkl::testing::TempDir dir;
  const std::string cohort = dir / "mc", out = dir / "mc-out";
  ASSERT_EQ(RunCli("simulate --out " + cohort + " --subjects 45 --classes 3 --downsample 3 --seed 2 -q").exitCode, 0);
  const auto r = RunCli("run " + cohort + "/study.json --out " + out + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/attributions.tsv"));
  EXPECT_FALSE(nlohmann::json::parse(ReadFile(out + "/results.json")).contains("attributions"));
}

}  // namespace
