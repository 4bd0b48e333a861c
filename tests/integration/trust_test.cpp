// Results a reader can trust: region summaries without size bias, fit status and grid
// edges reported wherever results are read.
#include <filesystem>
#include <set>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/core/npy.hpp"
#include "neuromkl/io/nifti.hpp"
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

// Mean |w| per voxel would rank the smallest regions first (Frontal_Mid_L, a signal region, comes 27th of 116 on this
// cohort by it; rank correlated with region size at 0.97). ||w_r|| has no such bias.
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
  const auto study = SizeCohort(dir, R"([{"name": "simplemkl", "params": {"c": 1, "max_iterations": 2, "gap_tolerance": 1e-12}},
                                         {"name": "krr", "grid": {"lambda": [0.001, 0.01, 0.1]}}])");
  const auto r = RunCli("run " + study + " --out " + (dir / "out"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("learner simplemkl: 5 of 5 outer folds did not converge (5 max_iterations_reached)"));
  // Its inner-CV fits (for the Platt scaling of a binary target) are capped too, and said so.
  EXPECT_THAT(r.output, ::testing::ContainsRegex("inner-CV fits did not converge \\([0-9]+ capped at max_iterations\\); the parameter search compared "
                                                 "some grid points at models short of their optimum: raise max_iterations"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("stalled")));  // SimpleMKL caps; only a stalled fit's advice is a looser tolerance
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
  // Inner fits on 4/5 of a training set: most are capped too (14 of 15 here; a vertex optimum can be reached in 2 steps).
  EXPECT_GT(results["learners"][0]["inner_fits_not_converged"].get<long>(), 0);
  EXPECT_LE(results["learners"][0]["inner_fits_not_converged"].get<long>(), results["learners"][0]["inner_fits"].get<long>());
  EXPECT_EQ(results["learners"][0]["inner_fits_capped"], results["learners"][0]["inner_fits_not_converged"]);  // SimpleMKL caps, never stalls
  EXPECT_EQ(results["learners"][1]["inner_fits_not_converged"], 0);  // krr solves exactly
}

// 60 subjects, thousands of voxels: from some C on the SVM interpolates (no alpha at C), and the inner fits at the larger C
// of the grid are that fit, said in results.json; a learner without a box never reuses.
TEST(Trust, InnerFitsTakenFromASmallerCAreCountedInResults) {
  TempDir dir;
  const auto study = SizeCohort(dir, R"([{"name": "enmkl_svm", "grid": {"c": [0.001, 1, 100, 10000], "mu": [0.5]}},
                                         {"name": "krr", "grid": {"lambda": [0.01, 1, 100]}}])");
  const auto r = RunCli("run " + study + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto results = nlohmann::json::parse(ReadFile(dir / "out/results.json"));
  const auto& en = results["learners"][0];
  EXPECT_GT(en["inner_fits_reused"].get<long>(), 0);
  EXPECT_LE(en["inner_fits_reused"].get<long>(), en["inner_fits"].get<long>());
  EXPECT_EQ(results["learners"][1]["inner_fits_reused"], 0);
}

TEST(Trust, BatchSummaryNamesFitsThatDidNotConverge) {
  TempDir dir;
  const auto study = SizeCohort(dir, R"([{"name": "simplemkl", "params": {"c": 1, "max_iterations": 2, "gap_tolerance": 1e-12}}])");
  WriteFile(dir / "cohort/batch.json", R"({"name": "b", "studies": [{"file": "study.json", "name": "capped"}]})");
  const auto r = RunCli("batch " + (dir / "cohort/batch.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(ReadFile(dir / "cohort/results/b/batch_summary.tsv"), HasSubstr("0/5 converged (5 max_iterations_reached)"));
}

constexpr int kAmygdalaL = 4201, kAmygdalaR = 4202, kHippocampusL = 4101;

/// The built-in AAL labels on the simulated images' grid (simulate writes on the AAL grid).
std::vector<float> AalLabels() { return neuromkl::io::ReadVolume(neuromkl::testing::SourcePath("atlases/aal/ROI_MNI_V4.nii.gz")).data; }

/// Applies `edit(subject index, is patient, image)` to every image of a simulated cohort.
template <typename Edit>
void EditCohort(const TempDir& dir, Edit edit) {
  const auto rows = ReadTsv(dir / "cohort/participants.tsv");
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const std::string path = dir / ("cohort/" + rows[i][1]);
    auto v = neuromkl::io::ReadVolume(path);
    edit(i - 1, rows[i][2] == "patient", v);
    neuromkl::io::WriteVolume(path, v);
  }
}

double BalancedAccuracy(const std::string& resultsJson, std::size_t learner) {
  return nlohmann::json::parse(ReadFile(resultsJson))["learners"][learner]["metrics"]["pooled"]["balanced_accuracy"].get<double>();
}

// Each image divided by its own mean over the atlas voxels: the divisor equals the hand computation
// (double sums of the same floats: 1e-9 relative) and the kernels are those of the scaled images
// (float products, 1e-5 relative, as the README states for the kernel stage).
TEST(Trust, GlobalMeanScalingEqualsTheHandComputation) {
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "cohort") + " --subjects 12 --seed 5 -q").exitCode, 0);
  WriteFile(dir / "cohort/study.json", R"({"name": "scaled", "subjects": {"table": "participants.tsv"}, "target": {"column": "group",
    "task": "classification", "positive_class": "patient"}, "atlas": "aal", "kernels": {"intensity": {"scaling": "global_mean"}},
    "cv": {"outer": {"scheme": "stratified_kfold", "k": 3}}, "output": {"weight_maps": false}, "learners": [{"name": "krr", "params": {"lambda": 1}}]})");
  const auto r = RunCli("run " + (dir / "cohort/study.json") + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto results = nlohmann::json::parse(ReadFile(dir / "out/results.json"));
  const auto scale = results["kernels"]["intensity"]["scale"].get<std::vector<double>>();
  ASSERT_EQ(scale.size(), 12u);
  const auto labels = AalLabels();
  const auto rows = ReadTsv(dir / "cohort/participants.tsv");
  std::vector<std::vector<float>> images;
  for (int s = 0; s < 2; ++s) {
    images.push_back(neuromkl::io::ReadVolume(dir / ("cohort/" + rows[static_cast<std::size_t>(s) + 1][1])).data);
    double sum = 0;
    long count = 0;
    for (std::size_t v = 0; v < labels.size(); ++v)
      if (labels[v] != 0) sum += images.back()[v], ++count;
    EXPECT_NEAR(scale[static_cast<std::size_t>(s)], sum / static_cast<double>(count), 1e-9 * scale[static_cast<std::size_t>(s)]) << s;
  }
  double k01 = 0;
  for (std::size_t v = 0; v < labels.size(); ++v)
    if (labels[v] == kHippocampusL) k01 += static_cast<double>(images[0][v]) * images[1][v];
  k01 /= scale[0] * scale[1];
  const auto index = nlohmann::json::parse(ReadFile(dir / "out/kernels/index.json"));
  for (const auto& k : index["kernels"])
    if (k["name"] == "Hippocampus_L") {
      EXPECT_NEAR(neuromkl::ReadNpy(dir / ("out/kernels/" + k["file"].get<std::string>()))(0, 1), k01, 1e-5 * k01);
    }
  EXPECT_THAT(ReadFile(dir / "out/report.html"), HasSubstr("intensity scaling"));
}

// Patients' images 30 % brighter overall and no regional effect: without scaling the global
// difference is predicted perfectly; scaling by each image's own mean removes it (chance level).
TEST(Trust, GlobalMeanScalingRemovesAGlobalIntensityDifference) {
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "cohort") + " --subjects 40 --seed 9 --effect 0 -q").exitCode, 0);
  EditCohort(dir, [](std::size_t, bool patient, neuromkl::io::Volume& v) {
    if (patient)
      for (float& x : v.data) x *= 1.3f;
  });
  const std::string common = R"({"subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "classification",
    "positive_class": "patient"}, "atlas": "aal", "output": {"weight_maps": false}, "learners": [{"name": "svm", "params": {"c": 1}}], )";
  WriteFile(dir / "cohort/raw.json", common + R"("name": "raw"})");
  WriteFile(dir / "cohort/scaled.json", common + R"("name": "scaled", "kernels": {"intensity": {"scaling": "global_mean"}}})");
  ASSERT_EQ(RunCli("run " + (dir / "cohort/raw.json") + " --out " + (dir / "raw") + " -q").exitCode, 0);
  ASSERT_EQ(RunCli("run " + (dir / "cohort/scaled.json") + " --out " + (dir / "scaled") + " -q").exitCode, 0);
  EXPECT_GT(BalancedAccuracy(dir / "raw/results.json", 0), 0.9);
  EXPECT_LT(BalancedAccuracy(dir / "scaled/results.json", 0), 0.75);  // chance: SD of balanced accuracy ~0.08 at n = 40
}

// A reference given by region names and the same voxels given as a label image scale identically,
// by each image's mean over those voxels (hand computation, double sums: 1e-9 relative).
TEST(Trust, ReferenceRegionByNamesOrByImageEqualsTheHandComputation) {
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "cohort") + " --subjects 12 --seed 5 -q").exitCode, 0);
  constexpr int kCrus1L = 9001, kCrus1R = 9002;
  auto aal = neuromkl::io::ReadVolume(neuromkl::testing::SourcePath("atlases/aal/ROI_MNI_V4.nii.gz"));
  for (float& v : aal.data) v = (v == kCrus1L || v == kCrus1R) ? 1.0f : 0.0f;
  neuromkl::io::WriteVolume(dir / "cohort/reference.nii.gz", aal);
  const std::string head = R"({"subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "classification",
    "positive_class": "patient"}, "atlas": "aal", "cv": {"outer": {"scheme": "stratified_kfold", "k": 3}}, "output": {"weight_maps": false},
    "learners": [{"name": "krr", "params": {"lambda": 1}}], )";
  WriteFile(dir / "cohort/names.json", head + R"("name": "names", "kernels": {"intensity": {"scaling": {"reference_region": ["Cerebelum_Crus1_L", "Cerebelum_Crus1_R"]}}}})");
  WriteFile(dir / "cohort/image.json", head + R"("name": "image", "kernels": {"intensity": {"scaling": {"reference_region": {"image": "reference.nii.gz"}}}}})");
  std::vector<std::vector<double>> scales;
  for (const char* study : {"names", "image"}) {
    const auto r = RunCli("run " + (dir / ("cohort/" + std::string(study) + ".json")) + " --out " + (dir / study) + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    scales.push_back(nlohmann::json::parse(ReadFile(dir / (std::string(study) + "/results.json")))["kernels"]["intensity"]["scale"].get<std::vector<double>>());
  }
  ASSERT_EQ(scales[0].size(), 12u);
  for (std::size_t s = 0; s < 12; ++s) EXPECT_NEAR(scales[0][s], scales[1][s], 1e-12 * scales[0][s]);
  const auto rows = ReadTsv(dir / "cohort/participants.tsv");
  const auto image = neuromkl::io::ReadVolume(dir / ("cohort/" + rows[1][1])).data;
  double sum = 0;
  long count = 0;
  for (std::size_t v = 0; v < aal.data.size(); ++v)
    if (aal.data[v] != 0.0f) sum += image[v], ++count;
  EXPECT_NEAR(scales[0][0], sum / static_cast<double>(count), 1e-9 * scales[0][0]);
}

TEST(Trust, UnknownReferenceRegionIsAConfigErrorWithAHint) {
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "cohort") + " --subjects 12 --seed 5 -q").exitCode, 0);
  WriteFile(dir / "cohort/ref.json", R"({"name": "ref", "subjects": {"table": "participants.tsv"}, "target": {"column": "group",
    "task": "classification", "positive_class": "patient"}, "atlas": "aal", "learners": [{"name": "svm"}],
    "kernels": {"intensity": {"scaling": {"reference_region": ["Cerebelum_Crus1_L", "Cerebellum_Crus1_R"]}}}})");
  for (const std::string command : {"validate ", "run "}) {  // validate rejects what run rejects, with the same message
    const auto r = RunCli(command + (dir / "cohort/ref.json") + (command == "run " ? " --out " + (dir / "out") : std::string()) + " -q");
    EXPECT_EQ(r.exitCode, 2) << command << r.output;
    EXPECT_THAT(r.output, HasSubstr("/kernels/intensity/scaling/reference_region")) << command;
    EXPECT_THAT(r.output, HasSubstr("did you mean \"Cerebelum_Crus1_R\"")) << command;
  }
}

// Lesion-like data: Amygdala_R is non-zero in 3 patients only, Amygdala_L is zero everywhere. The
// tables say on how few subjects a weight rests, and the exclusion note survives a cache hit.
TEST(Trust, CoverageIsReportedAndExclusionNotesSurviveTheCache) {
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "cohort") + " --subjects 30 --seed 4 --effect 0 -q").exitCode, 0);
  const auto labels = AalLabels();
  int lesioned = 0;
  double inside = 0, outside = 0;  // non-zero values inside / outside the atlas, counted by hand
  EditCohort(dir, [&](std::size_t, bool patient, neuromkl::io::Volume& v) {
    const bool lesion = patient && lesioned < 3;
    lesioned += lesion;
    int extra = 0;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (labels[i] == kAmygdalaL) v.data[i] = 0.0f;
      if (labels[i] == kAmygdalaR) v.data[i] = lesion ? 5.0f : 0.0f;
      if (labels[i] == 0 && extra < 2000 && i % 7 == 0) v.data[i] = 1.0f, ++extra;  // "lesion" voxels no region covers
      if (v.data[i] != 0.0f) ++(labels[i] != 0 ? inside : outside);
    }
  });
  WriteFile(dir / "cohort/study.json", R"({"name": "lesions", "subjects": {"table": "participants.tsv"}, "target": {"column": "group",
    "task": "classification", "positive_class": "patient"}, "atlas": "aal", "output": {"weight_maps": false},
    "learners": [{"name": "enmkl_svm", "params": {"c": 10, "mu": 1}}]})");
  for (const char* out : {"first", "cached"}) {
    const auto r = RunCli("run " + (dir / "cohort/study.json") + " --out " + (dir / out));
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto results = nlohmann::json::parse(ReadFile(dir / (std::string(out) + "/results.json")));
    std::string warnings;
    for (const auto& w : results["warnings"]) warnings += w.get<std::string>() + "\n";
    EXPECT_THAT(warnings, HasSubstr("Amygdala_L excluded: zero kernel")) << out;
  }
  const auto cached = nlohmann::json::parse(ReadFile(dir / "cached/results.json"));
  EXPECT_EQ(cached["kernels"]["cache"], "hit");
  EXPECT_NEAR(cached["kernels"]["non_zero_outside_atlas_share"].get<double>(), outside / (inside + outside), 1e-12);
  EXPECT_THAT(ReadFile(dir / "cached/report.html"), HasSubstr("lie outside the atlas regions"));
  const auto rows = ReadTsv(dir / "first/regions_enmkl_svm.tsv");
  ASSERT_EQ(rows[0][5], "subjects_with_signal");
  for (const auto& row : rows)
    if (row[2] == "Amygdala_R") {
      EXPECT_EQ(row[5], "3");
      EXPECT_EQ(row[6], "yes");
    } else if (row[2] == "Hippocampus_L") {
      EXPECT_EQ(row[5], "30");
      EXPECT_EQ(row[6], "no");
    }
  // A minimum above the cohort size flags every region, so the top regions are named in a warning.
  std::string strict = ReadFile(dir / "cohort/study.json");
  const std::string option = "\"weight_maps\": false";
  strict.replace(strict.find(option), option.size(), option + ", \"min_subjects_with_signal\": 31");
  WriteFile(dir / "cohort/strict.json", strict);
  const auto r = RunCli("run " + (dir / "cohort/strict.json") + " --out " + (dir / "strict"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("regions among its top 10 have non-zero data in fewer than 31 subjects"));
  EXPECT_THAT(r.output, HasSubstr("(30 subjects)"));
}

// On features the images are read straight into the kernel cache's features.npy (mapped while it is written), so a
// region the data leave out (a zero kernel) is taken out of that file in place: the entry is a .npy of the kept voxels
// that the next run maps with no image read, and both runs give the same outputs, with the exclusion noted in both.
TEST(Trust, OnFeaturesAnExcludedRegionLeavesTheCachedMatrixInPlace) {
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "cohort") + " --subjects 30 --seed 4 --effect 0.8 --signal Hippocampus_L -q").exitCode, 0);
  const auto labels = AalLabels();
  EditCohort(dir, [&](std::size_t, bool, neuromkl::io::Volume& v) {
    for (std::size_t i = 0; i < labels.size(); ++i)
      if (labels[i] == kAmygdalaL) v.data[i] = 0.0f;
  });
  WriteFile(dir / "cohort/study.json", R"({"name": "zeroed", "subjects": {"table": "participants.tsv"}, "target": {"column": "group",
    "task": "classification", "positive_class": "patient"}, "atlas": "aal", "output": {"weight_maps": false, "cache_dir": ")" + (dir / "cache") + R"("},
    "kernels": {"representation": "features"}, "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]})");
  for (const char* out : {"first", "cached"}) {
    const auto r = RunCli("run " + (dir / "cohort/study.json") + " --out " + (dir / out));
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto results = nlohmann::json::parse(ReadFile(dir / (std::string(out) + "/results.json")));
    EXPECT_THAT(results["warnings"].dump(), HasSubstr("Amygdala_L excluded: zero kernel")) << out;
    EXPECT_THAT(results["kernels"]["representation"]["storage"]["held"].get<std::string>(), HasSubstr("mapped from the kernel cache folder")) << out;
  }
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir / "cached/results.json"))["kernels"]["cache"], "hit (features: no image read)");
  EXPECT_EQ(ReadFile(dir / "cached/predictions.tsv"), ReadFile(dir / "first/predictions.tsv"));
  EXPECT_EQ(ReadFile(dir / "cached/regions_enmkl_svm.tsv"), ReadFile(dir / "first/regions_enmkl_svm.tsv"));
  std::vector<std::filesystem::path> entries(std::filesystem::directory_iterator(dir / "cache"), std::filesystem::directory_iterator{});
  ASSERT_EQ(entries.size(), 1u);
  const auto index = nlohmann::json::parse(ReadFile(entries[0] / "index.json"));
  const auto voxels = index["voxels"].get<std::int64_t>();
  EXPECT_EQ(index["region_start"].back().get<std::int64_t>(), voxels);
  // The header says the kept shape and the file holds exactly those values (no stale columns at its end).
  const std::uint64_t offset = neuromkl::NpyRowsDataOffset(entries[0] / "features.npy", 30, voxels, neuromkl::NpyType::Float32);
  EXPECT_EQ(std::filesystem::file_size(entries[0] / "features.npy"), offset + 30u * static_cast<std::uint64_t>(voxels) * 4u);
  EXPECT_EQ(index["kernels"].size() + 1, index["region_start"].size());
}

}  // namespace
