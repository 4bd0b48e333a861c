// What each region holds alone and what is lost without it, end to end: the region scan ranks the planted regions
// first (classification and regression); the ablation of the source holding the signal lowers the metric with paired
// p < 0.05 and that of a pure-noise source does not; the study file's checks name the key.
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsvByColumn;
using neuromkl::testing::RunCli;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

const std::vector<std::string> kPlanted = {"Hippocampus_L", "Precuneus_R", "Frontal_Mid_L"};

class KernelSubsets : public neuromkl::testing::SimulatedCohortSuite<KernelSubsets> {
 protected:
  // Signal in the planted regions of the first modality; the second modality (image_b) is noise only.
  static void SetUpTestSuite() { SimulateCohort("--subjects 60 --downsample 3 --seed 8 --effect 0.8 --second-modality"); }
  static std::string Study(const std::string& name, const std::string& body) {
    const std::string path = Cohort() + "/" + name + ".json";
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": "participants.tsv"}, "atlas": "aal",
      "cv": {"outer": {"k": 5}, "inner": {"k": 3}}, "seed": 8, )" + body + "}");
    return path;
  }
  static std::string Run(const std::string& study, const std::string& out) {
    const auto r = RunCli("run " + study + " --out " + Cohort() + "/" + out + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return Cohort() + "/" + out;
  }
  static constexpr const char* kClassification = R"("target": {"column": "group", "task": "classification", "positive_class": "patient"})";
};

TEST_F(KernelSubsets, TheRegionScanRanksThePlantedRegionsFirst) {
  const std::string out = Run(Study("scan", std::string(kClassification) + R"(, "learners": [{"name": "svm", "params": {"c": 0.01}}],
      "region_scan": {"learner": "svm"})"),
                              "scan");
  const auto table = ReadTsvByColumn(out + "/region_scan_svm.tsv");
  ASSERT_EQ(table.size(), 116u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_THAT(kPlanted, ::testing::Contains(table[i].at("name"))) << "rank " << i + 1;
  for (std::size_t i = 1; i < table.size(); ++i)  // ranked by the pooled balanced accuracy, best first
    EXPECT_GE(std::stod(table[i - 1].at("balanced_accuracy")), std::stod(table[i].at("balanced_accuracy")));
  // Each row is that region's own nested CV: the scan of a study with only the top region gives its row's values.
  const std::string top = table[0].at("name");
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_EQ(j["region_scan"]["metric"], "balanced_accuracy");
  EXPECT_EQ(j["region_scan"]["rows"][0]["name"], top);
  EXPECT_DOUBLE_EQ(j["region_scan"]["rows"][0]["pooled"]["balanced_accuracy"].get<double>(), std::stod(table[0].at("balanced_accuracy")));
  // The atlas painted with the metric: the top region's voxels hold its value.
  ASSERT_EQ(j["region_scan"]["maps"].size(), 1u);
  const auto map = neuromkl::io::ReadVolume(out + "/" + j["region_scan"]["maps"][0].get<std::string>());
  EXPECT_GT(std::count(map.data.begin(), map.data.end(), static_cast<float>(std::stod(table[0].at("balanced_accuracy")))), 0);
  EXPECT_THAT(ReadFile(out + "/report.html"), HasSubstr("<h2>Each region alone</h2>"));
  // The learner's own nested CV is unchanged by the scan.
  const std::string plain = Run(Study("no-scan", std::string(kClassification) + R"(, "learners": [{"name": "svm", "params": {"c": 0.01}}])"), "no-scan");
  EXPECT_EQ(ReadFile(plain + "/predictions.tsv"), ReadFile(out + "/predictions.tsv"));
}

TEST_F(KernelSubsets, RegressionScansRankByTheSmallestError) {
  neuromkl::testing::TempDir dir;
  const std::string cohort = dir / "reg";
  ASSERT_EQ(RunCli("simulate --out " + cohort + " --task regression --subjects 60 --downsample 3 --seed 9 --effect 1 -q").exitCode, 0);
  WriteFile(cohort + "/scan.json", R"({"name": "reg-scan", "subjects": {"table": "participants.tsv"}, "atlas": "aal",
    "target": {"column": "score", "task": "regression"}, "learners": [{"name": "krr", "params": {"lambda": 1}}], "cv": {"outer": {"k": 5}, "inner": {"k": 3}},
    "region_scan": {"learner": "krr"}, "output": {"weight_maps": false}})");
  const auto r = RunCli("run " + cohort + "/scan.json --out " + cohort + "/out -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto table = ReadTsvByColumn(cohort + "/out/region_scan_krr.tsv");
  for (std::size_t i = 0; i < 3; ++i) EXPECT_THAT(kPlanted, ::testing::Contains(table[i].at("name"))) << "rank " << i + 1;
  for (std::size_t i = 1; i < table.size(); ++i) EXPECT_LE(std::stod(table[i - 1].at("mse")), std::stod(table[i].at("mse")));
}

TEST_F(KernelSubsets, WithoutTheSignalSourceTheModelIsWorseAndWithoutTheNoiseSourceItIsNot) {
  const std::string out = Run(Study("ablation", std::string(kClassification) + R"(, "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}],
      "kernels": {"sources": [{"name": "mri", "kind": "images"}, {"name": "noise", "kind": "images", "image_column": "image_b"}]},
      "ablation": {"learner": "enmkl_svm", "top_regions": 2})"),
                              "ablation");
  const auto table = ReadTsvByColumn(out + "/ablation_enmkl_svm.tsv");
  ASSERT_EQ(table.size(), 4u);  // two sources, two top regions
  const auto& mri = table[0];
  const auto& noise = table[1];
  EXPECT_EQ(mri.at("removed"), "mri");
  EXPECT_EQ(mri.at("kind"), "source");
  EXPECT_EQ(mri.at("kernels_removed"), "116");
  EXPECT_LT(std::stod(mri.at("change_without")), -0.1);
  for (const char* p : {"p_corrected_t", "p_mcnemar", "p_delong", "p_permutation"}) {
    EXPECT_LT(std::stod(mri.at(p)), 0.05) << p;
    EXPECT_GT(std::stod(noise.at(p)), 0.05) << p;
  }
  // The top regions come from the learner's region table, in its order.
  const auto regions = ReadTsvByColumn(out + "/regions_enmkl_svm.tsv");
  EXPECT_EQ(table[2].at("removed"), regions[0].at("name"));
  EXPECT_EQ(table[3].at("removed"), regions[1].at("name"));
  EXPECT_EQ(table[2].at("kind"), "region");
  const std::string report = ReadFile(out + "/report.html");
  EXPECT_THAT(report, HasSubstr("<h2>What is lost without a source or region</h2>"));
  EXPECT_THAT(report, HasSubstr("<td>noise</td><td>source</td>"));
  // results.json: the same, with every test's record; the full model's value is the study's pooled metric.
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_EQ(j["ablation"]["full"]["balanced_accuracy"], j["learners"][0]["metrics"]["pooled"]["balanced_accuracy"]);
  std::vector<std::string> tests;
  for (const auto& t : j["ablation"]["rows"][0]["tests"]) tests.push_back(t["test"]);
  EXPECT_EQ(tests, (std::vector<std::string>{"corrected_resampled_t", "mcnemar_exact", "delong", "paired_permutation"}));
  EXPECT_DOUBLE_EQ(j["ablation"]["rows"][0]["tests"][3]["p_value"].get<double>(), std::stod(mri.at("p_permutation")));
}

TEST_F(KernelSubsets, TheStudyFileChecksNameTheKey) {
  const std::string unknown = Study("bad-scan", std::string(kClassification) + R"(, "learners": [{"name": "svm"}], "region_scan": {"learner": "svn"})");
  for (const char* command : {"validate", "run"}) {
    const auto r = RunCli(std::string(command) + " " + unknown + " -q");
    EXPECT_EQ(r.exitCode, 2) << command;
    EXPECT_THAT(r.output, HasSubstr("/region_scan/learner: expected the label of one of the study's learners (svm), found \"svn\"")) << command;
  }
  const std::string nothing = Study("bad-ablation", std::string(kClassification) + R"(, "learners": [{"name": "svm"}], "ablation": {"learner": "svm"})");
  const auto r = RunCli("validate " + nothing + " -q");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("/ablation: expected something to leave out"));
}

}  // namespace
