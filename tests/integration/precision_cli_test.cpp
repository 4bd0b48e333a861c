// kernels.precision "float32" end to end: a study run on the compact store gives the float64
// run's decisions, region tables, weight maps and exported models up to float32 rounding of the kernels,
// says so in results.json, and refuses what it cannot do (save the raw kernels).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

/// Column `name` of a TSV as numbers, in row order.
std::vector<double> Column(const std::string& tsv, const std::string& name) {
  const auto rows = ReadTsv(tsv);
  const auto col = static_cast<std::size_t>(std::find(rows.at(0).begin(), rows.at(0).end(), name) - rows[0].begin());
  EXPECT_LT(col, rows[0].size()) << "no column " << name << " in " << tsv;
  std::vector<double> out;
  for (std::size_t r = 1; r < rows.size() && col < rows[0].size(); ++r) out.push_back(std::stod(rows[r].at(col)));
  return out;
}

/// max |a - b| / max |a| (a: the float64 reference).
double RelativeDifference(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) {
      ADD_FAILURE() << "value " << i << " is not finite: " << a[i] << " and " << b[i];
      return std::numeric_limits<double>::infinity();
    }
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(a[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

class PrecisionCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = RunCli("simulate --out " + Path("cohort") + " --subjects 60 --downsample 3 --seed 7 --signal Hippocampus_L,Precuneus_R "
                          "--age-regions Frontal_Sup_L --age-target-correlation 0.7 --age-effect 1.5 -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Path(const std::string& name) { return *dir_ / name; }
  /// A study of both kernel precisions' kind: `kernels` and `extra` are JSON members; returns its path.
  static std::string Study(const std::string& name, const std::string& kernels, const std::string& extra) {
    const std::string path = Path(name + ".json");
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": "cohort/participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "kernels": {)" + kernels + R"(}, "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "grid": {"c": [0.1, 1, 10]}}],
      "output": {"model": true}, "seed": 7)" + extra + "}");
    return path;
  }
  static std::string Results(const std::string& name) { return Path("results/" + name); }
  static TempDir* dir_;
};
TempDir* PrecisionCli::dir_ = nullptr;

// Tolerances: the store's entries carry float32 rounding (~6e-8 relative of the centred kernel); every fold
// computation is in double, except that with covariates the MKL learner's fold copies are float32 too (a second
// rounding), so decisions move by about that (measured 1.1e-7 of the largest decision here with the age covariate,
// 2e-8 to 4e-8 in the library tests). 1e-6 is ~9x the measured and 10x under the issue's 1e-5: a store that kept
// fewer digits (e.g. rounded the raw, uncentred kernels of data with a large mean: 6.4e-6) would fail it.
constexpr double kDecisionTolerance = 1e-6;

TEST_F(PrecisionCli, Float32StudyGivesTheFloat64ResultsAndSaysSo) {
  for (const std::string& covariates : {std::string(), std::string(R"(, "covariates": ["age"])")}) {
    SCOPED_TRACE(covariates.empty() ? "without covariates" : "with covariates");
    const std::string tag = covariates.empty() ? "plain" : "cov";
    auto r = RunCli("run " + Study(tag + "64", "", covariates) + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    r = RunCli("run " + Study(tag + "32", R"("precision": "float32")", covariates) + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const std::string a = Results(tag + "64"), b = Results(tag + "32");
    // Out-of-fold decisions of both learners (MKL in place or from copies, the summed kernel for the SVM).
    EXPECT_LT(RelativeDifference(Column(a + "/predictions.tsv", "decision"), Column(b + "/predictions.tsv", "decision")), kDecisionTolerance);
    // Region shares (percent of the model; ratios of fold quadratics): the same regions in the same order.
    const auto rowsA = ReadTsv(a + "/regions_enmkl_svm.tsv"), rowsB = ReadTsv(b + "/regions_enmkl_svm.tsv");
    ASSERT_EQ(rowsA.size(), rowsB.size());
    for (std::size_t i = 1; i < rowsA.size(); ++i) EXPECT_EQ(rowsA[i][1], rowsB[i][1]) << "rank " << i;
    EXPECT_LT(RelativeDifference(Column(a + "/regions_enmkl_svm.tsv", "mean_percent"), Column(b + "/regions_enmkl_svm.tsv", "mean_percent")),
              kDecisionTolerance);
    // The mean weight map, voxel by voxel (written as float32: its own rounding is 6e-8 relative).
    const std::string map = "/weights/sub-group_space-MNIColin27_desc-EnmklSvmMean_weights.nii.gz";
    const auto mapA = neuromkl::io::ReadVolume(a + map), mapB = neuromkl::io::ReadVolume(b + map);
    EXPECT_LT(RelativeDifference(std::vector<double>(mapA.data.begin(), mapA.data.end()), std::vector<double>(mapB.data.begin(), mapB.data.end())),
              kDecisionTolerance);
    // The exported final models predict the cohort alike.
    for (const auto& [results, out] : {std::pair{a, Path(tag + "pred64")}, std::pair{b, Path(tag + "pred32")}}) {
      r = RunCli("predict " + results + "/model " + Path("cohort/participants.tsv") + " --out " + out + " -q");
      ASSERT_EQ(r.exitCode, 0) << r.output;
    }
    EXPECT_LT(RelativeDifference(Column(Path(tag + "pred64/predictions.tsv"), "decision"), Column(Path(tag + "pred32/predictions.tsv"), "decision")),
              kDecisionTolerance);
    // results.json: the store is recorded (absent for float64); the raw kernels are not saved.
    const auto j64 = nlohmann::json::parse(ReadFile(a + "/results.json")), j32 = nlohmann::json::parse(ReadFile(b + "/results.json"));
    EXPECT_FALSE(j64["kernels"].contains("precision"));
    ASSERT_TRUE(j32["kernels"].contains("precision"));
    EXPECT_EQ(j32["kernels"]["precision"]["values"], "float32");
    EXPECT_EQ(j32["kernels"]["precision"]["centred_with_cohort_mean"], true);
    EXPECT_GT(j32["kernels"]["precision"]["store_mib"].get<double>(), 0.0);
    EXPECT_EQ(j32["kernels"]["regions"], j64["kernels"]["regions"]);  // subjects_with_signal counted before rounding
    EXPECT_TRUE(std::filesystem::exists(a + "/kernels"));
    EXPECT_FALSE(std::filesystem::exists(b + "/kernels"));
    // The resolved study keeps the choice and runs again as it is.
    EXPECT_THAT(ReadFile(b + "/study.resolved.json"), HasSubstr(R"("precision": "float32")"));
    r = RunCli("validate " + b + "/study.resolved.json");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("precision: float32 after the kernel stage (compact store, centred with the cohort mean before rounding)"));
  }
}

// A study that does not centre its folds gets a raw (uncentred) store: its folds must not see the
// cohort's mean. The simulated images have a mean well above their spread, so rounding the raw kernels
// keeps fewer digits than the centred store (measured 6.4e-6 of the largest decision, against 1.1e-7
// centred). That meets the issue's 1e-5 here, but the raw store's error grows with the data's mean over
// their spread, so it is no guarantee (docs/batch.md): the bound is 3e-5, 5x the measured, 30x the centred bound.
TEST_F(PrecisionCli, UncentredStudiesGetARawStore) {
  auto r = RunCli("run " + Study("raw64", R"("centre": false)", "") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  r = RunCli("run " + Study("raw32", R"("centre": false, "precision": "float32")", "") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_LT(RelativeDifference(Column(Results("raw64") + "/predictions.tsv", "decision"), Column(Results("raw32") + "/predictions.tsv", "decision")),
            3e-5);
  const auto j = nlohmann::json::parse(ReadFile(Results("raw32") + "/results.json"));
  EXPECT_EQ(j["kernels"]["precision"]["centred_with_cohort_mean"], false);
}

// The kernel stage of a float32 study rounds each region's kernel as it is formed (the float64 kernels are never
// all held) and caches the store itself: float32 files, another entry than the float64 kernels'. Its results are
// those of rounding the float64 kernels afterwards bit for bit (the same CompactKernel of the same kernel), whether
// computed in memory, served from its own entry, or rounded from a float64 entry.
TEST_F(PrecisionCli, Float32KernelsAreRoundedAsFormedAndCachedAsTheStore) {
  const std::string cache = R"(, "output": {"model": true, "cache_dir": "cache32"})";
  const auto study = [&](const std::string& name, const std::string& kernels) {
    // Study() writes its own "output"; this one adds a cache folder of its own.
    std::string text = ReadFile(Study(name, kernels, ""));
    const auto at = text.find(R"("output": {"model": true})");
    text.replace(at, std::string(R"("output": {"model": true})").size(), cache.substr(2));
    WriteFile(Path(name + ".json"), text);
    return Path(name + ".json");
  };
  auto r = RunCli("run " + study("formed32", R"("precision": "float32")"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("cache hit")));
  // One entry, holding float32 kernels and the float64 diagonals.
  std::vector<std::filesystem::path> entries;
  for (const auto& e : std::filesystem::directory_iterator(Path("cache32"))) entries.push_back(e.path());
  ASSERT_EQ(entries.size(), 1u);
  const auto index = nlohmann::json::parse(ReadFile(entries[0] / "index.json"));
  EXPECT_EQ(index["dtype"], "float32");
  EXPECT_EQ(index["centred"], true);
  ASSERT_FALSE(index["kernels"].empty());
  EXPECT_THAT(ReadFile(entries[0] / index["kernels"][0]["file"].get<std::string>()).substr(0, 128), HasSubstr("'descr': '<f4'"));
  EXPECT_TRUE(std::filesystem::exists(entries[0] / "raw_diagonals.npy"));
  // Served from that entry.
  r = RunCli("run " + study("hit32", R"("precision": "float32")"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cache hit"));
  // A float64 run of the same study writes its own entry, which a float32 run with no entry of its own rounds.
  r = RunCli("run " + study("wide64", ""));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  std::filesystem::remove_all(entries[0]);
  r = RunCli("run " + study("fromwide32", R"("precision": "float32")"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cache hit"));
  const std::string predictions = ReadFile(Results("formed32") + "/predictions.tsv");
  EXPECT_EQ(ReadFile(Results("hit32") + "/predictions.tsv"), predictions);
  EXPECT_EQ(ReadFile(Results("fromwide32") + "/predictions.tsv"), predictions);
  EXPECT_EQ(ReadFile(Results("hit32") + "/regions_enmkl_svm.tsv"), ReadFile(Results("formed32") + "/regions_enmkl_svm.tsv"));
  const auto formed = nlohmann::json::parse(ReadFile(Results("formed32") + "/results.json"));
  const auto wide = nlohmann::json::parse(ReadFile(Results("wide64") + "/results.json"));
  EXPECT_EQ(formed["kernels"]["regions"], wide["kernels"]["regions"]);  // subjects_with_signal from the float64 diagonals
  // Out of core (a budget under the subject data) the stage forms float64 kernels from subject blocks and rounds
  // them at its end: its float32 sums differ from the in-memory ones' at float32 rounding, as in float64 studies.
  r = RunCli("run " + study("blocks32", R"("precision": "float32", "cache": false, "memory_budget_mb": 0.2)"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("subject blocks"));
  EXPECT_LT(RelativeDifference(Column(Results("formed32") + "/predictions.tsv", "decision"), Column(Results("blocks32") + "/predictions.tsv", "decision")),
            kDecisionTolerance);
}

TEST_F(PrecisionCli, BadPrecisionSettingsAreErrorsAtTheirPointers) {
  auto r = RunCli("validate " + Study("half", R"("precision": "float16")", ""));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/kernels/precision"));
  EXPECT_THAT(r.output, HasSubstr("float16"));
  const std::string path = Path("save.json");
  WriteFile(path, R"({"name": "save", "subjects": {"table": "cohort/participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
    "kernels": {"precision": "float32"}, "learners": [{"name": "svm"}], "output": {"save_kernels": true}})");
  r = RunCli("run " + path + " -q");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/output/save_kernels"));
  EXPECT_FALSE(std::filesystem::exists(Results("save")));
}

}  // namespace
