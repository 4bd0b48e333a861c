// Failed fits are never scored, --force never destroys what neuromkl did not write, bad inputs are errors (exit 2)
// with clear messages instead of crashes, and the CLI helps a new user.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/pipeline/batch_run.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

class Hardening : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = RunCli("simulate --out " + Cohort() + " --subjects 16 --downsample 2 --seed 5 -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string Cohort() { return *dir_ / "cohort"; }
  static std::string Study() { return Cohort() + "/study.json"; }
  static TempDir* dir_;
};
TempDir* Hardening::dir_ = nullptr;

/// A study on the simulated cohort whose custom fold "controls" holds every control: its training set
/// has one class, so both learners fail in that outer fold.
std::string OneClassFoldStudy(const std::string& cohort) {
  const auto rows = ReadTsv(cohort + "/participants.tsv");
  std::string table = "subject\timage\tgroup\tfold\n";
  int patients = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const bool patient = rows[i][2] == "patient";
    const std::string fold = patient ? (patients++ % 2 == 0 ? "p1" : "p2") : "controls";
    table += rows[i][0] + "\t" + rows[i][1] + "\t" + rows[i][2] + "\t" + fold + "\n";
  }
  WriteFile(cohort + "/folds.tsv", table);
  const std::string path = cohort + "/one_class_fold.json";
  WriteFile(path, R"({"name": "one_class_fold", "subjects": {"table": "folds.tsv", "id_column": "subject"},
    "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
    "cv": {"outer": {"scheme": "custom", "fold_column": "fold"}},
    "learners": [{"name": "svm", "params": {"c": 1}}, {"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}], "output": {"weight_maps": false}})");
  return path;
}

}  // namespace

// A fold that cannot be fitted (its training set holds one class) has NaN decisions: counted as correct negatives
// they would give a balanced accuracy of 1.000 with one of three folds failed. They are left out, and the failure is
// said on the console, not only inside results.json.
TEST_F(Hardening, FailedOuterFoldsAreNeverScoredAndAreReportedLoudly) {
  const std::string study = OneClassFoldStudy(Cohort());
  const std::string out = *dir_ / "out_failed";
  const auto r = RunCli("run " + study + " --out " + out);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // On the console: the fold errors, a warning per learner, and the summary line itself.
  EXPECT_THAT(r.output, HasSubstr("learner svm: 1 of 3 outer folds FAILED"));
  EXPECT_THAT(r.output, HasSubstr("svm          WARNING: 1 of 3 outer folds FAILED; metrics over the 8 subjects of the successful folds only"));
  EXPECT_THAT(r.output, HasSubstr("enmkl_svm    WARNING: 1 of 3 outer folds FAILED"));
  // The pooled metrics cover the 8 scored patients only: balanced accuracy is their recall (before: the
  // mean with a recall of 1.000 on the 8 unscored controls, e.g. 1.000 for enmkl_svm).
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  for (const auto& l : j.at("learners")) {
    const auto& pooled = l.at("metrics").at("pooled");
    EXPECT_EQ(pooled.at("failed_folds").get<double>(), 1) << l.at("label");
    EXPECT_EQ(pooled.at("scored_subjects").get<double>(), 8) << l.at("label");  // the 8 patients of the successful folds
    EXPECT_EQ(pooled.at("n").get<double>(), 8);
    EXPECT_EQ(pooled.at("true_negative").get<double>(), 0);  // before: 8, the failed fold's controls
    EXPECT_EQ(pooled.at("false_positive").get<double>(), 0);
    EXPECT_TRUE(pooled.at("auc").is_null());  // one class scored: no AUC (before: a number)
    EXPECT_EQ(pooled.at("balanced_accuracy").get<double>(), pooled.at("recall_positive").get<double>());
    EXPECT_TRUE(pooled.at("recall_negative").is_null());  // before: 1.0, from the NaN decisions
    EXPECT_EQ(l.at("metrics").at("fold_mean").at("n").get<double>(), 4);  // the failed fold is not in the fold mean
  }
  bool warned = false;
  for (const auto& w : j.at("warnings")) warned |= w.get<std::string>().find("1 of 3 outer folds FAILED") != std::string::npos;
  EXPECT_TRUE(warned);
}

// --force replaces only what neuromkl wrote.
TEST_F(Hardening, ForceRefusesInputsFilesForeignFoldersAndTheWorkingDirectory) {
  // The study's own folder (its images, table and study file), even when it carries the marker.
  WriteFile(Cohort() + "/.neuromkl_output", "neuromkl output folder\n");
  auto r = RunCli("run " + Study() + " --out " + Cohort() + " --force");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--force refused: it contains an input of the study"));
  fs::remove(Cohort() + "/.neuromkl_output");
  EXPECT_TRUE(fs::exists(Study()));
  EXPECT_TRUE(fs::exists(Cohort() + "/participants.tsv"));
  EXPECT_TRUE(fs::exists(Cohort() + "/images"));
  // A regular file.
  const std::string file = *dir_ / "notes.txt";
  WriteFile(file, "keep me");
  r = RunCli("run " + Study() + " --out " + file + " --force");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--force refused: it is a regular file"));
  EXPECT_EQ(ReadFile(file), "keep me");
  // A folder neuromkl did not write.
  const std::string foreign = *dir_ / "thesis";
  WriteFile(foreign + "/chapter1.tex", "keep me");
  r = RunCli("run " + Study() + " --out " + foreign + " --force");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("it was not written by neuromkl (no .neuromkl_output marker file"));
  EXPECT_EQ(ReadFile(foreign + "/chapter1.tex"), "keep me");
  // The working directory's parent, even with a marker.
  const std::string parent = *dir_ / "parent";
  fs::create_directories(parent + "/cwd");
  WriteFile(parent + "/.neuromkl_output", "neuromkl output folder\n");
  const fs::path before = fs::current_path();
  fs::current_path(parent + "/cwd");
  r = RunCli("run " + Study() + " --out .. --force");
  fs::current_path(before);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--force refused: it contains the current working directory"));
  EXPECT_TRUE(fs::exists(parent + "/cwd"));
}

TEST_F(Hardening, ForceReplacesAFolderNeuromklWroteIncludingOldResultsWithoutTheMarker) {
  const std::string out = *dir_ / "out_force";
  ASSERT_EQ(RunCli("run " + Study() + " --out " + out + " -q").exitCode, 0);
  EXPECT_THAT(ReadFile(out + "/.neuromkl_output"), HasSubstr("neuromkl output folder"));
  auto r = RunCli("run " + Study() + " --out " + out + " --force -q");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  // Results written before the marker existed: a neuromkl results.json is accepted as neuromkl's own.
  fs::remove(out + "/.neuromkl_output");
  r = RunCli("run " + Study() + " --out " + out + " --force -q");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/.neuromkl_output"));
}

// 100,000 levels of a wrong-typed value must not overflow the stack (exit 139) in validate or run.
TEST(HardeningCli, DeeplyNestedStudyFileIsAConfigErrorNotACrash) {
  TempDir dir;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  WriteFile(dir / "deep.json", R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "regression"},
    "learners": [{"name": "krr"}], "seed": )" + deep + "}");
  WriteFile(dir / "deep_array.json", deep);
  for (const char* file : {"deep.json", "deep_array.json"})
    for (const char* cmd : {"validate ", "run "}) {
      const auto r = RunCli(cmd + (dir / file));
      EXPECT_EQ(r.exitCode, 2) << cmd << file << ": " << r.output.substr(0, 300);
      EXPECT_THAT(r.output, HasSubstr("nested more than 512 levels")) << cmd << file;
    }
}

// A number beyond double range is an input error at its JSON pointer, not an "unexpected failure" (exit 1).
TEST(HardeningCli, NumberBeyondDoubleRangeIsExitTwoAtItsPointer) {
  TempDir dir;
  WriteFile(dir / "big.json", R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "regression"},
    "learners": [{"name": "krr", "params": {"lambda": 1e400}}]})");
  const auto r = RunCli("validate " + (dir / "big.json"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/learners/0/params/lambda: a number beyond the range of a double"));
  EXPECT_THAT(r.output, Not(HasSubstr("unexpected failure")));
}

// Messages a new user meets.
TEST_F(Hardening, BatchGivenAStudyFileSaysSo) {
  for (const char* cmd : {"batch ", "merge "}) {
    const auto r = RunCli(cmd + Study());
    EXPECT_EQ(r.exitCode, 2) << r.output;
    EXPECT_THAT(r.output, HasSubstr("this is a study file, not a batch file")) << cmd;
    EXPECT_THAT(r.output, Not(HasSubstr("unknown key"))) << cmd;
  }
}

TEST(HardeningCli, UnknownSubcommandGetsASuggestion) {
  auto r = RunCli("valdate study.json");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown command \"valdate\"; did you mean \"validate\"?"));
  r = RunCli("-q frobnicate");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown command \"frobnicate\"; the commands are run, batch, merge, validate, simulate"));
}

TEST(HardeningCli, ThreadsThatAreNotANumberAreNotAnInteger) {
  auto r = RunCli("run study.json --threads two");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("\"two\" is not an integer"));
  EXPECT_THAT(r.output, Not(HasSubstr("range")));
  r = RunCli("run study.json --threads 5000");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("\"5000\" is out of range [0, 4096]"));
}

TEST_F(Hardening, ValidateRefusesMoreOuterFoldsThanSubjects) {
  const std::string path = Cohort() + "/k50.json";
  std::string text = ReadFile(Study());
  text.insert(text.rfind('}'), R"(, "cv": {"outer": {"scheme": "kfold", "k": 50}})");
  WriteFile(path, text);
  const auto v = RunCli("validate " + path);
  EXPECT_EQ(v.exitCode, 2) << v.output;
  EXPECT_THAT(v.output, HasSubstr("k = 50 folds need at least 50"));
  EXPECT_THAT(v.output, Not(HasSubstr("OK: the study")));
  EXPECT_EQ(RunCli("run " + path + " --out " + (*dir_ / "out_k50")).exitCode, 2);  // run agrees
}

namespace {
/// The fixture's study with its kernel cache in `cacheDir` (relative to the cohort folder).
std::string StudyWithCache(const std::string& cohort, const std::string& name, const std::string& cacheDir) {
  auto j = nlohmann::json::parse(ReadFile(cohort + "/study.json"));
  j["output"]["cache_dir"] = cacheDir;
  const std::string path = cohort + "/" + name + ".json";
  WriteFile(path, j.dump());
  return path;
}
}  // namespace

// Flipped bytes in a cached .npy (its header still valid) must not be a cache hit with different results: entries
// carry an XXH3 checksum per kernel file, and a mismatch is a miss with a warning, recomputed.
TEST_F(Hardening, DamagedCacheEntryIsRecomputedNeverUsed) {
  const std::string study = StudyWithCache(Cohort(), "checksum", "ck_cache");
  const std::string a = *dir_ / "ck_a", b = *dir_ / "ck_b", c = *dir_ / "ck_c";
  auto r = RunCli("run " + study + " --out " + a);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // Damage the data (not the header) of every cached kernel file.
  int damaged = 0;
  for (const auto& entry : fs::recursive_directory_iterator(Cohort() + "/ck_cache"))
    if (entry.path().extension() == ".npy") {
      std::string bytes = ReadFile(entry.path());
      for (std::size_t i = bytes.size() - 16; i < bytes.size(); ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
      WriteFile(entry.path(), bytes);
      ++damaged;
    }
  ASSERT_GT(damaged, 0);
  r = RunCli("run " + study + " --out " + b);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ignoring an unreadable cache entry"));
  EXPECT_THAT(r.output, HasSubstr("does not match its checksum"));
  EXPECT_THAT(r.output, Not(HasSubstr("cache hit")));
  // Recomputed: the same predictions as the run that computed the kernels in the first place.
  const auto predictionsA = ReadFile(a + "/predictions.tsv"), predictionsB = ReadFile(b + "/predictions.tsv");
  EXPECT_FALSE(predictionsA.empty());
  EXPECT_EQ(predictionsA, predictionsB);
  // And the entry was rewritten: the next run is a clean hit with the same results.
  r = RunCli("run " + study + " --out " + c);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cache hit"));
  EXPECT_EQ(ReadFile(c + "/predictions.tsv"), predictionsA);
}

// An unwritable cache folder disables the cache: said on the console, not only in a note inside results.json.
TEST_F(Hardening, UnwritableCacheFolderIsAWarningOnTheConsole) {
  WriteFile(Cohort() + "/not_a_folder", "a file where the cache folder should go\n");
  const std::string study = StudyWithCache(Cohort(), "nocache", "not_a_folder/cache");
  const auto r = RunCli("run " + study + " --out " + (*dir_ / "nocache_out"));
  ASSERT_EQ(r.exitCode, 0) << r.output;  // the results do not depend on the cache
  EXPECT_THAT(r.output, HasSubstr("cache entry not written"));
  EXPECT_THAT(r.output, HasSubstr("not_a_folder"));
}

// --shard 1/4294967298 would wrap to 1/2 in an int and run half the batch: it is refused.
TEST(HardeningCli, ShardCountBeyondRangeIsAnErrorNotWrapped) {
  int shard = -1, shards = -1;
  EXPECT_THAT([&] { neuromkl::pipeline::ParseShard("1/4294967298", shard, shards); },
              ::testing::ThrowsMessage<neuromkl::ConfigError>(HasSubstr("found \"1/4294967298\"")));
  EXPECT_THROW(neuromkl::pipeline::ParseShard("4294967296/4294967298", shard, shards), neuromkl::ConfigError);
  EXPECT_THROW(neuromkl::pipeline::ParseShard("/4", shard, shards), neuromkl::ConfigError);
  EXPECT_THROW(neuromkl::pipeline::ParseShard("1/", shard, shards), neuromkl::ConfigError);
  neuromkl::pipeline::ParseShard("1/4", shard, shards);
  EXPECT_EQ(shard, 1);
  EXPECT_EQ(shards, 4);
}

// A key given twice in one object is refused (otherwise the last one would silently win).
TEST(HardeningCli, DuplicateJsonKeyIsAConfigErrorAtItsPointer) {
  TempDir tmp;
  WriteFile(tmp / "dup.json", R"({"name": "d", "subjects": {"table": "t.tsv"}, "target": {"column": "g", "task": "classification"},
    "learners": [{"name": "svm"}], "output": {"dir": "a", "dir": "b"}})");
  const auto r = RunCli("validate " + (tmp / "dup.json"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("config:DuplicateKey"));
  EXPECT_THAT(r.output, HasSubstr("/output/dir: the key \"dir\" is given twice"));
  // The same key in two different objects is fine (the study is then refused for other reasons).
  WriteFile(tmp / "ok.json", R"({"name": "d", "subjects": {"table": "t.tsv"}, "target": {"column": "g", "task": "classification"},
    "learners": [{"name": "svm"}], "output": {"dir": "a"}, "cv": {"outer": {"k": 2}, "inner": {"k": 2}}})");
  EXPECT_THAT(RunCli("validate " + (tmp / "ok.json")).output, Not(HasSubstr("DuplicateKey")));
}

// simulate refuses a negative noise SD, a NaN effect and a 1000-fold downsampling, and never overwrites an existing
// cohort.
TEST_F(Hardening, SimulateRefusesBadOptionsAndAnExistingCohort) {
  const std::string fresh = *dir_ / "sim_new";
  for (const auto& [option, message] : std::vector<std::pair<std::string, std::string>>{
           {"--noise -1", "expected a finite noise SD >= 0, got -1"},
           {"--effect nan", "expected a finite effect size, got nan"},
           {"--downsample 1000", "expected an integer in 1..10, got 1000"}}) {
    const auto r = RunCli("simulate --out " + fresh + " --subjects 8 " + option);
    EXPECT_EQ(r.exitCode, 2) << option << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << option;
    EXPECT_FALSE(fs::exists(fresh + "/participants.tsv")) << option;
  }
  const std::string before = ReadFile(Cohort() + "/participants.tsv");
  const auto r = RunCli("simulate --out " + Cohort() + " --subjects 8 --seed 99 --downsample 2");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("already holds a cohort (participants.tsv exists)"));
  EXPECT_EQ(ReadFile(Cohort() + "/participants.tsv"), before);
}

namespace {
/// The bracketed error code that ends the first error line ("[io:BadMagic]"), or "" when there is none.
std::string ErrorCode(const std::string& output) {
  const auto error = output.find("] error ");
  if (error == std::string::npos) return "";
  const auto end = output.find('\n', error);
  const std::string line = output.substr(error, end == std::string::npos ? std::string::npos : end - error);
  const auto open = line.rfind('[');
  return open == std::string::npos || line.back() != ']' ? "" : line.substr(open);
}
}  // namespace

// validate must not say "OK" for inputs run then rejects (a bad image other than the first, another grid), and a
// missing atlas or mask must be the same error in both (run hashes its inputs: they are checked before). Each bad
// input below gets the same exit code and error code from both.
TEST_F(Hardening, ValidateAndRunAgreeOnEveryBadInput) {
  namespace io = neuromkl::io;
  const auto rows = ReadTsv(Cohort() + "/participants.tsv");
  ASSERT_GT(rows.size(), 4u);
  const std::string bad = Cohort() + "/bad_inputs";
  fs::create_directories(bad);
  // Bad images for the third subject (never the first, whose header validate always read).
  io::Volume v = io::ReadVolume(Cohort() + "/" + rows[3][1]);
  io::WriteVolume(bad + "/magic.nii", v);
  std::string bytes = ReadFile(bad + "/magic.nii");
  bytes.replace(344, 4, std::string("n+3\0", 4));
  WriteFile(bad + "/magic.nii", bytes);
  v.geometry.dims[2] -= 1;
  v.data.resize(static_cast<std::size_t>(v.geometry.VoxelCount()));
  io::WriteVolume(bad + "/grid.nii", v);
  const auto withImage = [&](const std::string& name, const std::string& image) {
    std::string table = "subject\timage\tgroup\n";
    for (std::size_t i = 1; i < rows.size(); ++i) table += rows[i][0] + "\t" + (i == 3 ? image : rows[i][1]) + "\t" + rows[i][2] + "\n";
    WriteFile(Cohort() + "/" + name + ".tsv", table);
    return R"("subjects": {"table": ")" + name + R"(.tsv", "id_column": "subject"})";
  };
  // The third subject's qform 100 mm away from its sform (translation; NIfTI-1 little-endian: qform_code at
  // byte 252, sform_code 254, qoffset_x at 268), and 0.4 mm away (tolerated, below the 1 mm limit; the sform,
  // which takes precedence, keeps the image on the cohort grid).
  const auto writeForms = [&](const std::string& path, float shiftMm) {
    io::WriteVolume(path, io::ReadVolume(Cohort() + "/" + rows[3][1]));
    std::string h = ReadFile(path);
    const std::int16_t one = 1;
    h.replace(252, 2, reinterpret_cast<const char*>(&one), 2);
    h.replace(254, 2, reinterpret_cast<const char*>(&one), 2);
    float tx = 0;
    std::memcpy(&tx, h.data() + 268, 4);
    tx += shiftMm;
    h.replace(268, 4, reinterpret_cast<const char*>(&tx), 4);
    WriteFile(path, h);
  };
  writeForms(bad + "/forms.nii", 100.0f);
  writeForms(bad + "/forms_close.nii", 0.4f);
  // An atlas 1 m away from the images, and a mask whose only voxel is a corner outside every region.
  io::Volume far = io::ReadVolume(neuromkl::testing::SourcePath("atlases/aal/ROI_MNI_V4.nii.gz"));
  far.geometry.origin[0] += 1000.0;
  io::WriteVolume(bad + "/far_atlas.nii", far);
  io::Volume corner = io::ReadVolume(Cohort() + "/" + rows[1][1]);
  std::fill(corner.data.begin(), corner.data.end(), 0.0f);
  corner.data[0] = 1.0f;
  io::WriteVolume(bad + "/corner_mask.nii", corner);
  // Precomputed kernels for the 16 subjects: wrong size, asymmetric, a NaN.
  const std::size_t n = rows.size() - 1;
  const auto writeKernel = [&](const std::string& name, std::size_t rowsN, std::size_t colsN, const std::function<double(std::size_t, std::size_t)>& at) {
    std::string text;
    for (std::size_t i = 0; i < rowsN; ++i) {
      for (std::size_t j = 0; j < colsN; ++j) {
        if (j) text += '\t';
        text += neuromkl::FormatDouble(at(i, j));
      }
      text += "\n";
    }
    WriteFile(bad + "/" + name, text);
    return R"("kernels": {"source": "precomputed", "precomputed": [{"name": "k", "file": "bad_inputs/)" + name + R"("}]})";
  };
  const auto identity = [](std::size_t i, std::size_t j) { return i == j ? 1.0 : 0.0; };
  const std::string notSquare = writeKernel("k_shape.tsv", n, n + 1, identity);
  const std::string fewer = writeKernel("k_fewer.tsv", n - 1, n - 1, identity);
  const std::string asym = writeKernel("k_asym.tsv", n, n, [](std::size_t i, std::size_t j) { return i == j ? 1.0 : (i == 0 && j == 1 ? 0.5 : 0.0); });
  const std::string nan = writeKernel("k_nan.tsv", n, n, [](std::size_t i, std::size_t j) { return i == 2 && j == 2 ? std::nan("") : (i == j ? 1.0 : 0.0); });
  // Kernels run could not use while validate said OK: negative definite (it ended weighted 0), all zero (no kernel left).
  const std::string negative = writeKernel("k_negative.tsv", n, n, [](std::size_t i, std::size_t j) { return i == j ? -1.0 : 0.0; });
  const std::string zero = writeKernel("k_zero.tsv", n, n, [](std::size_t, std::size_t) { return 0.0; });
  // Tabular features whose Gaussian kernel overflows (a width whose square underflows: 0/0 on the diagonal).
  std::string features = "subject\tx1\tx2\n";
  for (std::size_t i = 1; i < rows.size(); ++i) features += rows[i][0] + "\t" + std::to_string(i) + "\t" + std::to_string(i % 3) + "\n";
  WriteFile(bad + "/features.tsv", features);
  const std::string overflow = R"("kernels": {"source": "tabular", "tabular": {"table": "bad_inputs/features.tsv", "id_column": "subject",
    "groups": {"f": ["x1", "x2"]}, "functions": [{"type": "gaussian", "width": 1e-300}]}})";
  // A qform whose quaternion is no rotation (b^2 + c^2 + d^2 = 2; quatern_b at byte 256, quatern_c at 260).
  io::WriteVolume(bad + "/quaternion.nii", io::ReadVolume(Cohort() + "/" + rows[3][1]));
  std::string quaternion = ReadFile(bad + "/quaternion.nii");
  const std::int16_t qformOnly[2] = {1, 0};
  const float bc[2] = {1.0f, 1.0f};
  quaternion.replace(252, 4, reinterpret_cast<const char*>(qformOnly), 4);
  quaternion.replace(256, 8, reinterpret_cast<const char*>(bc), 8);
  WriteFile(bad + "/quaternion.nii", quaternion);
  // Custom folds whose fold "c" holds every control: with covariates fit on the controls, that fold's training set has none.
  std::string folds = "subject\timage\tgroup\tfold\tage\n";
  for (std::size_t i = 1; i < rows.size(); ++i)
    folds += rows[i][0] + "\t" + rows[i][1] + "\t" + rows[i][2] + "\t" + (rows[i][2] == "control" ? "c" : i % 2 ? "p1" : "p2") + "\t" +
             std::to_string(50 + 3 * i % 17) + "\n";
  WriteFile(Cohort() + "/t_fit_on.tsv", folds);
  const std::string aalLabels = neuromkl::testing::SourcePath("atlases/aal/aal116_labels.tsv");
  const std::string good = R"("subjects": {"table": "participants.tsv"})";
  const std::string rest = R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "learners": [{"name": "svm", "params": {"c": 1}}], "output": {"weight_maps": false})";
  struct Case {
    std::string name, subjects, extra, code;
  };
  const std::vector<Case> cases = {
      {"bad_magic", withImage("t_magic", "bad_inputs/magic.nii"), R"("atlas": "aal")", "[io:BadMagic]"},
      {"other_grid", withImage("t_grid", "bad_inputs/grid.nii"), R"("atlas": "aal")", "[input:GridMismatch]"},
      {"missing_image", withImage("t_missing", "bad_inputs/none.nii"), R"("atlas": "aal")", "[subjects:MissingImage]"},
      {"missing_atlas", good, R"("atlas": {"image": "none.nii", "labels": "none.tsv"})", "[io:Missing]"},
      {"missing_labels", good, R"("atlas": {"image": ")" + neuromkl::testing::SourcePath("atlases/aal/ROI_MNI_V4.nii.gz") + R"(", "labels": "none.tsv"})",
       "[atlas:TableUnreadable]"},
      {"missing_mask", good, R"("atlas": "aal", "mask": "none.nii")", "[io:Missing]"},
      {"outer_k", good, R"("atlas": "aal", "cv": {"outer": {"scheme": "kfold", "k": 40}})", "[cv:TooFew]"},
      {"duplicate_key", good, R"("atlas": "aal", "seed": 1, "seed": 2)", "[config:DuplicateKey]"},
      {"qform_sform", withImage("t_forms", "bad_inputs/forms.nii"), R"("atlas": "aal")", "[io:QformSformMismatch]"},
      {"atlas_no_overlap", good, R"("atlas": {"image": "bad_inputs/far_atlas.nii", "labels": ")" + aalLabels + R"("})", "[atlas:NoOverlap]"},
      {"mask_no_overlap", good, R"("atlas": "aal", "mask": "bad_inputs/corner_mask.nii")", "[atlas:NoLabelInMask]"},
      {"kernel_not_square", good, notSquare, "[kernels:Shape]"},
      {"kernel_other_subjects", good, fewer, "[kernels:Shape]"},
      {"kernel_asymmetric", good, asym, "[kernels:NotSymmetric]"},
      {"kernel_nan", good, nan, "[kernels:NonFinite]"},
      {"kernel_negative_definite", good, negative, "[kernels:NotPsd]"},
      {"kernel_all_zero", good, zero, "[kernels:NoneLeft]"},
      {"tabular_overflow", good, overflow, "[kernels:NonFinite]"},
      {"bad_quaternion", withImage("t_quaternion", "bad_inputs/quaternion.nii"), R"("atlas": "aal")", "[io:BadQuaternion]"},
      {"fit_on_missing_in_a_fold", R"("subjects": {"table": "t_fit_on.tsv", "id_column": "subject"})",
       R"("atlas": "aal", "cv": {"outer": {"scheme": "custom", "fold_column": "fold"}},
          "covariates": {"columns": ["age"], "fit_on": {"column": "group", "value": "control"}})", "[covariates:NoFitRows]"},
  };
  for (const auto& c : cases) {
    const std::string study = Cohort() + "/agree_" + c.name + ".json";
    WriteFile(study, "{\"name\": \"" + c.name + "\", " + c.subjects + ", " + c.extra + ", " + rest + "}");
    const auto validate = RunCli("validate " + study);
    const std::string out = *dir_ / ("agree_out_" + c.name);
    const auto run = RunCli("run " + study + " --out " + out);
    EXPECT_EQ(validate.exitCode, 2) << c.name << "\n" << validate.output;
    EXPECT_EQ(run.exitCode, 2) << c.name << "\n" << run.output;
    EXPECT_EQ(ErrorCode(validate.output), c.code) << c.name << "\n" << validate.output;
    EXPECT_EQ(ErrorCode(run.output), c.code) << c.name << "\n" << run.output;
    EXPECT_FALSE(fs::exists(out + "/results.json")) << c.name;
  }
  // An output folder that cannot be made (here under /proc, where not even root can write): validate said OK and run
  // failed with exit 1 once the kernels were computed.
  const std::string readOnly = Cohort() + "/agree_read_only.json";
  WriteFile(readOnly, R"({"name": "ro", "subjects": {"table": "participants.tsv"}, "atlas": "aal", "target": {"column": "group",
    "task": "classification", "positive_class": "patient"}, "learners": [{"name": "svm", "params": {"c": 1}}],
    "output": {"weight_maps": false, "dir": "/proc/neuromkl_read_only/out"}})");
  for (const std::string command : {"validate ", "run "}) {
    const auto r = RunCli(command + readOnly);
    EXPECT_EQ(r.exitCode, 2) << command << r.output;
    EXPECT_EQ(ErrorCode(r.output), "[output:NotWritable]") << command << r.output;
    EXPECT_THAT(r.output, HasSubstr("the output folder cannot be created: no folder can be made in /proc")) << command;
  }
  // Below the 1 mm tolerance a qform/sform difference (float rounding, small shears) is accepted.
  const std::string close = Cohort() + "/agree_forms_close.json";
  WriteFile(close, "{\"name\": \"close\", " + withImage("t_forms_close", "bad_inputs/forms_close.nii") + R"(, "atlas": "aal", )" + rest + "}");
  const auto ok = RunCli("validate " + close);
  EXPECT_EQ(ok.exitCode, 0) << ok.output;
}

// A batch whose output path is a regular file: batch validate and batch run refuse it alike, before anything runs
// (not a failure later, exit 1, batch:Mkdir).
TEST_F(Hardening, BatchOutputPathThatIsAFileIsRefusedByValidateAndBatch) {
  WriteFile(Cohort() + "/batch_out_file", "a file, not a folder\n");
  const std::string batch = Cohort() + "/file_out_batch.json";
  WriteFile(Cohort() + "/file_out_study.json", R"({"name": "fo_study", "subjects": {"table": "participants.tsv"}, "atlas": "aal",
    "cv": {"outer": {"k": 3}}, "target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "learners": [{"name": "svm", "params": {"c": 1}}], "output": {"weight_maps": false}})");
  WriteFile(batch, R"({"name": "fo", "output": {"dir": "batch_out_file"}, "studies": ["file_out_study.json"]})");
  const auto validate = RunCli("validate " + batch);
  const auto run = RunCli("batch " + batch);
  EXPECT_EQ(validate.exitCode, 2) << validate.output;
  EXPECT_EQ(run.exitCode, 2) << run.output;
  EXPECT_EQ(ErrorCode(validate.output), "[batch:OutputNotFolder]") << validate.output;
  EXPECT_EQ(ErrorCode(run.output), "[batch:OutputNotFolder]") << run.output;
  EXPECT_EQ(ReadFile(Cohort() + "/batch_out_file"), "a file, not a folder\n");
}

// Decode-level problems (a truncated gzip stream, a subject with no finite voxel) need the voxels.
// Default validate reads headers only (fast) and cannot see them; `validate --deep` decodes every image
// and refuses them with run's error code.
TEST_F(Hardening, ValidateDeepDecodesEveryImageAndAgreesWithRun) {
  namespace io = neuromkl::io;
  const auto rows = ReadTsv(Cohort() + "/participants.tsv");
  const std::string deep = Cohort() + "/deep_inputs";
  fs::create_directories(deep);
  io::Volume nanVolume = io::ReadVolume(Cohort() + "/" + rows[3][1]);
  std::fill(nanVolume.data.begin(), nanVolume.data.end(), std::nanf(""));
  io::WriteVolume(deep + "/nan.nii", nanVolume);
  io::WriteVolume(deep + "/whole.nii.gz", io::ReadVolume(Cohort() + "/" + rows[3][1]));
  const std::string gz = ReadFile(deep + "/whole.nii.gz");
  WriteFile(deep + "/cut.nii.gz", gz.substr(0, gz.size() * 2 / 3));  // the header survives, the voxels end early
  for (const auto& [image, code] : std::vector<std::pair<std::string, std::string>>{{"deep_inputs/nan.nii", "[input:AllNonFinite]"},
                                                                                    {"deep_inputs/cut.nii.gz", "[io:Truncated]"}}) {
    std::string table = "subject\timage\tgroup\n";
    for (std::size_t i = 1; i < rows.size(); ++i) table += rows[i][0] + "\t" + (i == 3 ? image : rows[i][1]) + "\t" + rows[i][2] + "\n";
    WriteFile(Cohort() + "/deep.tsv", table);
    const std::string study = Cohort() + "/deep.json";
    WriteFile(study, R"({"name": "deep", "subjects": {"table": "deep.tsv"}, "atlas": "aal",
      "target": {"column": "group", "task": "classification", "positive_class": "patient"},
      "learners": [{"name": "svm", "params": {"c": 1}}], "output": {"weight_maps": false}})");
    const auto fast = RunCli("validate " + study);
    EXPECT_EQ(fast.exitCode, 0) << image << "\n" << fast.output;  // header-only: documented in docs/inputs.md
    const auto validate = RunCli("validate --deep " + study);
    const auto run = RunCli("run " + study + " --out " + (*dir_ / "deep_out"));
    EXPECT_EQ(validate.exitCode, 2) << image << "\n" << validate.output;
    EXPECT_EQ(run.exitCode, 2) << image << "\n" << run.output;
    EXPECT_EQ(ErrorCode(validate.output), code) << image << "\n" << validate.output;
    EXPECT_EQ(ErrorCode(run.output), code) << image << "\n" << run.output;
  }
}

// Messages that say what is wrong: a directory given as the study file is not "invalid JSON", an unterminated CSV
// quote is not a "ragged row", and a CR-only table does not print the whole file as its header.
TEST(HardeningCli, DirectoryStudyUnterminatedQuoteAndCrOnlyTableSayWhatIsWrong) {
  TempDir tmp;
  fs::create_directories(tmp / "a_folder");
  auto r = RunCli("validate " + (tmp / "a_folder"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("is a directory, expected the study file"));
  EXPECT_THAT(r.output, Not(HasSubstr("not valid JSON")));
  const std::string study = R"({"name": "t", "subjects": {"table": "TABLE"}, "target": {"column": "group", "task": "classification"},
    "learners": [{"name": "svm"}]})";
  auto withTable = [&](const std::string& table) {
    std::string s = study;
    s.replace(s.find("TABLE"), 5, table);
    WriteFile(tmp / "study.json", s);
    return RunCli("validate " + (tmp / "study.json"));
  };
  WriteFile(tmp / "q.csv", "subject,image,group\ns1,\"unterminated,patient\ns2,x,control\n");
  r = withTable("q.csv");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("q.csv:2: a double quote opens a cell that is not closed"));
  WriteFile(tmp / "cr.tsv", "subject\timage\tgroup\rs1\tx\tpatient\rs2\ty\tcontrol\r");
  r = withTable("cr.tsv");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cr.tsv:1: the lines end in a carriage return only"));
  EXPECT_THAT(r.output, Not(HasSubstr("groups1")));
}

// A failed run leaves no empty results/ folder behind (the parent of its output folder).
TEST_F(Hardening, FailedRunLeavesNoEmptyOutputFolders) {
  const auto rows = ReadTsv(Cohort() + "/participants.tsv");
  const std::string image = ReadFile(Cohort() + "/" + rows[2][1]);
  fs::create_directories(Cohort() + "/cut");
  WriteFile(Cohort() + "/cut/half.nii.gz", image.substr(0, image.size() / 2));  // header fine, gzip stream cut
  std::string table = "subject\timage\tgroup\n";
  for (std::size_t i = 1; i < rows.size(); ++i) table += rows[i][0] + "\t" + (i == 2 ? "cut/half.nii.gz" : rows[i][1]) + "\t" + rows[i][2] + "\n";
  WriteFile(Cohort() + "/cut.tsv", table);
  auto j = nlohmann::json::parse(ReadFile(Study()));
  j["subjects"] = {{"table", "cut.tsv"}};
  WriteFile(Cohort() + "/cut.json", j.dump());
  const std::string parent = *dir_ / "fresh_parent";
  const auto r = RunCli("run " + Cohort() + "/cut.json --out " + parent + "/nested/out");
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("io:Truncated"));
  EXPECT_FALSE(fs::exists(parent)) << "the folders created for the output are removed when the run fails";
}

// input_hash depends on the inputs only: not on --threads or --out (which the resolved study as run holds).
TEST_F(Hardening, InputHashIsIndependentOfThreadsAndOutputFolder) {
  const std::string a = *dir_ / "hash_t1", b = *dir_ / "hash_t2";
  ASSERT_EQ(RunCli("run " + Study() + " --out " + a + " --threads 1 -q").exitCode, 0);
  ASSERT_EQ(RunCli("run " + Study() + " --out " + b + " --threads 2 -q").exitCode, 0);
  const auto ha = nlohmann::json::parse(ReadFile(a + "/results.json")).at("input_hash").get<std::string>();
  const auto hb = nlohmann::json::parse(ReadFile(b + "/results.json")).at("input_hash").get<std::string>();
  EXPECT_EQ(ha.size(), 32u);
  EXPECT_EQ(ha, hb);
}

// ".NII.GZ" (upper case, as some Windows tools write it) reads as the same image.
TEST_F(Hardening, UpperCaseExtensionReadsTheSameImage) {
  const auto rows = ReadTsv(Cohort() + "/participants.tsv");
  const std::string original = Cohort() + "/" + rows[1][1];
  fs::copy_file(original, Cohort() + "/UPPER.NII.GZ", fs::copy_options::overwrite_existing);
  const auto a = neuromkl::io::ReadVolume(original), b = neuromkl::io::ReadVolume(Cohort() + "/UPPER.NII.GZ");
  EXPECT_EQ(a.data, b.data);
  EXPECT_TRUE(a.geometry.DifferenceFrom(b.geometry).empty());
}

// The kernels are held in memory (the subject data may go out of core, the kernels never do). A study whose
// kernels exceed this machine's memory (116 region kernels of as many subjects as make 1.5x its memory in float64: the
// rows of a table all naming one image) is refused on kernels by validate and by run before any image is read, with what
// would fit (the feature form; float32 halves it) and exit code 2; run writes nothing. "auto" holds it as features.
TEST_F(Hardening, KernelsThatCannotFitThisMachineAreRefusedBeforeTheKernelStage) {
  const auto memory = static_cast<double>(neuromkl::PhysicalMemoryBytes());
  ASSERT_GT(memory, 0.0);
  const auto n = static_cast<long>(std::ceil(std::sqrt(1.5 * memory / (116.0 * 8.0))));
  const auto rows = ReadTsv(Cohort() + "/participants.tsv");
  std::string table = "subject\timage\tgroup\n";
  for (long i = 0; i < n; ++i) table += fmt::format("s{:06d}\t{}\t{}\n", i, rows[1][1], i % 2 ? "patient" : "control");
  WriteFile(Cohort() + "/large.tsv", table);
  const std::string study = Cohort() + "/large.json";
  WriteFile(study, R"({"name": "large", "subjects": {"table": "large.tsv"}, "target": {"column": "group", "task": "classification",
    "positive_class": "patient"}, "atlas": "aal", "kernels": {"representation": "kernel"}, "learners": [{"name": "svm"}], "output": {"dir": "large_out"}})");
  const double gib = 116.0 * static_cast<double>(n) * static_cast<double>(n) * 8.0 / 1073741824.0;
  const std::string expected = fmt::format("the study's kernels need {:.1f} GiB of memory (116 kernels x {} subjects^2 x 8 bytes), more than this "
                                           "machine's {:.1f} GiB: nothing was computed. What would fit: \"representation\": \"features\" in /kernels (the voxels, "
                                           "subjects x voxels x 4 bytes, instead of the kernels, if they fit; docs/learners.md); or \"precision\": \"float32\" in /kernels ({:.1f} GiB)",
                                           gib, n, memory / 1073741824.0, gib / 2);
  for (const std::string command : {"validate", "run"}) {
    const auto r = RunCli(command + " " + study);
    EXPECT_EQ(r.exitCode, 2) << command << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("[kernels:TooLarge]")) << command;
    EXPECT_THAT(r.output, HasSubstr(expected)) << command;
    EXPECT_THAT(r.output, HasSubstr("or mpirun over at least")) << command;
  }
  EXPECT_FALSE(fs::exists(Cohort() + "/large_out"));
  // In float32 the same kernels fit: validate says how much of the memory they take.
  WriteFile(study, R"({"name": "large", "subjects": {"table": "large.tsv"}, "target": {"column": "group", "task": "classification",
    "positive_class": "patient"}, "atlas": "aal", "kernels": {"precision": "float32", "representation": "kernel"}, "learners": [{"name": "svm"}], "output": {"dir": "large_out"}})");
  const auto r = RunCli("validate " + study);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("memory: the kernels take {:.1f} MiB (116 kernels x {} subjects^2 x 4 bytes), {:.1f} % of this machine's",
                                              gib * 512.0, n, 100.0 * gib / 2 * 1073741824.0 / memory)));  // about 75 %
  // By default (auto) the study is held as features: the kernels take more than half of the memory.
  WriteFile(study, R"({"name": "large", "subjects": {"table": "large.tsv"}, "target": {"column": "group", "task": "classification",
    "positive_class": "patient"}, "atlas": "aal", "learners": [{"name": "svm"}], "output": {"dir": "large_out"}})");
  const auto features = RunCli("validate " + study);
  EXPECT_EQ(features.exitCode, 0) << features.output;
  EXPECT_THAT(features.output, HasSubstr("representation: features (auto: features, as the kernels"));
  EXPECT_THAT(features.output, HasSubstr("the study's kernels are never formed"));
}
