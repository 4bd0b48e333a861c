// How stable each learner's maps are over the outer folds and repeats, end to end: the stability and sign-consistency
// maps equal what the fold maps written beside them give, voxel by voxel; each region's sign consistency and selection
// frequency in the table equal those recomputed from the fold maps over the region's voxels; the planted regions'
// weights keep their sign in every fold.
#include <algorithm>
#include <cmath>
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

class FoldStability : public neuromkl::testing::SimulatedCohortSuite<FoldStability> {
 protected:
  // Signal in Hippocampus_L, Precuneus_R and Frontal_Mid_L.
  static void SetUpTestSuite() { SimulateCohort("--subjects 60 --downsample 3 --seed 3 --effect 0.8"); }
  static std::string Run(const std::string& name, const std::string& extra = "") {
    const std::string study = Cohort() + "/" + name + ".json";
    WriteFile(study, R"({"name": ")" + name + R"(", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "params": {"c": 0.01}}],
      "cv": {"outer": {"scheme": "repeated_kfold", "k": 4, "repeats": 2}, "inner": {"k": 3}}, "seed": 3)" + extra + "}");
    const auto r = RunCli("run " + study + " --out " + Cohort() + "/" + name + "-out -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return Cohort() + "/" + name + "-out";
  }
};

TEST_F(FoldStability, MapsAndRegionValuesEqualWhatTheFoldMapsGive) {
  const std::string out = Run("stability");
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  for (const auto& learner : j["learners"]) {
    const std::string label = learner["label"];
    SCOPED_TRACE(label);
    std::vector<std::vector<float>> folds;
    for (const auto& path : learner["weight_maps"]["folds"]) folds.push_back(neuromkl::io::ReadVolume(out + "/" + path.get<std::string>()).data);
    ASSERT_EQ(folds.size(), 8u);  // 4 folds x 2 repeats: all enter
    const auto& stability = learner["weight_maps"]["stability"];
    const auto ratio = neuromkl::io::ReadVolume(out + "/" + stability["mean_over_sd"].get<std::string>()).data;
    const auto sign = neuromkl::io::ReadVolume(out + "/" + stability["sign_consistency"].get<std::string>()).data;
    ASSERT_EQ(ratio.size(), folds[0].size());
    // Voxel by voxel, recomputed here: mean / sample SD, and |positive - negative| / folds (0 where undefined).
    std::vector<int> balance(folds[0].size(), -1);
    for (std::size_t v = 0; v < folds[0].size(); ++v) {
      double mean = 0;
      int positive = 0, negative = 0;
      for (const auto& f : folds) {
        mean += f[v] / 8.0;
        positive += f[v] > 0;
        negative += f[v] < 0;
      }
      double squares = 0;
      for (const auto& f : folds) squares += (f[v] - mean) * (f[v] - mean);
      const double sd = std::sqrt(squares / 7);
      const double expectedRatio = sd > 0 ? mean / sd : 0.0;
      // float storage of a ratio computed in double from float maps: float precision relative to the ratio
      ASSERT_NEAR(ratio[v], expectedRatio, 1e-5 * std::max(1.0, std::abs(expectedRatio))) << "voxel " << v;
      if (positive + negative > 0) balance[v] = std::abs(positive - negative);
      ASSERT_FLOAT_EQ(sign[v], balance[v] < 0 ? 0.0f : static_cast<float>(balance[v] / 8.0)) << "voxel " << v;
    }
    // Each of the top regions: its voxels are those the share map paints with its (distinct) share; its sign
    // consistency is the mean over those voxels that some fold uses, exactly.
    const auto share = neuromkl::io::ReadVolume(out + "/" + learner["region_maps"][0]["share"].get<std::string>()).data;
    const auto table = ReadTsvByColumn(out + "/regions_" + label + ".tsv");
    for (std::size_t i = 0; i < 3; ++i) {
      const auto& row = table[i];
      const auto value = static_cast<float>(std::stod(row.at("mean_percent")));
      long sum = 0, defined = 0, voxels = 0;
      for (std::size_t v = 0; v < share.size(); ++v)
        if (share[v] == value) {
          ++voxels;
          if (balance[v] < 0) continue;
          sum += balance[v];
          ++defined;
        }
      ASSERT_EQ(voxels, std::stol(row.at("voxels"))) << row.at("name");
      ASSERT_GT(defined, 0);
      EXPECT_NEAR(std::stod(row.at("sign_consistency")), static_cast<double>(sum) / (8.0 * static_cast<double>(defined)), 1e-12) << row.at("name");
      // The planted regions' weights keep one sign in (nearly) every fold, far above the 0.273 of random signs.
      EXPECT_GT(std::stod(row.at("sign_consistency")), 0.9) << row.at("name");
      EXPECT_THAT((std::vector<std::string>{"Hippocampus_L", "Precuneus_R", "Frontal_Mid_L"}), ::testing::Contains(row.at("name")));
    }
    // Selection frequency is folds_selected over the 8 folds, in the table and in results.json.
    for (const auto& row : table) EXPECT_DOUBLE_EQ(std::stod(row.at("selection_frequency")), std::stoi(row.at("folds_selected")) / 8.0) << row.at("name");
    EXPECT_EQ(learner["regions"]["table"][0]["sign_consistency"].get<double>(), std::stod(table[0].at("sign_consistency")));
    EXPECT_THAT(ReadFile(out + "/regions_" + label + ".json"), HasSubstr("0.273 is its expectation over 8 folds of independent random signs"));
  }
}

TEST_F(FoldStability, WithoutVoxelMapsTheSignConsistencyIsNotAvailable) {
  const std::string out = Run("no-maps", R"(, "output": {"weight_maps": false})");
  for (const auto& row : ReadTsvByColumn(out + "/regions_svm.tsv")) {
    EXPECT_EQ(row.at("sign_consistency"), "n/a");
    EXPECT_NE(row.at("selection_frequency"), "n/a");
  }
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_FALSE(j["learners"][0].contains("weight_maps"));
  EXPECT_TRUE(j["learners"][0]["regions"]["table"][0]["sign_consistency"].is_null());
}

}  // namespace
