// The command line as a user meets it: exit codes, messages, atomic outputs, the cache.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/export/derivative.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::SourcePath;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

std::string WagerStudy(const TempDir& dir) {
  const std::string path = dir / "wager.json";
  WriteFile(path, R"({"name": "wager", "subjects": {"table": ")" + SourcePath("examples/wager2008_emoreg/participants.tsv") +
                      R"("}, "target": {"column": "Y_Reappraisal_Success", "task": "regression"}, "atlas": "aal",
                         "learners": [{"name": "enmkl_krr", "grid": {"lambda": [0.1, 1, 10], "mu": [0.1, 0.5, 1]}}, {"name": "krr"}]})");
  return path;
}

TEST(Cli, VersionNamesTheLibraries) {
  const auto r = RunCli("--version");
  EXPECT_EQ(r.exitCode, 0);
  for (const char* lib : {"neuromkl 0.", "itk 5.2", "eigen 3.4", "tbb 2021", "openblas OpenBLAS", "arch "}) EXPECT_THAT(r.output, HasSubstr(lib));
}

TEST(Cli, HelpForEverySubcommand) {
  for (const char* sub : {"run", "validate", "simulate"}) {
    const auto r = RunCli(std::string(sub) + " --help");
    EXPECT_EQ(r.exitCode, 0) << sub;
    EXPECT_THAT(r.output, HasSubstr(sub == std::string("simulate") ? "--subjects" : "STUDY.json")) << sub;
  }
}

TEST(Cli, ValidateWagerPrintsTheSummary) {
  TempDir dir;
  const auto r = RunCli("validate " + WagerStudy(dir));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("30 rows"));
  EXPECT_THAT(r.output, HasSubstr("used for supervised learning: 30"));
  EXPECT_THAT(r.output, HasSubstr("range [-0.3714, 2.056]"));  // participants.tsv: min and max of the outcome
  EXPECT_THAT(r.output, HasSubstr("116 regions"));
  EXPECT_THAT(r.output, HasSubstr("47x56x31, 3.4375x3.4375x4.5 mm"));
  EXPECT_THAT(r.output, HasSubstr("resampled onto the image grid"));
  EXPECT_THAT(r.output, HasSubstr("lambda (3 values) x mu (3 values) = 9 points"));
  EXPECT_THAT(r.output, HasSubstr("CV plan: outer stratified 5-fold"));
}

TEST(Cli, BadConfigExitsTwoWithThePointer) {
  TempDir dir;
  WriteFile(dir / "bad.json", R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "regression"},
                                  "learners": [{"name": "krr", "params": {"lamda": 1}}]})");
  const auto r = RunCli("validate " + (dir / "bad.json"));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown key \"lamda\" in /learners/0/params; did you mean \"lambda\"?"));
  EXPECT_EQ(RunCli("validate " + (dir / "missing.json")).exitCode, 2);
  EXPECT_EQ(RunCli("frobnicate").exitCode, 2);
}

class CliRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = RunCli("simulate --out " + (*dir_ / "cohort") + " --subjects 16 --downsample 2 --seed 3 -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Study() { return *dir_ / "cohort/study.json"; }
  static TempDir* dir_;
};
TempDir* CliRun::dir_ = nullptr;

TEST_F(CliRun, RunWritesACompleteOutputFolder) {
  const std::string out = *dir_ / "out_complete";
  const auto r = RunCli("run " + Study() + " --out " + out);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Results: " + out));
  for (const char* f : {"results.json", "study.resolved.json", "regions.tsv", "subjects.tsv", "predictions.tsv", "metrics.tsv", "folds.tsv",
                        "regions_enmkl_svm.tsv", "regions_enmkl_svm.json", "regions_svm.tsv", "report.html", "weights/sub-group_space-MNIColin27_desc-EnmklSvmMean_weights.nii.gz",
                        "weights/sub-group_space-MNIColin27_desc-SvmFold0_weights.nii.gz", "kernels/index.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  const std::string results = ReadFile(out + "/results.json");
  for (const char* key : {"\"neuromkl_version\"", "\"seed\": 3", "\"input_hash\"", "\"kernel_weights\"", "\"status\": \"converged\"",
                          "\"chosen_params\"", "\"inner_scores\"", "\"balanced_accuracy\""})
    EXPECT_THAT(results, HasSubstr(key));
  EXPECT_THAT(ReadFile(out + "/study.resolved.json"), HasSubstr("\"nan_policy\": \"drop_voxel\""));
}

TEST_F(CliRun, ExistingOutputNeedsForceAndSecondRunHitsTheCache) {
  const std::string out = *dir_ / "out_force";
  ASSERT_EQ(RunCli("run " + Study() + " --out " + out).exitCode, 0);
  const auto again = RunCli("run " + Study() + " --out " + out);
  EXPECT_EQ(again.exitCode, 2);
  EXPECT_THAT(again.output, HasSubstr("--force"));
  const auto forced = RunCli("run " + Study() + " --out " + out + " --force");
  EXPECT_EQ(forced.exitCode, 0) << forced.output;
  EXPECT_THAT(forced.output, HasSubstr("cache hit"));
  EXPECT_THAT(ReadFile(out + "/results.json"), HasSubstr("\"cache\": \"hit\""));
}

TEST_F(CliRun, AFailedRunLeavesNoOutputAndKeepsTheOldOne) {
  // A private copy of the cohort whose image we can corrupt after a good run.
  const std::string cohort = *dir_ / "cohort_copy";
  fs::copy(*dir_ / "cohort", cohort, fs::copy_options::recursive);
  const std::string study = cohort + "/study.json";
  const std::string out = *dir_ / "out_atomic";
  ASSERT_EQ(RunCli("run " + study + " --out " + out).exitCode, 0);
  const std::string before = ReadFile(out + "/results.json");
  WriteFile(cohort + "/images/sub-0005.nii.gz", "\x1f\x8b\x08 truncated");  // validate passes (the file exists); decoding fails

  const auto failed = RunCli("run " + study + " --out " + out + " --force");
  EXPECT_EQ(failed.exitCode, 2);
  EXPECT_THAT(failed.output, HasSubstr("sub-0005.nii.gz"));
  EXPECT_EQ(ReadFile(out + "/results.json"), before);  // the previous results are untouched
  const auto fresh = RunCli("run " + study + " --out " + (*dir_ / "out_never"));
  EXPECT_EQ(fresh.exitCode, 2);
  EXPECT_FALSE(fs::exists(*dir_ / "out_never"));
  for (const auto& e : fs::directory_iterator(dir_->Path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();  // no half-written folder left
}

TEST_F(CliRun, ThreadCountDoesNotChangeResults) {
  const std::string a = *dir_ / "out_t1", b = *dir_ / "out_t2";
  ASSERT_EQ(RunCli("run " + Study() + " --out " + a + " --threads 1").exitCode, 0);
  ASSERT_EQ(RunCli("run " + Study() + " --out " + b + " --threads 2").exitCode, 0);
  for (const char* f : {"regions_enmkl_svm.tsv", "regions_svm.tsv", "predictions.tsv", "metrics.tsv", "folds.tsv"}) {
    const std::string one = ReadFile(a + "/" + f);
    EXPECT_GT(one.size(), 100u) << f;  // compare real content, not two missing files
    EXPECT_EQ(one, ReadFile(b + "/" + f)) << f;
  }
  for (const char* map : {"weights/sub-group_space-MNIColin27_desc-EnmklSvmMean_weights.nii.gz", "weights/sub-group_space-MNIColin27_desc-SvmFold2_weights.nii.gz"})
    EXPECT_EQ(neuromkl::io::ReadVolume(a + "/" + map).data, neuromkl::io::ReadVolume(b + "/" + map).data) << map;
}

/// metrics.tsv as learner -> metric -> {pooled, fold_mean, fold_sd, permutation_p, pooled_ci95_low, pooled_ci95_high}.
std::map<std::string, std::map<std::string, std::vector<double>>> Metrics(const std::string& dir) {
  std::map<std::string, std::map<std::string, std::vector<double>>> out;
  const auto rows = neuromkl::testing::ReadTsv(dir + "/metrics.tsv");
  for (std::size_t r = 1; r < rows.size(); ++r)
    for (std::size_t c = 2; c < rows[r].size(); ++c) out[rows[r][0]][rows[r][1]].push_back(rows[r][c] == "n/a" ? std::nan("") : std::stod(rows[r][c]));
  return out;
}

TEST(CliEvaluation, RealEffectBeatsChanceAndNullEffectIsNotSignificant) {
  TempDir dir;
  for (const char* effect : {"1.0", "0"}) {
    const std::string cohort = dir / (std::string("effect_") + effect);
    ASSERT_EQ(RunCli("simulate --out " + cohort + " --subjects 40 --downsample 3 --effect " + effect + " --seed 5 -q").exitCode, 0);
    WriteFile(cohort + "/eval.json", R"({"name": "eval", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "cv": {"outer": {"k": 5}, "inner": {"k": 4}}, "permutations": {"count": 19}, "seed": 5,
      "learners": [{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [0.1, 10]}}, {"name": "svm", "grid": {"c": [0.1, 10]}}]})");
    const auto r = RunCli("run " + cohort + "/eval.json -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    const auto m = Metrics(cohort + "/results/eval");
    for (const char* learner : {"enmkl_svm", "svm"}) {
      const auto& ba = m.at(learner).at("balanced_accuracy");  // pooled, fold mean, fold sd, p, 95 % interval
      ASSERT_EQ(ba.size(), 6u);
      EXPECT_TRUE(ba[4] <= ba[0] && ba[0] <= ba[5]) << learner;
      if (std::string(effect) != "0") {
        EXPECT_GT(ba[0], 0.75) << learner;
        EXPECT_LE(ba[3], 0.05) << learner;  // 19 permutations: the smallest p is 1/20
      } else {
        EXPECT_LT(std::abs(ba[0] - 0.5), 0.2) << learner;
        EXPECT_GT(ba[3], 0.05) << learner;
      }
    }
    EXPECT_TRUE(fs::exists(cohort + "/results/eval/null_distribution.tsv"));
  }
}

TEST(CliEvaluation, WagerRegressionReportsRAndR2AndMseWithFoldSpread) {
  TempDir dir;
  const auto r = RunCli("run " + WagerStudy(dir) + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("R^2"));
  const auto m = Metrics(dir / "out");
  for (const char* learner : {"enmkl_krr", "krr"})
    for (const char* metric : {"pearson_r", "r2", "mse", "mae", "nmse", "r_squared_pearson"}) {
      const auto& v = m.at(learner).at(metric);
      ASSERT_EQ(v.size(), 6u);
      EXPECT_TRUE(std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2])) << learner << " " << metric;
      EXPECT_TRUE(v[4] <= v[0] && v[0] <= v[5]) << learner << " " << metric;  // the bootstrap interval holds the pooled value
      EXPECT_GT(v[2], 0.0) << "fold spread of " << metric;
    }
  const std::string results = ReadFile(dir / "out/results.json");
  EXPECT_THAT(results, HasSubstr("\"inner_criterion\": \"mse"));
  // Complete outputs, and a report that renders in a real browser (the Wager grid is not the atlas grid).
  for (const char* f : {"report.html", "regions_enmkl_krr.tsv", "regions_krr.tsv", "weights/sub-group_space-MNIColin27_desc-EnmklKrrMean_weights.nii.gz",
                        "weights/sub-group_space-MNIColin27_desc-KrrFold4_weights.nii.gz",
                        "predictions.tsv", "folds.tsv", "kernels/index.json"})
    EXPECT_TRUE(fs::exists(dir / ("out/" + std::string(f)))) << f;
  ASSERT_EQ(std::system("command -v chromium > /dev/null 2>&1"), 0) << "chromium is needed (scripts/test.sh installs it)";
  const std::string dom = dir / "dom.html";
  const std::string cmd = neuromkl::testing::HeadlessChromium(dir / "chromium") + " --dump-dom file://" + (dir / "out/report.html") + " > " + dom + " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  // Two scatter plots and per learner (2) region chart, counts chart, the weight map's and the activation
  // pattern's montages and their colour bars.
  const std::string html = ReadFile(dom);
  EXPECT_THAT(html, HasSubstr("data-figures=\"14\" data-figures-ok=\"14\" data-figures-bad=\"0\""));
  EXPECT_NE(html.find("data-texts-cut=\"0\""), std::string::npos)
      << "chart texts cut off at their figure's edge: " << html.substr(std::min(html.size(), html.find("data-texts-cut-list")), 300);
}

}  // namespace

TEST(CliSeedLearners, EveryNewLearnerRunsOnASimulatedCohortWithUnlabelledSubjects) {
  // 30 labelled + 12 unlabelled subjects: dkelm uses the 12 as unlabelled data, the others ignore them.
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "c") + " --subjects 30 --unlabelled 12 --downsample 3 --effect 1.2 --seed 6 -q").exitCode, 0);
  WriteFile(dir / "c/seeds.json", R"({"name": "seeds", "subjects": {"table": "participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "cv": {"outer": {"k": 3}, "inner": {"k": 3}},
    "learners": [{"name": "kelm"}, {"name": "mkelm", "grid": {"c": [0.1, 10]}}, {"name": "mkl_bp", "params": {"p": 3, "v": 0.5}, "grid": {"c": [0.1, 10]}},
                 {"name": "bsadmm_kelm", "params": {"bias": 1}, "grid": {"c": [0.1, 10]}}, {"name": "dkelm", "grid": {"c": [0.1, 10]}}],
    "permutations": {"count": 3}})");
  const auto r = RunCli("run " + (dir / "c/seeds.json") + " --out " + (dir / "out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto results = nlohmann::json::parse(ReadFile(dir / "out/results.json"));
  ASSERT_EQ(results["learners"].size(), 5u);
  for (const auto& l : results["learners"]) {
    const std::string name = l["name"];
    EXPECT_GT(l["metrics"]["pooled"]["balanced_accuracy"].get<double>(), 0.6) << name;
    EXPECT_TRUE(fs::exists(dir / ("out/regions_" + name + ".tsv"))) << name;
    // The map of learner "mkl_bp" is named with its BIDS label "MklBp" (docs/outputs.md).
    EXPECT_TRUE(fs::exists(dir / ("out/" + neuromkl::exporting::MapStem("MNIColin27", neuromkl::exporting::BidsLabel(name) + "Mean") + ".nii.gz"))) << name;
    for (const auto& f : l["folds"]) EXPECT_EQ(f["decision_values"].size(), f["n_test"].get<std::size_t>()) << name;
  }
  const auto subjects = ReadTsv(dir / "out/subjects.tsv");
  ASSERT_EQ(subjects[0][1], "used");
  int unlabelled = 0;
  for (const auto& row : subjects) unlabelled += row[1] == "unlabelled";
  EXPECT_EQ(unlabelled, 12);
}
