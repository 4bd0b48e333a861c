// kernels.representation end to end: a study run on features (the voxels, no n x n kernels) gives the kernel run's
// chosen parameters, decisions, region shares and exported model, whether its folds form their own kernels (small n)
// or the learners run on the features; auto keeps today's studies on kernels; what the feature form cannot do is
// refused with the JSON pointer, by validate and run alike.
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <map>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "image_fixtures.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using neuromkl::testing::FixtureFormat;
using neuromkl::testing::FixtureImage;
using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

/// (learner, subject) -> a column of predictions.tsv.
std::map<std::pair<std::string, std::string>, double> ByLearnerAndSubject(const std::string& tsv, const std::string& column) {
  const auto rows = ReadTsv(tsv);
  const auto& head = rows.at(0);
  const auto at = [&](const std::string& name) { return static_cast<std::size_t>(std::find(head.begin(), head.end(), name) - head.begin()); };
  std::map<std::pair<std::string, std::string>, double> out;
  for (std::size_t r = 1; r < rows.size(); ++r) out[{rows[r].at(at("learner")), rows[r].at(at("subject"))}] = std::stod(rows[r].at(at(column)));
  return out;
}

/// Largest |a - b| over one learner's entries, relative to its largest |a|.
double LearnerDifference(const std::map<std::pair<std::string, std::string>, double>& a, const std::map<std::pair<std::string, std::string>, double>& b,
                         const std::string& learner) {
  double diff = 0, scale = 0;
  std::size_t compared = 0;
  for (const auto& [key, value] : a) {
    if (key.first != learner) continue;
    const auto it = b.find(key);
    if (it == b.end()) {
      ADD_FAILURE() << "no value for " << key.first << " / " << key.second;
      continue;
    }
    diff = std::max(diff, std::abs(value - it->second));
    scale = std::max(scale, std::abs(value));
    ++compared;
  }
  EXPECT_GT(compared, 0u) << learner;
  return scale > 0 ? diff / scale : diff;
}

/// Region name -> mean share (percent) in regions_<label>.tsv.
std::map<std::string, double> Shares(const std::string& tsv) {
  const auto rows = ReadTsv(tsv);
  const auto& head = rows.at(0);
  const auto name = static_cast<std::size_t>(std::find(head.begin(), head.end(), "name") - head.begin());
  const auto share = static_cast<std::size_t>(std::find(head.begin(), head.end(), "mean_percent") - head.begin());
  std::map<std::string, double> out;
  for (std::size_t r = 1; r < rows.size(); ++r) out[rows[r].at(name)] = std::stod(rows[r].at(share));
  return out;
}

class FeaturesCli : public neuromkl::testing::SimulatedCohortSuite<FeaturesCli> {
 protected:
  static void SetUpTestSuite() {
    SimulateCohort("--subjects 60 --downsample 3 --seed 11 --signal Hippocampus_L,Precuneus_R --nan-fraction 0.002 --age-regions Frontal_Sup_L --unlabelled 4");
  }
  static std::string Path(const std::string& name) { return Dir() / name; }
  /// A study with `kernels` members and `extra` top-level members; the learners: a grid of C for svm, ENMKL-SVM fixed.
  static std::string Study(const std::string& name, const std::string& kernels, const std::string& extra = "",
                           const std::string& learners = R"([{"name": "svm", "grid": {"c": [0.01, 1, 100]}}, {"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])",
                           const std::string& output = R"({"model": true})") {
    const std::string path = Path(name + ".json");
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": "cohort/participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "kernels": {"cache": false)" + (kernels.empty() ? "" : ", " + kernels) + R"(}, "learners": )" + learners +
                        R"(, "cv": {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"scheme": "stratified_kfold", "k": 3}},
      "output": )" + output + R"(, "seed": 5)" + extra + "}");
    return path;
  }
  /// The cohort's images as NIfTI files of `datatype` (2 uint8, 4 int16: codes with a slope per image; 16 float32: the
  /// values those codes stand for) in folder `name`, with the cohort's table.
  static void WriteCodedCohort(const std::string& name, int datatype) {
    const auto table = neuromkl::testing::ReadTsvByColumn(Path("cohort/participants.tsv"));
    std::filesystem::create_directories(Path(name + "/images"));
    std::filesystem::copy_file(Path("cohort/participants.tsv"), Path(name + "/participants.tsv"));
    for (std::size_t i = 0; i < table.size(); ++i) {
      const auto& row = table[i];
      const neuromkl::io::Volume v = neuromkl::io::ReadVolume(Path("cohort/" + row.at("image")));
      const std::array<double, 16> a = v.geometry.RasAffine();
      ASSERT_GT(a[5], 0.0);
      ASSERT_GT(a[10], 0.0);
      FixtureImage im;
      im.dims = v.geometry.dims;
      im.spacing = {std::abs(a[0]), a[5], a[10]};
      im.flipX = a[0] < 0;
      im.rasOrigin = {a[3], a[7], a[11]};
      // Codes 0..255 of the values shifted by 2 (the simulated values lie in about -1.6 .. 6.6), 0 where a value is NaN
      // (an integer image has none); each image's own slope, a float32 as the header stores it.
      const float slope = (9.0f + 0.01f * static_cast<float>(i % 7)) / 255.0f;
      im.datatype = datatype;
      im.slope = datatype == 16 ? 0.0 : slope;
      for (const float x : v.data) {
        const double code = std::isfinite(x) ? std::clamp(std::round((x + 2.0) / slope), 0.0, 255.0) : 0.0;
        im.stored.push_back(datatype == 16 ? static_cast<double>(static_cast<float>(code * static_cast<double>(slope))) : code);
      }
      neuromkl::testing::WriteFixtureImage(Path(name + "/" + row.at("image")), FixtureFormat::Nifti1, im);
    }
  }
  static std::string Results(const std::string& name) { return Path("results/" + name); }
  static nlohmann::json Json(const std::string& name) { return nlohmann::json::parse(ReadFile(Results(name) + "/results.json")); }
  /// The grid point chosen in every outer fold, per learner (results.json).
  static std::vector<std::string> Chosen(const std::string& name) {
    std::vector<std::string> out;
    for (const auto& learner : Json(name).at("learners"))
      for (const auto& fold : learner.at("folds")) out.push_back(learner.at("label").get<std::string>() + " " + fold.at("chosen_params").dump());
    return out;
  }
};

// Tolerances. Formed folds: the kernel run's kernels are products of float32 differences summed in double (~1e-6 of
// the centred kernel, kernels/region_kernels.cpp) and the formed folds' are double products of the same float32 data,
// so decisions move by about that (measured 4e-7): 1e-5 relative. Learners on features (memory_budget_mb 0.01: no fold
// forms its kernels): svm stops at its default tolerance 1e-3 (LIBSVM's eps) on either path, each at another point
// within it (measured 2.8e-4 of the largest decision), and ENMKL's weight steps end within ~2e-5 of the optimum at the
// default tolerances (docs/learners.md; measured 8e-7 here): 1e-3 relative for the decisions and 0.1 point of percent
// for the region shares (measured 2e-5) leave room for both without hiding a wrong answer, which moves them by O(1).
TEST_F(FeaturesCli, FeaturesGiveTheKernelRunsAnswers) {
  const auto kernel = RunCli("run " + Study("on_kernels", R"("representation": "kernel")"));
  ASSERT_EQ(kernel.exitCode, 0) << kernel.output;
  const auto formed = RunCli("run " + Study("formed", R"("representation": "features")"));
  ASSERT_EQ(formed.exitCode, 0) << formed.output;
  const auto learners = RunCli("run " + Study("on_features", R"("representation": "features", "memory_budget_mb": 0.01)"));
  ASSERT_EQ(learners.exitCode, 0) << learners.output;

  EXPECT_EQ(Json("on_kernels").at("kernels").at("representation").at("form"), "kernel");
  for (const char* name : {"formed", "on_features"}) {
    const nlohmann::json rep = Json(name).at("kernels").at("representation");
    EXPECT_EQ(rep.at("form"), "features") << name;
    EXPECT_GT(rep.at("features_mib").get<double>(), 0.0) << name;
    EXPECT_EQ(Json(name).at("kernels").at("regions").size(), Json("on_kernels").at("kernels").at("regions").size()) << name;
    EXPECT_EQ(Chosen(name), Chosen("on_kernels")) << name;
  }
  // The same regions, voxel counts, non-finite voxels, subjects with signal and exclusions (the NaN rule, the rows of
  // the labelled subjects only).
  for (const char* name : {"formed", "on_features"})
    for (const char* key : {"regions", "excluded"}) EXPECT_EQ(Json(name).at("kernels").at(key), Json("on_kernels").at("kernels").at(key)) << name << " " << key;
  EXPECT_EQ(Json("on_features").at("subjects").at("labelled").size(), 60u) << "the unlabelled subjects are not the learners' rows";
  const auto reference = ByLearnerAndSubject(Results("on_kernels") + "/predictions.tsv", "decision");
  const auto viaFormed = ByLearnerAndSubject(Results("formed") + "/predictions.tsv", "decision");
  const auto viaFeatures = ByLearnerAndSubject(Results("on_features") + "/predictions.tsv", "decision");
  for (const char* learner : {"svm", "enmkl_svm"}) {
    EXPECT_LT(LearnerDifference(reference, viaFormed, learner), 1e-5) << learner;
    EXPECT_LT(LearnerDifference(reference, viaFeatures, learner), 1e-3) << learner;
  }
  const auto shares = Shares(Results("on_kernels") + "/regions_enmkl_svm.tsv");
  for (const char* name : {"formed", "on_features"}) {
    const auto other = Shares(Results(name) + "/regions_enmkl_svm.tsv");
    ASSERT_EQ(other.size(), shares.size()) << name;
    for (const auto& [region, share] : shares) EXPECT_NEAR(other.at(region), share, 0.1) << name << " " << region;
  }
  // The exported model: predict gives the kernel run's predictions, and the weight maps were written.
  for (const char* name : {"on_kernels", "on_features"}) {
    const auto p = RunCli("predict " + Results(name) + "/model " + Path("cohort/participants.tsv") + " --out " + Path(std::string("predicted_") + name));
    ASSERT_EQ(p.exitCode, 0) << p.output;
  }
  const auto predicted = ByLearnerAndSubject(Path("predicted_on_kernels/predictions.tsv"), "decision");
  const auto predictedViaFeatures = ByLearnerAndSubject(Path("predicted_on_features/predictions.tsv"), "decision");
  for (const char* learner : {"svm", "enmkl_svm"}) EXPECT_LT(LearnerDifference(predicted, predictedViaFeatures, learner), 1e-3) << learner;
  std::error_code ec;
  EXPECT_TRUE(std::filesystem::is_directory(Results("on_features") + "/weights", ec));
  EXPECT_FALSE(std::filesystem::exists(Results("on_features") + "/kernels", ec)) << "a study on features has no kernels to save";
}

// The kernel stage's other rules on features: nan_policy "zero" (each non-finite value 0) and global-mean intensity
// scaling (each image divided by its mean over the atlas voxels) give the kernel run's intensity scales and decisions
// (formed folds: 1e-5 as above).
TEST_F(FeaturesCli, ZeroNanPolicyAndIntensityScalingAsOnKernels) {
  const std::string rules = R"("nan_policy": "zero", "intensity": {"scaling": "global_mean"})";
  const std::string svm = R"([{"name": "svm", "params": {"c": 1}}])";
  const auto kernel = RunCli("run " + Study("scaled_kernels", R"("representation": "kernel", )" + rules, "", svm));
  ASSERT_EQ(kernel.exitCode, 0) << kernel.output;
  const auto features = RunCli("run " + Study("scaled_features", R"("representation": "features", )" + rules, "", svm));
  ASSERT_EQ(features.exitCode, 0) << features.output;
  const nlohmann::json a = Json("scaled_kernels").at("kernels"), b = Json("scaled_features").at("kernels");
  EXPECT_EQ(b.at("regions"), a.at("regions"));
  EXPECT_EQ(b.at("representation").at("storage").at("held"), "in memory") << "kernels.cache off: nothing to map";
  ASSERT_TRUE(a.contains("intensity")) << "the kernel run records its scales";
  EXPECT_EQ(b.at("intensity"), a.at("intensity"));
  EXPECT_LT(LearnerDifference(ByLearnerAndSubject(Results("scaled_kernels") + "/predictions.tsv", "decision"),
                              ByLearnerAndSubject(Results("scaled_features") + "/predictions.tsv", "decision"), "svm"),
            1e-5);
}

// Images that store integers are held as their codes with one scale per subject (uint8 or int16, a quarter or half of
// float32), which is exact: the simulated images as uint8 codes with per-image scl_slope, the same codes as int16, and
// their values stored as float32 give one study's answers. The float32 cohort holds float32(slope x code), the codes
// hold slope x code in double (6e-8 relative apart); with the solver at 1e-9 the decisions agree to ~1e-7, asserted at
// 1e-5, and the same grid point is chosen in every fold.
TEST_F(FeaturesCli, IntegerImagesAreHeldAsTheirCodes) {
  ASSERT_NO_FATAL_FAILURE(WriteCodedCohort("as_uint8", 2));
  ASSERT_NO_FATAL_FAILURE(WriteCodedCohort("as_int16", 4));
  ASSERT_NO_FATAL_FAILURE(WriteCodedCohort("as_float32", 16));
  // svm over a grid, on the features (budget 0.01 MiB: no fold forms its kernels); the MKL learners' fits on codes are
  // the unit tests' (feature_storage_test.cpp).
  const std::string learners = R"([{"name": "svm", "grid": {"c": [0.01, 1, 100]}, "params": {"tolerance": 1e-9}}])";
  const std::map<std::string, std::string> expected = {{"as_uint8", "uint8"}, {"as_int16", "int16"}, {"as_float32", "float32"}};
  for (const auto& [name, storage] : expected) {
    const std::string study = Path(name + ".json");
    WriteFile(study, R"({"name": ")" + name + R"(", "subjects": {"table": ")" + name + R"(/participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "kernels": {"cache": false, "representation": "features", "memory_budget_mb": 0.01}, "learners": )" + learners +
                         R"(, "cv": {"outer": {"scheme": "stratified_kfold", "k": 3}, "inner": {"scheme": "stratified_kfold", "k": 3}}, "seed": 5})");
    const auto v = RunCli("validate " + study);
    ASSERT_EQ(v.exitCode, 0) << v.output;
    EXPECT_THAT(v.output, HasSubstr("(subjects x voxels x " + std::to_string(storage == "uint8" ? 1 : storage == "int16" ? 2 : 4) + " bytes; " + storage + ": "))
        << name;
    const auto r = RunCli("run " + study);
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const nlohmann::json rep = Json(name).at("kernels").at("representation");
    EXPECT_EQ(rep.at("storage").at("values"), storage) << name;
    if (storage == "float32") EXPECT_THAT(rep.at("storage").at("why").get<std::string>(), HasSubstr("stores float32")) << name;
    else EXPECT_THAT(rep.at("storage").at("why").get<std::string>(), HasSubstr("kept as its codes")) << name;
  }
  EXPECT_NEAR(Json("as_uint8").at("kernels").at("representation").at("features_mib").get<double>() * 4,
              Json("as_float32").at("kernels").at("representation").at("features_mib").get<double>(), 1e-9);
  const auto reference = ByLearnerAndSubject(Results("as_float32") + "/predictions.tsv", "decision");
  for (const char* name : {"as_uint8", "as_int16"}) {
    const auto decisions = ByLearnerAndSubject(Results(name) + "/predictions.tsv", "decision");
    EXPECT_LT(LearnerDifference(reference, decisions, "svm"), 1e-5) << name;
    EXPECT_EQ(Chosen(name), Chosen("as_float32")) << name;
  }
}

// With kernels.cache on, a study's feature matrix is kept in the cache as it is held (float32 values, or the codes of
// integer images with their scales): a second run reads it from there instead of decoding the images, with outputs
// byte for byte the first run's. A damaged entry (one byte of the matrix changed) is a miss that says so, is never
// used, and is written again.
TEST_F(FeaturesCli, FeaturesAreKeptInTheCacheAsTheyAreHeld) {
  ASSERT_NO_FATAL_FAILURE(WriteCodedCohort("cached_uint8", 2));
  const std::map<std::string, std::string> cohorts = {{"float32", "cohort/participants.tsv"}, {"uint8", "cached_uint8/participants.tsv"}};
  for (const auto& [storage, table] : cohorts) {
    const std::string name = "cached_" + storage, cache = Path("cache_" + storage);
    const std::string study = Path(name + ".json");
    WriteFile(study, R"({"name": ")" + name + R"(", "subjects": {"table": ")" + table + R"("},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "kernels": {"representation": "features"}, "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}],
      "cv": {"outer": {"scheme": "stratified_kfold", "k": 3}}, "output": {"cache_dir": ")" + cache + R"("}, "seed": 5})");
    auto run = [&](const std::string& out) {
      const auto r = RunCli("run " + study + " --out " + Path(out));
      EXPECT_EQ(r.exitCode, 0) << r.output;
      return r.output;
    };
    auto results = [&](const std::string& out) { return nlohmann::json::parse(ReadFile(Path(out + "/results.json"))); };
    run(name + "_first");
    EXPECT_EQ(results(name + "_first").at("kernels").at("cache"), "features read and stored (no kernel formed)") << storage;
    std::vector<std::filesystem::path> entries(std::filesystem::directory_iterator(cache), std::filesystem::directory_iterator{});
    ASSERT_EQ(entries.size(), 1u) << storage;
    const nlohmann::json index = nlohmann::json::parse(ReadFile(entries[0] / "index.json"));
    EXPECT_EQ(index.at("storage"), storage);
    EXPECT_GE(index.at("subjects").size(), 60u) << storage;
    EXPECT_EQ(std::filesystem::exists(entries[0] / "row_scale.npy"), storage != "float32");
    const std::string predictions = ReadFile(Path(name + "_first/predictions.tsv"));
    const std::string regions = ReadFile(Path(name + "_first/regions_enmkl_svm.tsv"));

    EXPECT_THAT(run(name + "_hit"), HasSubstr("cache hit")) << storage;
    EXPECT_EQ(results(name + "_hit").at("kernels").at("cache"), "hit (features: no image read)") << storage;
    EXPECT_EQ(results(name + "_hit").at("kernels").at("representation").at("storage").at("values"), storage);
    for (const std::string run : {"_first", "_hit"})  // written into the entry as they were read, then mapped from it
      EXPECT_THAT(results(name + run).at("kernels").at("representation").at("storage").at("held").get<std::string>(),
                  HasSubstr(entries[0].filename().string() + "/features.npy)")) << storage << run;
    EXPECT_EQ(results(name + "_hit").at("kernels").at("regions"), results(name + "_first").at("kernels").at("regions")) << storage;
    EXPECT_EQ(ReadFile(Path(name + "_hit/predictions.tsv")), predictions) << storage;
    EXPECT_EQ(ReadFile(Path(name + "_hit/regions_enmkl_svm.tsv")), regions) << storage;

    std::string bytes = ReadFile(entries[0] / "features.npy");
    bytes[bytes.size() - 3] = static_cast<char>(bytes[bytes.size() - 3] ^ 0x10);
    WriteFile(entries[0] / "features.npy", bytes);
    EXPECT_THAT(run(name + "_damaged"), HasSubstr("ignoring an unreadable feature cache entry")) << storage;
    EXPECT_EQ(results(name + "_damaged").at("kernels").at("cache"), "features read and stored (no kernel formed)") << storage;
    EXPECT_THAT(results(name + "_damaged").at("warnings").dump(), HasSubstr("features.npy: the feature file's values do not match their checksum")) << storage;
    EXPECT_EQ(ReadFile(Path(name + "_damaged/predictions.tsv")), predictions) << storage;
    EXPECT_THAT(run(name + "_rewritten"), HasSubstr("cache hit")) << storage;
    EXPECT_EQ(ReadFile(Path(name + "_rewritten/predictions.tsv")), predictions) << storage;
  }
}

// A cache folder that cannot be made (here a path through a regular file) is a warning, not a failure: the voxels are
// then read into memory and the study's answers are those of a run with the cache off.
TEST_F(FeaturesCli, ACacheFolderThatCannotBeMadeLeavesTheFeaturesInMemory) {
  WriteFile(Path("not_a_folder"), "a file\n");
  const std::string svm = R"([{"name": "svm", "params": {"c": 1}}])";
  const auto off = RunCli("run " + Study("uncached", R"("representation": "features")", "", svm));
  ASSERT_EQ(off.exitCode, 0) << off.output;
  std::string study = ReadFile(Study("unwritable_cache", R"("representation": "features")", "", svm, R"({"cache_dir": ")" + Path("not_a_folder/cache") + R"("})"));
  const std::string cacheOff = R"("cache": false)";
  study.replace(study.find(cacheOff), cacheOff.size(), R"("cache": true)");
  WriteFile(Path("unwritable_cache.json"), study);
  const auto r = RunCli("run " + Path("unwritable_cache.json"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("the features are read into memory, not into the cache folder"));
  const nlohmann::json results = Json("unwritable_cache");
  EXPECT_EQ(results.at("kernels").at("representation").at("storage").at("held"), "in memory");
  EXPECT_THAT(results.at("warnings").dump(), HasSubstr("feature cache not written"));
  EXPECT_EQ(ReadFile(Results("unwritable_cache") + "/predictions.tsv"), ReadFile(Results("uncached") + "/predictions.tsv"));
}

// In a batch, studies on features with the same inputs decode the images once: the first keeps the matrix in the batch's
// kernel cache and the others read it from there (under mpirun the kernel unit stores it before any study starts),
// with the predictions each would have alone.
TEST_F(FeaturesCli, BatchStudiesOnFeaturesDecodeTheImagesOnce) {
  const std::string study = Path("batch_features.json");
  WriteFile(study, R"({"name": "batch_features", "subjects": {"table": "cohort/participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
    "kernels": {"representation": "features"}, "learners": [{"name": "svm", "params": {"c": 1}}],
    "cv": {"outer": {"scheme": "stratified_kfold", "k": 3}}, "seed": 5})");
  const std::string batch = Path("feature_batch/batch.json");
  WriteFile(batch, R"({"name": "fb", "studies": [{"file": ")" + study + R"(", "name": "svm_study"},
    {"file": ")" + study + R"(", "name": "enmkl_study", "overrides": {"learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]}}]})");
  const auto b = RunCli("batch " + batch);
  ASSERT_EQ(b.exitCode, 0) << b.output;
  const std::string out = Path("feature_batch/results/fb");
  std::map<std::string, int> cacheUse;
  for (const char* name : {"svm_study", "enmkl_study"})
    ++cacheUse[nlohmann::json::parse(ReadFile(out + "/studies/" + name + "/results.json")).at("kernels").at("cache").get<std::string>()];
  EXPECT_EQ(cacheUse["features read and stored (no kernel formed)"], 1) << b.output;
  EXPECT_EQ(cacheUse["hit (features: no image read)"], 1) << b.output;
  std::size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(out + "/kernel_cache")) {
    EXPECT_EQ(nlohmann::json::parse(ReadFile(e.path() / "index.json")).at("format"), "neuromkl-features") << e.path();
    ++entries;
  }
  EXPECT_EQ(entries, 1u);
  for (const char* name : {"svm_study", "enmkl_study"}) {
    const std::string alone = Path(std::string("alone_") + name + ".json");
    nlohmann::json j = nlohmann::json::parse(ReadFile(study));
    if (std::string(name) == "enmkl_study") j["learners"] = nlohmann::json::parse(R"([{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])");
    j["kernels"]["cache"] = false;
    WriteFile(alone, j.dump());
    const auto r = RunCli("run " + alone + " --out " + Path(std::string("alone_") + name));
    ASSERT_EQ(r.exitCode, 0) << r.output;
    EXPECT_EQ(ReadFile(out + "/studies/" + name + "/predictions.tsv"), ReadFile(Path(std::string("alone_") + name + "/predictions.tsv"))) << name;
  }
}

// Covariates on features: every fold's rows residualised on age with coefficients fitted on its training controls
// (fit_on), as the kernel run residualises its kernels. The learners on the features (budget 0.01 MiB) against the
// kernel run, with the tolerances of the first test (1e-3 for the decisions, 0.1 point for the shares); and the exported
// model applies the same coefficient images to new subjects: predict gives the kernel model's predictions.
TEST_F(FeaturesCli, CovariatesAreRemovedOnFeaturesAsOnKernels) {
  const std::string covariates = R"(, "covariates": {"columns": ["age"], "fit_on": {"column": "group", "value": "control"}})";
  const auto kernel = RunCli("run " + Study("covariates_kernels", R"("representation": "kernel")", covariates));
  ASSERT_EQ(kernel.exitCode, 0) << kernel.output;
  const std::string study = Study("covariates_features", R"("representation": "features", "memory_budget_mb": 0.01)", covariates);
  const auto v = RunCli("validate " + study);
  ASSERT_EQ(v.exitCode, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("representation: features"));
  const auto features = RunCli("run " + study);
  ASSERT_EQ(features.exitCode, 0) << features.output;
  EXPECT_EQ(Json("covariates_features").at("kernels").at("representation").at("form"), "features");
  EXPECT_EQ(Json("covariates_features").at("covariates"), Json("covariates_kernels").at("covariates"));
  EXPECT_EQ(Chosen("covariates_features"), Chosen("covariates_kernels"));
  const auto reference = ByLearnerAndSubject(Results("covariates_kernels") + "/predictions.tsv", "decision");
  const auto found = ByLearnerAndSubject(Results("covariates_features") + "/predictions.tsv", "decision");
  for (const char* learner : {"svm", "enmkl_svm"}) EXPECT_LT(LearnerDifference(reference, found, learner), 1e-3) << learner;
  const auto shares = Shares(Results("covariates_kernels") + "/regions_enmkl_svm.tsv");
  const auto other = Shares(Results("covariates_features") + "/regions_enmkl_svm.tsv");
  ASSERT_EQ(other.size(), shares.size());
  for (const auto& [region, share] : shares) EXPECT_NEAR(other.at(region), share, 0.1) << region;
  for (const char* name : {"covariates_kernels", "covariates_features"}) {
    const auto p = RunCli("predict " + Results(name) + "/model " + Path("cohort/participants.tsv") + " --out " + Path(std::string("predicted_") + name));
    ASSERT_EQ(p.exitCode, 0) << p.output;
  }
  const auto predicted = ByLearnerAndSubject(Path("predicted_covariates_kernels/predictions.tsv"), "decision");
  const auto viaFeatures = ByLearnerAndSubject(Path("predicted_covariates_features/predictions.tsv"), "decision");
  for (const char* learner : {"svm", "enmkl_svm"}) EXPECT_LT(LearnerDifference(predicted, viaFeatures, learner), 1e-3) << learner;
}

TEST_F(FeaturesCli, AutoKeepsSmallStudiesOnKernelsAndValidateSaysWhy) {
  const std::string study = Study("auto", "");
  const auto v = RunCli("validate " + study);
  ASSERT_EQ(v.exitCode, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("representation: kernels (auto: kernels, as they"));
  EXPECT_THAT(v.output, HasSubstr("MiB (subjects x voxels x 4 bytes; float32: subject "));
  const auto r = RunCli("run " + study);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const nlohmann::json rep = Json("auto").at("kernels").at("representation");
  EXPECT_EQ(rep.at("form"), "kernel");
  EXPECT_THAT(rep.at("why").get<std::string>(), HasSubstr("auto: kernels"));
  const auto f = RunCli("validate " + Study("asked", R"("representation": "features")"));
  ASSERT_EQ(f.exitCode, 0) << f.output;
  EXPECT_THAT(f.output, HasSubstr("representation: features (kernels.representation \"features\")"));
  EXPECT_THAT(f.output, HasSubstr("the study's kernels are never formed"));
}

TEST_F(FeaturesCli, WhatTheFeatureFormCannotDoIsRefusedByValidateAndRun) {
  struct Case {
    std::string name, kernels, extra, learners, expected, output = R"({"model": true})";
  };
  const std::string svm = R"([{"name": "svm"}])";
  const std::vector<Case> cases = {
      {"other_learner", R"("representation": "features")", "", R"([{"name": "kelm"}])", "/learners/0/name: the learners with a feature form"},
      {"save_kernels", R"("representation": "features")", "", svm, "/output/save_kernels", R"({"save_kernels": true})"},
      {"bad_value", R"("representation": "voxels")", "", svm, "/kernels/representation"},
  };
  for (const auto& c : cases) {
    const std::string study = Study(c.name, c.kernels, c.extra, c.learners, c.output);
    for (const char* command : {"validate ", "run "}) {
      const auto r = RunCli(command + study);
      EXPECT_EQ(r.exitCode, 2) << c.name << " " << command << r.output;
      EXPECT_THAT(r.output, HasSubstr(c.expected)) << c.name << " " << command;
    }
    std::error_code ec;
    EXPECT_FALSE(std::filesystem::exists(Results(c.name), ec)) << c.name << ": no output from a refused study";
  }
}

}  // namespace
