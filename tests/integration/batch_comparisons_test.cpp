// Comparisons across the studies of a batch: studies that differ in one matrix axis (sources, learner, atlas) are
// compared by the paired tests on their out-of-fold predictions (batch_comparisons.tsv, batch_summary.json, index.html);
// a pair whose subjects or folds differ is listed and not tested.
#include <cmath>
#include <filesystem>
#include <map>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsvByColumn;
using neuromkl::testing::RunCli;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

using Row = std::map<std::string, std::string>;

/// An image source carrying the signal (mri) and one of noise (noise); two learners with fixed parameters.
class BatchComparisons : public neuromkl::testing::SimulatedCohortSuite<BatchComparisons> {
 protected:
  static void SetUpTestSuite() {
    SimulateCohort("--subjects 60 --downsample 3 --seed 5 --effect 0.8 --second-modality");
    WriteFile(Cohort() + "/base.json", std::string(R"({"name": "base", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "kernels": {"sources": [{"name": "mri", "kind": "images"}, {"name": "noise", "kind": "images", "image_column": "image_b"}],
                  "missing_source": "drop"},
      "learners": )") + kLearners + R"(, "cv": {"outer": {"k": 4}, "inner": {"k": 3}}, "seed": 11})");
    // The learners of the matrix together in one study on the mri source: its own comparisons are on the same folds.
    WriteFile(Cohort() + "/both.json", std::string(R"({"name": "both", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "kernels": {"sources": [{"name": "mri", "kind": "images"}]},
      "learners": )") + kLearners + R"(, "cv": {"outer": {"k": 4}, "inner": {"k": 3}}, "seed": 11})");
  }
  static constexpr const char* kLearners = R"([{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "params": {"c": 0.01}}])";

  /// Runs a batch of the base study over `matrix` (and the study files `studies`) into `out`.
  static std::string RunBatch(const std::string& name, const std::string& matrix, const std::string& studies = "[]") {
    const std::string path = Cohort() + "/" + name + ".json", out = Dir() / name;
    WriteFile(path, R"({"name": ")" + name + R"(", "output": {"dir": ")" + out + R"("}, "studies": )" + studies +
                        R"(, "matrix": {"base": "base.json", )" + matrix + "}}");
    const auto r = RunCli("batch " + path + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return out;
  }
  static double Number(const Row& r, const std::string& column) { return std::stod(r.at(column)); }
};

const Row* FindRow(const std::vector<Row>& rows, const std::map<std::string, std::string>& match) {
  for (const auto& r : rows) {
    bool all = true;
    for (const auto& [k, v] : match) all = all && r.at(k) == v;
    if (all) return &r;
  }
  return nullptr;
}

TEST_F(BatchComparisons, StudiesDifferingInOneAxisGetThePairedTestsOfAStudysLearners) {
  const std::string out = RunBatch("axes", R"("sources": [{"use": ["mri"]}, {"use": ["mri", "noise"]}],
    "learners": [{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "params": {"c": 0.01}}])", R"(["both.json"])");
  const auto rows = ReadTsvByColumn(out + "/batch_comparisons.tsv");
  // Pairs: the two learners on each source set (learner axis), each learner on the two source sets (sources axis);
  // "both" has no matrix axes and the diagonal pairs differ in two axes: none of them is compared. Four tests per pair.
  ASSERT_EQ(rows.size(), 16u);
  std::map<std::string, int> perAxis;
  for (const auto& r : rows) {
    ++perAxis[r.at("axis")];
    EXPECT_NE(r.at("study_a"), "both");
    EXPECT_NE(r.at("study_b"), "both");
    const double p = Number(r, "p_value");
    EXPECT_TRUE(p > 0 && p <= 1) << r.at("test") << " p = " << p;
    EXPECT_FALSE(r.at("seed").empty());
  }
  EXPECT_EQ(perAxis, (std::map<std::string, int>{{"learner", 8}, {"sources", 8}}));

  // The learner axis on the mri source compares what the study "both" compares within itself, on the same folds:
  // the deterministic tests agree to the digits the tables keep; the paired permutation test compares the same
  // metric values with its own stream.
  const auto within = ReadTsvByColumn(out + "/studies/both/comparisons.tsv");
  for (const char* test : {"corrected_resampled_t", "mcnemar_exact", "delong", "paired_permutation"}) {
    const Row* b = FindRow(rows, {{"study_a", "mri_enmkl_svm"}, {"study_b", "mri_svm"}, {"test", test}});
    const Row* w = FindRow(within, {{"learner_a", "enmkl_svm"}, {"learner_b", "svm"}, {"test", test}});
    ASSERT_TRUE(b && w) << test;
    EXPECT_EQ(b->at("learner_a"), "enmkl_svm");
    EXPECT_EQ(b->at("n"), w->at("n")) << test;
    for (const char* column : {"value_a", "value_b"}) EXPECT_NEAR(Number(*b, column), Number(*w, column), 1e-12) << test << " " << column;
    if (std::string(test) != "paired_permutation") {
      EXPECT_NEAR(Number(*b, "statistic"), Number(*w, "statistic"), 1e-9 * std::max(1.0, std::abs(Number(*w, "statistic")))) << test;
      EXPECT_NEAR(Number(*b, "p_value"), Number(*w, "p_value"), 1e-9) << test;
    } else {
      EXPECT_NEAR(Number(*b, "p_value"), Number(*w, "p_value"), 0.02) << "two streams of 9999 swaps estimate one p-value";
    }
  }
  // The sources axis: value_a is the pooled balanced accuracy of the first study's learner.
  const auto metrics = ReadTsvByColumn(out + "/studies/mri_svm/metrics.tsv");
  const Row* pooled = FindRow(metrics, {{"learner", "svm"}, {"metric", "balanced_accuracy"}});
  const Row* paired = FindRow(rows, {{"axis", "sources"}, {"study_a", "mri_svm"}, {"study_b", "mri_noise_svm"}, {"test", "paired_permutation"}});
  ASSERT_TRUE(pooled && paired);
  EXPECT_NEAR(Number(*paired, "value_a"), Number(*pooled, "pooled"), 1e-12);

  // The same rows in batch_summary.json, and a section of index.html.
  const auto summary = nlohmann::json::parse(ReadFile(out + "/batch_summary.json"));
  EXPECT_EQ(summary["comparisons"]["table"], "batch_comparisons.tsv");
  EXPECT_EQ(summary["comparisons"]["rows"].size(), rows.size());
  EXPECT_THAT(ReadFile(out + "/index.html"), HasSubstr("Comparisons of studies that differ in one axis"));

  // validate says beforehand which pairs a run compares.
  const auto v = RunCli("validate " + Cohort() + "/axes.json");
  EXPECT_EQ(v.exitCode, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("4 pairs of studies that differ in one axis (2 along learner, 2 along sources) will be compared"));
}

TEST_F(BatchComparisons, APairWhoseSubjectsDifferIsListedAndNotTested) {
  // The second source lacks one subject's image: with missing_source "drop" the study with both sources has one
  // subject fewer, so its folds are not those of the study on mri alone.
  std::string table = ReadFile(Cohort() + "/participants.tsv");
  const auto at = table.find("images_b/sub-0007.nii.gz");
  ASSERT_NE(at, std::string::npos);
  table.replace(at, std::string("images_b/sub-0007.nii.gz").size(), "n/a");
  WriteFile(Cohort() + "/lacking.tsv", table);
  const std::string out = RunBatch("lacking", R"("cohorts": [{"name": "c", "subjects": {"table": "lacking.tsv"}}],
    "sources": [{"use": ["mri"]}, {"use": ["mri", "noise"]}])");
  const auto rows = ReadTsvByColumn(out + "/batch_comparisons.tsv");
  ASSERT_EQ(rows.size(), 2u);  // one row per learner: not compared
  for (const auto& r : rows) {
    EXPECT_EQ(r.at("test"), "none");
    EXPECT_EQ(r.at("p_value"), "n/a");
    EXPECT_THAT(r.at("detail"), HasSubstr("not compared: the subjects differ (1 scored only in the first study, 0 only in the second"));
  }
}

TEST_F(BatchComparisons, APairWhoseFoldsDifferIsListedAndNotTested) {
  // An atlas entry may set any study key: another seed gives other outer folds.
  const std::string out = RunBatch("reseeded", R"("sources": [{"use": ["mri"]}],
    "atlases": [{"name": "aal", "atlas": "aal"}, {"name": "aal_seed12", "atlas": "aal", "seed": 12}])");
  const auto rows = ReadTsvByColumn(out + "/batch_comparisons.tsv");
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& r : rows) {
    EXPECT_EQ(r.at("axis"), "atlas");
    EXPECT_EQ(r.at("test"), "none");
    EXPECT_THAT(r.at("detail"), HasSubstr("not compared: the outer folds differ (subject sub-"));
  }
}

TEST_F(BatchComparisons, AStudyWhosePredictionsCannotBeReadIsNamedAndTheMergeGoesOn) {
  const std::string out = RunBatch("damaged", R"("sources": [{"use": ["mri"]}, {"use": ["mri", "noise"]}])");
  const std::string table = out + "/studies/mri_noise/predictions.tsv";
  std::string text = ReadFile(table);
  const auto at = text.find("\tenmkl_svm\t0\t");  // the first row's repeat and fold
  ASSERT_NE(at, std::string::npos);
  text.replace(at, std::string("\tenmkl_svm\t0\t").size(), "\tenmkl_svm\tn/a\t");
  WriteFile(table, text);
  const auto r = RunCli("merge " + Cohort() + "/damaged.json -q");
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/batch_summary.tsv"));
  const auto rows = ReadTsvByColumn(out + "/batch_comparisons.tsv");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].at("test"), "none");
  EXPECT_THAT(rows[0].at("detail"), HasSubstr("the predictions of study mri_noise could not be read"));
  EXPECT_THAT(rows[0].at("detail"), HasSubstr("expected a fold or repeat number, found \"n/a\""));
}

TEST_F(BatchComparisons, ABatchWithoutSuchPairsWritesNoComparisons) {
  const std::string out = RunBatch("one_axis_cohorts", R"("cohorts": [{"name": "c", "subjects": {"table": "participants.tsv"}}])");
  EXPECT_TRUE(fs::exists(out + "/batch_summary.tsv"));
  EXPECT_FALSE(fs::exists(out + "/batch_comparisons.tsv"));
  EXPECT_FALSE(nlohmann::json::parse(ReadFile(out + "/batch_summary.json")).contains("comparisons"));
}

/// A study's comparisons and a batch's, as a reader sees them: the report and the batch page in headless chromium.
TEST_F(BatchComparisons, TheStudyReportAndTheBatchPageShowTheirComparisonsInChromium) {
  if (std::system("command -v chromium > /dev/null 2>&1") != 0)
    FAIL() << "chromium is not installed: the browser check needs Debian's chromium package (scripts/test.sh installs it)";
  const std::string out = RunBatch("shown", R"("sources": [{"use": ["mri"]}, {"use": ["mri", "noise"]}])", R"(["both.json"])");
  const std::string chromium = neuromkl::testing::HeadlessChromium(Dir() / "chromium");
  for (const auto& [page, heading] : {std::pair<std::string, std::string>{out + "/index.html", "Comparisons of studies that differ in one axis"},
                                      {out + "/studies/both/report.html", "Comparing learners"}}) {
    const std::string dom = Dir() / "dom.html";
    ASSERT_EQ(std::system((chromium + " --dump-dom file://" + page + " > " + dom + " 2>/dev/null").c_str()), 0) << page;
    const std::string html = ReadFile(dom);
    EXPECT_THAT(html, HasSubstr(heading)) << page;
    EXPECT_THAT(html, HasSubstr("paired_permutation")) << page;
  }
  // Screenshots of the two sections beside the report's (report_screenshot.png), to look at.
  for (const auto& [page, shot] : {std::pair<std::string, std::string>{out + "/index.html", "batch_comparisons_screenshot.png"},
                                   {out + "/studies/both/report.html", "report_comparisons_screenshot.png"}}) {
    const std::string file = std::string(NEUROMKL_BINARY_DIR) + "/" + shot;
    ASSERT_EQ(std::system((chromium + " --window-size=1400,1400 --screenshot=" + file + " file://" + page + "#comparisons > /dev/null 2>&1").c_str()), 0);
    EXPECT_GT(fs::file_size(file), 10000u);
  }
}

}  // namespace
