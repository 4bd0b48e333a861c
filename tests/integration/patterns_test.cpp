// Activation patterns (Haufe et al. 2014) beside the weight maps: a suppressor region, which shares a
// subject-specific noise with the signal region but carries no effect, gets large weights of opposite
// sign (the model subtracts the noise) and a pattern near 0; the signal region has both.
#include <cmath>
#include <filesystem>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/atlas/atlas.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

namespace {

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

/// mean_percent of each region in a region table.
std::map<std::string, double> Shares(const std::string& tsv) {
  const auto rows = ReadTsv(tsv);
  std::size_t name = 0, mean = 0;
  for (std::size_t c = 0; c < rows[0].size(); ++c) {
    if (rows[0][c] == "name") name = c;
    if (rows[0][c] == "mean_percent") mean = c;
  }
  std::map<std::string, double> out;
  for (std::size_t r = 1; r < rows.size(); ++r) out[rows[r][name]] = std::stod(rows[r][mean]);
  return out;
}

TEST(ActivationPatterns, SuppressorHasLargeWeightsButNoPattern) {
  TempDir dir;
  auto r = RunCli("simulate --out " + (dir / "c") + " --subjects 120 --downsample 4 --signal Hippocampus_L --suppressor Amygdala_R "
                  "--suppressor-noise 2 --effect 1 --noise 0.25 --seed 5 -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // A mask with the two regions only, so the model has one signal and one suppressor kernel.
  const auto files = neuromkl::atlas::BuiltinAtlas("aal");
  const auto aal = neuromkl::atlas::LoadAtlas(files->image, files->table);
  std::int32_t hippocampus = 0, amygdala = 0;
  for (const auto& region : aal.regions) {
    if (region.name == "Hippocampus_L") hippocampus = static_cast<std::int32_t>(region.label);
    if (region.name == "Amygdala_R") amygdala = static_cast<std::int32_t>(region.label);
  }
  neuromkl::io::Volume mask;
  mask.geometry = aal.geometry;
  for (auto label : aal.labels) mask.data.push_back(label == hippocampus || label == amygdala ? 1.0f : 0.0f);
  neuromkl::io::WriteVolume(dir / "mask.nii.gz", mask);
  WriteFile(dir / "s.json", R"({"name": "sup", "subjects": {"table": "c/participants.tsv"}, "mask": "mask.nii.gz",
    "target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "kernels": {"normalise": false}, "learners": [{"name": "svm", "params": {"c": 100}}], "cv": {"outer": {"k": 4}},
    "output": {"dir": "out"}, "seed": 5})");
  r = RunCli("run " + (dir / "s.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string out = dir / "out";
  const auto weights = Shares(out + "/regions_svm.tsv"), pattern = Shares(out + "/regions_svm_pattern.tsv");
  ASSERT_EQ(weights.size(), 2u);
  // Weights: the suppressor carries most of the model (it cancels the shared noise; measured 58 %).
  EXPECT_GT(weights.at("Amygdala_R"), 40.0) << "suppressor weight share";
  // Pattern: the suppressor's part is small (measured 8 %), the signal region's large. Not 0: the suppressor's
  // weights also pick up its own independent voxel noise (SD 0.25), which gives a pattern of w_A SD^2 / Var(f)
  // there (Haufe's A = Cov(x) W / Var(f)); the shares sum to 100 %.
  EXPECT_LT(pattern.at("Amygdala_R"), 12.0) << "suppressor pattern share";
  EXPECT_GT(pattern.at("Hippocampus_L"), 88.0);
  // The maps: the suppressor's mean weight has the opposite sign to the signal region's and is larger
  // (measured -0.56 vs 0.19); its mean pattern is near 0 relative to the signal region's (-0.04 vs 0.30).
  const auto w = neuromkl::io::ReadVolume(out + "/weights/sub-group_space-MNIColin27_desc-SvmMean_weights.nii.gz");
  const auto a = neuromkl::io::ReadVolume(out + "/weights/sub-group_space-MNIColin27_desc-SvmMean_pattern.nii.gz");
  const auto labels = neuromkl::atlas::ResampleLabels(aal.geometry, aal.labels, w.geometry);
  auto mean = [&](const neuromkl::io::Volume& v, std::int32_t label) {
    double sum = 0;
    int count = 0;
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == label) sum += v.data[i], ++count;
    return sum / std::max(1, count);
  };
  EXPECT_LT(mean(w, amygdala) * mean(w, hippocampus), 0.0) << "opposite signs";
  EXPECT_GT(std::abs(mean(w, amygdala)), std::abs(mean(w, hippocampus)));
  EXPECT_GT(mean(a, hippocampus), 0.0) << "patients are higher in the signal region";
  EXPECT_LT(std::abs(mean(a, amygdala)), 0.2 * std::abs(mean(a, hippocampus)));
  const auto results = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_EQ(results["learners"][0]["weight_maps"]["pattern"]["mean"], "weights/sub-group_space-MNIColin27_desc-SvmMean_pattern.nii.gz");
  EXPECT_EQ(results["learners"][0]["pattern_regions"]["top"][0]["name"], "Hippocampus_L");
  EXPECT_THAT(ReadFile(out + "/weights/sub-group_space-MNIColin27_desc-SvmMean_pattern.json"), HasSubstr("Haufe"));
  EXPECT_THAT(ReadFile(out + "/report.html"), HasSubstr("Activation pattern"));
}

}  // namespace
