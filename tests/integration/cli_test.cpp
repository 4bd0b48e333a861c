// The command line as a user meets it: exit codes, messages, atomic outputs, the cache.
#include <filesystem>

#include <gmock/gmock.h>

#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::RunCli;
using neuromkl::testing::SharedData;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

std::string WagerStudy(const TempDir& dir) {
  const std::string path = dir / "wager.json";
  WriteFile(path, R"({"name": "wager", "subjects": {"table": ")" + SharedData("wager2008_emoreg/participants.tsv") +
                      R"("}, "target": {"column": "Y_Reappraisal_Success", "task": "regression"}, "atlas": "aal",
                         "learners": [{"name": "enmkl_krr", "grid": {"lambda": [0.1, 1, 10], "mu": [0.1, 0.5, 1]}}, {"name": "krr"}]})");
  return path;
}

TEST(Cli, VersionNamesTheLibraries) {
  const auto r = RunCli("--version");
  EXPECT_EQ(r.exitCode, 0);
  for (const char* lib : {"neuromkl 0.", "itk 5.2", "eigen 3.4", "tbb 2021", "openblas OpenBLAS"}) EXPECT_THAT(r.output, HasSubstr(lib));
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
  for (const char* f : {"results.json", "study.resolved.json", "regions.tsv", "subjects.tsv", "kernel_weights.tsv", "training_decisions.tsv",
                        "kernels/index.json"})
    EXPECT_TRUE(fs::exists(out + "/" + f)) << f;
  const std::string results = ReadFile(out + "/results.json");
  for (const char* key : {"\"neuromkl_version\"", "\"seed\": 3", "\"input_hash\"", "\"kernel_weights\"", "\"status\": \"converged\""})
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
  EXPECT_EQ(ReadFile(a + "/kernel_weights.tsv"), ReadFile(b + "/kernel_weights.tsv"));
  EXPECT_EQ(ReadFile(a + "/training_decisions.tsv"), ReadFile(b + "/training_decisions.tsv"));
}

}  // namespace
