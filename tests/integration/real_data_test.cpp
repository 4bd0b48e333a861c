// The optional real-data checks: real cohorts of ../shared/data beside the project (skipped with a message when it is
// absent, as in a user's clone). The stroke lesions of LESYMAP (131 binary lesion maps on the 1 mm MRIcron grid, the
// AAL atlas of Debian's mricron-data on the same grid, a behavioural score simulated by LESYMAP's authors from the
// lesion load of left perisylvian cortex): the known regions lead, the score is predicted, and the study run on
// features gives the kernel run's answers.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "testing.hpp"

using neuromkl::testing::ReadTsvByColumn;
using neuromkl::testing::RunCli;
using neuromkl::testing::SharedData;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;

namespace {

constexpr const char* kLesions = "lesymap_stroke_lesions/participants.tsv";
constexpr const char* kAtlas = "atlases/aal_mricron_1mm/aal.nii.gz";

class StrokeLesions : public ::testing::Test {
 protected:
  void SetUp() override {
    NEUROMKL_SKIP_WITHOUT_SHARED_DATA(kLesions);
    NEUROMKL_SKIP_WITHOUT_SHARED_DATA(kAtlas);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  /// The results folder of the study on `representation` ("kernel" or "features"), run once per process. ENMKL-KRR with
  /// fixed parameters, 5-fold CV: the configuration the documentation's figures were measured with.
  /// `covariates`: the lesion volume removed inside every fold (the usual control of lesion-symptom mapping).
  static std::string Run(const std::string& representation, bool covariates = false) {
    if (!dir_) dir_ = new TempDir();
    const std::string name = representation + (covariates ? "_volume" : "");
    const std::string out = *dir_ / name;
    if (std::filesystem::exists(out + "/results.json")) return out;
    const std::string study = *dir_ / (name + ".json");
    WriteFile(study, R"({"name": "lesymap_)" + name + R"(", "subjects": {"table": ")" + SharedData(kLesions) + R"("},
      "target": {"column": "behavior", "task": "regression"},
      "atlas": {"image": ")" + SharedData(kAtlas) + R"(", "labels": ")" + SharedData("atlases/aal_mricron_1mm/aal.nii.txt") + R"("},
      "kernels": {"cache": false, "representation": ")" + representation + R"("},
      "cv": {"outer": {"scheme": "kfold", "k": 5}},
      "learners": [{"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}], "seed": 3)" +
                         (covariates ? R"(, "covariates": ["lesion_volume_mm3"])" : "") + "}");
    const auto r = RunCli("run " + study + " --out " + out + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return out;
  }

  static inline TempDir* dir_ = nullptr;
};

}  // namespace

// The score was simulated from lesions of left perisylvian cortex: those five regions take the first five places of the
// kernel weights (measured 24.3, 13.5, 13.5, 9.4 and 6.1 %; the sixth, Occipital_Mid_L, 5.2 %), and the out-of-fold R^2
// is high (measured 0.670).
TEST_F(StrokeLesions, TheLeftPerisylvianRegionsLeadAndTheScoreIsPredicted) {
  const auto regions = ReadTsvByColumn(Run("kernel") + "/regions_enmkl_krr.tsv");
  ASSERT_GE(regions.size(), 5u);
  std::set<std::string> top;
  for (std::size_t i = 0; i < 5; ++i) top.insert(regions[i].at("name"));
  EXPECT_EQ(top, (std::set<std::string>{"Rolandic_Oper_L", "Postcentral_L", "Temporal_Sup_L", "Parietal_Inf_L", "Precentral_L"}));
  double r2 = NAN;
  for (const auto& row : ReadTsvByColumn(Run("kernel") + "/metrics.tsv"))
    if (row.at("learner") == "enmkl_krr" && row.at("metric") == "r2") r2 = std::stod(row.at("pooled"));
  EXPECT_GT(r2, 0.6);
}

// On real images (a 1 mm grid, 53 regions without a lesion in any subject) the feature form is the kernels': decisions
// within 1e-6 of the largest and shares within 1e-6 percentage points (measured 1.3e-15 and 1e-14: the same kernels
// summed in another order).
TEST_F(StrokeLesions, FeaturesGiveTheKernelRunsAnswers) {
  std::map<std::string, double> decision;
  double scale = 0;
  for (const auto& row : ReadTsvByColumn(Run("kernel") + "/predictions.tsv")) {
    decision[row.at("subject")] = std::stod(row.at("decision"));
    scale = std::max(scale, std::abs(decision[row.at("subject")]));
  }
  const auto features = ReadTsvByColumn(Run("features") + "/predictions.tsv");
  ASSERT_EQ(features.size(), decision.size());
  for (const auto& row : features) EXPECT_NEAR(std::stod(row.at("decision")), decision.at(row.at("subject")), 1e-6 * scale) << row.at("subject");
  std::map<std::string, double> share;
  for (const auto& row : ReadTsvByColumn(Run("kernel") + "/regions_enmkl_krr.tsv")) share[row.at("name")] = std::stod(row.at("mean_percent"));
  const auto featureShares = ReadTsvByColumn(Run("features") + "/regions_enmkl_krr.tsv");
  ASSERT_EQ(featureShares.size(), share.size());
  for (const auto& row : featureShares) EXPECT_NEAR(std::stod(row.at("mean_percent")), share.at(row.at("name")), 1e-6) << row.at("name");
}

// The same with the lesion volume removed inside every fold, the usual control of lesion-symptom mapping: the features
// run gives the kernel run's answers within the tolerances above.
TEST_F(StrokeLesions, LesionVolumeIsRemovedOnFeaturesAsOnKernels) {
  std::map<std::string, double> decision;
  double scale = 0;
  for (const auto& row : ReadTsvByColumn(Run("kernel", true) + "/predictions.tsv")) {
    decision[row.at("subject")] = std::stod(row.at("decision"));
    scale = std::max(scale, std::abs(decision[row.at("subject")]));
  }
  const auto features = ReadTsvByColumn(Run("features", true) + "/predictions.tsv");
  ASSERT_EQ(features.size(), decision.size());
  for (const auto& row : features) EXPECT_NEAR(std::stod(row.at("decision")), decision.at(row.at("subject")), 1e-6 * scale) << row.at("subject");
  std::map<std::string, double> share;
  for (const auto& row : ReadTsvByColumn(Run("kernel", true) + "/regions_enmkl_krr.tsv")) share[row.at("name")] = std::stod(row.at("mean_percent"));
  const auto featureShares = ReadTsvByColumn(Run("features", true) + "/regions_enmkl_krr.tsv");
  ASSERT_EQ(featureShares.size(), share.size());
  for (const auto& row : featureShares) EXPECT_NEAR(std::stod(row.at("mean_percent")), share.at(row.at("name")), 1e-6) << row.at("name");
}
