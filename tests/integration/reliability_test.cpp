// Inputs that were accepted and gave silently wrong results or lost data: file names made from class labels, two runs
// to one output folder, a full disk, a batch resumed after its inputs changed, images without an orientation; and
// inputs refused with a message that did not say what was found.
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <sys/wait.h>

#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using neuromkl::testing::CliResult;
using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

namespace {

class Reliability : public neuromkl::testing::SimulatedCohortSuite<Reliability> {
 protected:
  static void SetUpTestSuite() { SimulateCohort("--subjects 16 --downsample 2 --seed 5"); }
  /// A quick study on the cohort (fixed SVM, no maps) with `subjects` as its /subjects; returns its path.
  static std::string Study(const std::string& name, const std::string& subjects = R"({"table": "participants.tsv"})", const std::string& extra = "") {
    const std::string path = Cohort() + "/" + name + ".json";
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": )" + subjects + R"(, "target": {"column": "group", "task": "classification",
      "positive_class": "patient"}, "atlas": "aal", "learners": [{"name": "svm", "params": {"c": 1}}], "output": {"weight_maps": false})" + extra + "}");
    return path;
  }
  /// The cohort's table with the image of row `row` (1-based data row) replaced by `image`.
  static std::string TableWithImage(const std::string& name, std::size_t row, const std::string& image) {
    const auto rows = ReadTsv(Cohort() + "/participants.tsv");
    std::string table = "subject\timage\tgroup\n";
    for (std::size_t i = 1; i < rows.size(); ++i) table += rows[i][0] + "\t" + (i == row ? image : rows[i][1]) + "\t" + rows[i][2] + "\n";
    WriteFile(Cohort() + "/" + name, table);
    return name;
  }
  /// Files and folders of `dir` whose names contain `part`.
  static std::vector<std::string> Named(const std::string& dir, const std::string& part) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::recursive_directory_iterator(dir, ec))
      if (e.path().filename().string().find(part) != std::string::npos) out.push_back(e.path().string());
    return out;
  }
};

/// The CLI run as on a full disk: no file may grow beyond 0 bytes (RLIMIT_FSIZE 0; writes fail with EFBIG as they
/// fail with ENOSPC on a full disk, folders can still be made).
CliResult RunCliWithoutSpace(const std::string& args) {
  return neuromkl::testing::RunShell("sh -c \"trap '' XFSZ; ulimit -f 0; exec " + std::string(NEUROMKL_CLI) + " " + args + "\" 2>&1");
}

/// The id of a process that has ended (a shell that printed its own pid).
long DeadPid() {
  FILE* pipe = popen("sh -c 'echo $$'", "r");
  long pid = -1;
  if (pipe && std::fscanf(pipe, "%ld", &pid) != 1) pid = -1;
  if (pipe) pclose(pipe);
  return pid;
}

/// This host's name as neuromkl writes it into temporary names ('-' and '/' as '_').
std::string HostName() {
  char buf[256] = {0};
  gethostname(buf, sizeof buf - 1);
  std::string h(buf);
  for (char& c : h)
    if (c == '/' || c == '-') c = '_';
  return h;
}

}  // namespace

// Class labels name output files: "MCI-a" and "MCI_a" gave one map name (one overwrote the other), "AD/MCI" a file in a
// folder that does not exist (the run failed late with "disk full?"), "../../escape" a file outside the output folder.
TEST_F(Reliability, ClassLabelsBecomeSafeDistinctFileNames) {
  const std::string cohort = Dir() / "classes";
  ASSERT_EQ(RunCli("simulate --out " + cohort + " --subjects 30 --classes 3 --downsample 3 --seed 4 -q").exitCode, 0);
  const auto rows = ReadTsv(cohort + "/participants.tsv");
  const std::map<std::string, std::string> renamed = {{"A", "MCI-a"}, {"B", "MCI_a"}, {"C", "../../escape"}};
  std::string table;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<std::string> cells = rows[i];
    for (auto& c : cells)
      if (i > 0 && renamed.count(c)) c = renamed.at(c);
    for (std::size_t c = 0; c < cells.size(); ++c) table += (c ? "\t" : "") + cells[c];
    table += "\n";
  }
  WriteFile(cohort + "/labels.tsv", table);
  WriteFile(cohort + "/labels.json", R"({"name": "labels", "subjects": {"table": "labels.tsv"}, "atlas": "aal",
    "target": {"column": "group", "task": "multiclass", "multiclass_weights": "per_class"}, "cv": {"outer": {"k": 3}},
    "learners": [{"name": "svm", "params": {"c": 1}}]})");
  const std::string out = cohort + "/deep/out";
  const auto r = RunCli("run " + cohort + "/labels.json --out " + out + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  // One table per class, each under a name that is a file of the output folder and tells the classes apart.
  EXPECT_TRUE(fs::is_regular_file(out + "/regions_svm_class-MCI-a.tsv"));
  EXPECT_TRUE(fs::is_regular_file(out + "/regions_svm_class-MCI_a.tsv"));
  EXPECT_TRUE(fs::is_regular_file(out + "/regions_svm_class-..%2F..%2Fescape.tsv"));
  EXPECT_TRUE(Named(cohort, "escape.tsv").size() == 1u) << "a class table left the output folder";
  // One mean map per class, three distinct names, each sidecar naming its class.
  std::set<std::string> classes;
  for (const auto& e : fs::directory_iterator(out + "/weights")) {
    const std::string name = e.path().filename().string();
    if (name.find("Class") == std::string::npos || !name.ends_with("Mean_weights.json")) continue;
    const auto sidecar = nlohmann::json::parse(ReadFile(e.path().string()));
    classes.insert(sidecar.at("Class").get<std::string>());
  }
  EXPECT_EQ(classes, (std::set<std::string>{"MCI-a vs rest: the model of this class's score (multiclass)",
                                            "MCI_a vs rest: the model of this class's score (multiclass)",
                                            "../../escape vs rest: the model of this class's score (multiclass)"}));
  EXPECT_TRUE(fs::exists(out + "/weights/sub-group_space-MNIColin27_desc-SvmClassMCIAMean_weights.nii.gz"));
  EXPECT_TRUE(fs::exists(out + "/weights/sub-group_space-MNIColin27_desc-SvmClassMCIA2Mean_weights.nii.gz"));
  // A learner label names files too: one that is not a file name is refused by validate and run alike.
  WriteFile(cohort + "/label.json", R"({"name": "label", "subjects": {"table": "labels.tsv"}, "atlas": "aal",
    "target": {"column": "group", "task": "multiclass"}, "learners": [{"name": "svm", "label": "../svm"}]})");
  for (const std::string command : {"validate ", "run "}) {
    const auto bad = RunCli(command + cohort + "/label.json");
    EXPECT_EQ(bad.exitCode, 2) << bad.output;
    EXPECT_THAT(bad.output, HasSubstr("/learners/0/label: a label made of letters, digits, '_', '-' and '.'")) << command;
  }
}

// Two runs to one output folder without --force: both printed "Results: out" and exit 0, and only the second's results
// remained. A run claims the folder for its lifetime; a second one fails at once, and a dead run's claim is taken over.
TEST_F(Reliability, ARunClaimsItsOutputFolderAndASecondRunIsRefused) {
  const std::string study = Study("claim");
  const std::string out = Dir() / "claimed";
  fs::create_symlink(HostName() + "-" + std::to_string(getpid()), out + ".claim");  // held by this (live) process
  auto r = RunCli("run " + study + " --out " + out);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("another neuromkl run (process " + std::to_string(getpid()) + " on " + HostName() +
                                  ") is writing this output folder"));
  EXPECT_THAT(r.output, HasSubstr("[output:Busy]"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_TRUE(fs::is_symlink(out + ".claim"));  // the other run's claim is left alone
  fs::remove(out + ".claim");
  const long dead = DeadPid();
  ASSERT_GT(dead, 0);
  fs::create_symlink(HostName() + "-" + std::to_string(dead), out + ".claim");  // left by a killed run
  r = RunCli("run " + study + " --out " + out + " -q");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/results.json"));
  EXPECT_FALSE(fs::exists(fs::symlink_status(out + ".claim")));  // released at the end
}

// With no space left, run left an empty <out>.tmp-... folder (its constructor failed after making it), batch a 0-byte
// batch_summary.tsv under its final name (the write was checked before the stream was flushed), and a kill during
// the kernel cache write a <key>.tmp-<pid>/ folder that nothing removed.
TEST_F(Reliability, AFullDiskLeavesNoEmptyOrTemporaryFiles) {
  const std::string study = Study("full");
  const std::string out = Dir() / "full_out";
  auto r = RunCliWithoutSpace("run " + study + " --out " + out);
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[output:Write]"));
  EXPECT_FALSE(fs::exists(out));
  EXPECT_THAT(Named(Dir().Path(), "full_out"), ::testing::IsEmpty());  // no .tmp- folder, no claim
  // A batch: the study fails to write, and so does the summary, which is never left empty under its name.
  WriteFile(Dir() / "full_batch.json", R"({"name": "fb", "output": {"dir": "full_batch_out"}, "studies": [")" + study + R"("]})");
  r = RunCliWithoutSpace("batch " + (Dir() / "full_batch.json"));
  EXPECT_EQ(r.exitCode, 1) << r.output;
  const std::string summary = Dir() / "full_batch_out/batch_summary.tsv";
  EXPECT_TRUE(!fs::exists(summary) || fs::file_size(summary) > 0) << "an empty summary under its final name";
  EXPECT_THAT(Named(Dir() / "full_batch_out", ".tmp-"), ::testing::IsEmpty());
  // A cache entry being written by a process that was killed is removed by the next run that writes the cache.
  const long dead = DeadPid();
  const std::string stale = Cohort() + "/.neuromkl_cache/0123abcd.tmp-" + HostName() + "-" + std::to_string(dead);
  WriteFile(stale + "/index.json", "{}");
  const std::string live = Cohort() + "/.neuromkl_cache/4567abcd.tmp-" + HostName() + "-" + std::to_string(getpid());
  WriteFile(live + "/index.json", "{}");
  r = RunCli("run " + Study("cache_writer", R"({"table": "participants.tsv"})", R"(, "seed": 11)") + " --out " + (Dir() / "cache_out") + " -q");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(live)) << "a running process's temporary entry is left alone";
}

// A rerun batch must not keep a completed study's results after its participants.tsv (or an image) changed: the
// summary would mix old and new data. The stamp records a hash of the input files, and a study whose inputs changed
// runs again.
TEST_F(Reliability, ABatchRerunsAStudyWhoseInputFilesChanged) {
  const std::string cohort = Dir() / "batch_cohort";
  ASSERT_EQ(RunCli("simulate --out " + cohort + " --subjects 16 --downsample 2 --seed 6 -q").exitCode, 0);
  WriteFile(cohort + "/quick.json", R"({"name": "quick", "subjects": {"table": "participants.tsv"}, "atlas": "aal",
    "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "learners": [{"name": "svm", "params": {"c": 1}}],
    "output": {"weight_maps": false}})");
  const std::string batch = cohort + "/batch.json";
  WriteFile(batch, R"({"name": "b", "output": {"dir": "out"}, "studies": ["quick.json"]})");
  ASSERT_EQ(RunCli("batch " + batch + " -q").exitCode, 0);
  const std::string results = cohort + "/out/studies/quick/results.json";
  const std::string firstHash = nlohmann::json::parse(ReadFile(results)).at("input_hash");
  auto r = RunCli("batch " + batch);
  EXPECT_THAT(r.output, HasSubstr("0 completed, 1 skipped"));
  // One subject's target changes: the study runs again on the new table.
  const std::string table = ReadFile(cohort + "/participants.tsv");
  std::string changed = table;
  const auto at = changed.find("control");
  ASSERT_NE(at, std::string::npos);
  changed.replace(at, 7, "patient");
  WriteFile(cohort + "/participants.tsv", changed);
  r = RunCli("validate " + batch);
  EXPECT_THAT(r.output, HasSubstr("[ok] quick (studies[0]: quick.json) - has results, but an input file changed since it ran"));
  r = RunCli("batch " + batch);
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("batch: study quick has results, but an input file changed since it ran"));
  EXPECT_THAT(r.output, HasSubstr("1 completed, 0 skipped"));
  const std::string secondHash = nlohmann::json::parse(ReadFile(results)).at("input_hash");
  EXPECT_NE(secondHash, firstHash);
  // An image rewritten with other voxels (same name): runs again too.
  const auto rows = ReadTsv(cohort + "/participants.tsv");
  fs::copy_file(cohort + "/" + rows[2][1], cohort + "/" + rows[1][1], fs::copy_options::overwrite_existing);
  r = RunCli("batch " + batch);
  EXPECT_THAT(r.output, HasSubstr("1 completed, 0 skipped"));
  EXPECT_NE(nlohmann::json::parse(ReadFile(results)).at("input_hash").get<std::string>(), secondHash);
  EXPECT_THAT(RunCli("batch " + batch).output, HasSubstr("0 completed, 1 skipped"));
}

// `batch` ran the studies validate accepted and exited 2 for the others; docs say it refuses to start. And batch
// validate printed no error codes, where study validate does.
TEST_F(Reliability, ABatchWithAStudyValidateRefusesDoesNotStart) {
  const std::string bad = Study("bad_image", R"({"table": ")" + TableWithImage("missing_image.tsv", 3, "images/none.nii.gz") + R"("})");
  const std::string good = Study("good_study");
  const std::string batch = Dir() / "mixed_batch.json";
  WriteFile(batch, R"({"name": "mixed", "output": {"dir": "mixed_out"}, "studies": [")" + good + R"(", ")" + bad + R"("]})");
  const auto v = RunCli("validate " + batch);
  EXPECT_EQ(v.exitCode, 2) << v.output;
  EXPECT_THAT(v.output, HasSubstr("[invalid] bad_image"));
  EXPECT_THAT(v.output, HasSubstr("[subjects:MissingImage]"));
  const auto r = RunCli("batch " + batch);
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("1 of 2 studies are invalid (as `neuromkl validate` says); nothing was run"));
  EXPECT_THAT(r.output, HasSubstr("[subjects:MissingImage]"));
  EXPECT_FALSE(fs::exists(Dir() / "mixed_out/studies/good_study/results.json"));
}

// Images with neither a qform nor an sform got NIfTI's fallback grid (voxel 0 at the origin) and the atlas was
// resampled onto it: 6 of 116 regions survived, with only "region excluded" warnings. A NaN voxel size became 1 mm.
TEST_F(Reliability, ImagesWithoutAnOrientationOrWithABadVoxelSizeAreRefused) {
  const auto rows = ReadTsv(Cohort() + "/participants.tsv");
  const auto patch = [&](const std::string& name, const std::function<void(std::string&)>& edit) {
    neuromkl::io::WriteVolume(Cohort() + "/" + name, neuromkl::io::ReadVolume(Cohort() + "/" + rows[3][1]));
    std::string bytes = ReadFile(Cohort() + "/" + name);
    edit(bytes);
    WriteFile(Cohort() + "/" + name, bytes);
    return name;
  };
  const std::int16_t zero = 0;
  const std::string unoriented = patch("no_forms.nii", [&](std::string& h) {
    h.replace(252, 2, reinterpret_cast<const char*>(&zero), 2);  // qform_code
    h.replace(254, 2, reinterpret_cast<const char*>(&zero), 2);  // sform_code
  });
  // Every image without an orientation (the first one decides the grid of the study).
  std::string table = "subject\timage\tgroup\n";
  for (std::size_t i = 1; i < rows.size(); ++i) table += rows[i][0] + "\t" + unoriented + "\t" + rows[i][2] + "\n";
  WriteFile(Cohort() + "/no_forms.tsv", table);
  const std::string noForms = Study("no_forms", R"({"table": "no_forms.tsv"})");
  for (const std::string command : {"validate ", "run "}) {
    const auto r = RunCli(command + noForms);
    EXPECT_EQ(r.exitCode, 2) << command << r.output;
    EXPECT_THAT(r.output, HasSubstr("[input:NoOrientation]")) << command;
    EXPECT_THAT(r.output, HasSubstr("the image has neither a qform nor an sform (both codes 0), so where it lies in world space is unknown"))
        << command;
  }
  const float nan = std::nanf("");
  const std::string nanVoxel = patch("nan_voxel.nii", [&](std::string& h) {
    h.replace(254, 2, reinterpret_cast<const char*>(&zero), 2);  // qform only: its voxel sizes come from pixdim
    h.replace(80, 4, reinterpret_cast<const char*>(&nan), 4);    // pixdim[1]
  });
  const std::string nanStudy = Study("nan_voxel", R"({"table": ")" + TableWithImage("nan_voxel.tsv", 3, nanVoxel) + R"("})");
  for (const std::string command : {"validate ", "run "}) {
    const auto r = RunCli(command + nanStudy);
    EXPECT_EQ(r.exitCode, 2) << command << r.output;
    EXPECT_THAT(r.output, HasSubstr("[io:BadVoxelSize]")) << command;
    EXPECT_THAT(r.output, HasSubstr("pixdim[1] (the voxel size along axis 1) is nan, expected a positive size in mm")) << command;
  }
}

// Refusals whose message did not say what was found: a folder or a symbolic link loop given as an image ("missing"),
// a folder as the table ("empty"), a gzipped file named .nii ("not a NIfTI image"), a quoted header in a TSV, a BIDS
// root that is a file, a kernel file's row counted without its blank lines, a NUL byte that cut the message.
TEST_F(Reliability, RefusalsSayWhatWasFoundAndWhere) {
  fs::create_directories(Cohort() + "/a_folder.nii.gz");
  auto r = RunCli("validate " + Study("folder_image", R"({"table": ")" + TableWithImage("folder_image.tsv", 3, "a_folder.nii.gz") + R"("})"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("a_folder.nii.gz (it is a directory)"));
  fs::create_symlink("loop_b.nii", Cohort() + "/loop_a.nii");
  fs::create_symlink("loop_a.nii", Cohort() + "/loop_b.nii");
  r = RunCli("validate " + Study("loop_image", R"({"table": ")" + TableWithImage("loop_image.tsv", 3, "loop_a.nii") + R"("})"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("loop_a.nii (it is a symbolic link loop)"));
  fs::create_directories(Cohort() + "/table_folder.tsv");
  r = RunCli("validate " + Study("folder_table", R"({"table": "table_folder.tsv"})"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("table_folder.tsv: expected a table file, but it is a directory"));
  // A gzipped image named .nii reads as the same image (the name does not decide the compression).
  const auto rows = ReadTsv(Cohort() + "/participants.tsv");
  fs::copy_file(Cohort() + "/" + rows[3][1], Cohort() + "/gzipped.nii");
  EXPECT_EQ(neuromkl::io::ReadVolume(Cohort() + "/gzipped.nii").data, neuromkl::io::ReadVolume(Cohort() + "/" + rows[3][1]).data);
  r = RunCli("validate " + Study("gzipped", R"({"table": ")" + TableWithImage("gzipped.tsv", 3, "gzipped.nii") + R"("})"));
  EXPECT_EQ(r.exitCode, 0) << r.output;
  // A TSV whose header cells are quoted (as spreadsheets export CSV).
  std::string quoted = "\"subject\"\t\"image\"\t\"group\"\n";
  for (std::size_t i = 1; i < rows.size(); ++i) quoted += rows[i][0] + "\t" + rows[i][1] + "\t" + rows[i][2] + "\n";
  WriteFile(Cohort() + "/quoted.tsv", quoted);
  r = RunCli("validate " + Study("quoted", R"({"table": "quoted.tsv", "id_column": "subject"})"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("the header has it in double quotes (\"subject\"), and in a tab-separated file the quotes are part of the name"));
  // A BIDS root that is a file.
  WriteFile(Cohort() + "/not_a_dataset", "x");
  r = RunCli("validate " + Study("bids_file", R"({"bids": {"root": "not_a_dataset", "entities": {"suffix": "T1w"}}})"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("expected the BIDS dataset's folder (/subjects/bids/root), but it is a file"));
  // A precomputed kernel with a blank line before a short row: the message names the file's line.
  std::string kernel;
  for (std::size_t i = 0; i + 1 < rows.size(); ++i) {
    if (i == 1) kernel += "\n";
    for (std::size_t j = 0; j + 1 < rows.size() - (i == 2 ? 1 : 0); ++j) kernel += std::string(j ? "\t" : "") + (i == j ? "1" : "0");
    kernel += "\n";
  }
  WriteFile(Cohort() + "/ragged.tsv", kernel);
  r = RunCli("validate " + Study("ragged", R"({"table": "participants.tsv"})",
                                 R"(, "kernels": {"source": "precomputed", "precomputed": [{"name": "k", "file": "ragged.tsv"}]})"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ragged.tsv:4: matrix row 3 has 15 values, the first row (line 1) has 16"));
  // A NUL byte in a subject id: the message goes on past it.
  std::string withNul = "subject\timage\tgroup\n";
  for (std::size_t i = 1; i < rows.size(); ++i) withNul += (i == 2 ? std::string("sub-0001\0x", 10) : rows[i][0]) + "\t" + rows[i][1] + "\t" + rows[i][2] + "\n";
  withNul += std::string("sub-0001\0x", 10) + "\t" + rows[1][1] + "\tpatient\n";
  WriteFile(Cohort() + "/nul.tsv", withNul);
  r = RunCli("validate " + Study("nul", R"({"table": "nul.tsv"})"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("subject id \"sub-0001\\0x\" appears twice (lines 3 and 18); ids must be unique"));
}
