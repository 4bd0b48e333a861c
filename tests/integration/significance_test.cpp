// Which regions and sources carry more weight than the permutation test gives them, end to end: the planted regions
// (and the source holding them) reach p_FWE <= 0.05, the rest does not; the table's p-values are consistent with
// their definitions; maps, results.json and the report carry them; the numbers do not depend on the thread count.
#include <algorithm>
#include <filesystem>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "neuromkl/export/checkpoint.hpp"
#include "neuromkl/io/nifti.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::ReadTsvByColumn;
using neuromkl::testing::RunCli;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

class RegionSignificance : public neuromkl::testing::SimulatedCohortSuite<RegionSignificance> {
 protected:
  // Signal in the default regions of the first modality (Hippocampus_L, Precuneus_R, Frontal_Mid_L); the second
  // modality (image_b) is noise only.
  static void SetUpTestSuite() { SimulateCohort("--subjects 60 --downsample 3 --seed 3 --effect 0.8 --second-modality"); }
  static constexpr int kPermutations = 39;  // the smallest p is 1 / 40 = 0.025
  static std::string Study(const std::string& name, const std::string& learners, const std::string& extra = "") {
    const std::string path = Cohort() + "/" + name + ".json";
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "learners": )" + learners + R"(, "cv": {"outer": {"k": 5}, "inner": {"k": 3}}, "permutations": {"count": )" +
                        std::to_string(kPermutations) + R"(}, "seed": 3)" + extra + "}");
    return path;
  }
  static std::string Run(const std::string& study, const std::string& out) {
    const auto r = RunCli("run " + study + " --out " + Cohort() + "/" + out + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return Cohort() + "/" + out;
  }
  static constexpr const char* kLearners = R"([{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "params": {"c": 0.01}}])";
};

const std::vector<std::string> kPlanted = {"Hippocampus_L", "Precuneus_R", "Frontal_Mid_L"};

TEST_F(RegionSignificance, ThePlantedRegionsAndOnlyThemAreSignificantWithConsistentPValues) {
  const std::string out = Run(Study("single", kLearners), "single");
  for (const std::string learner : {"enmkl_svm", "svm"}) {
    SCOPED_TRACE(learner);
    const auto table = ReadTsvByColumn(out + "/regions_" + learner + ".tsv");
    ASSERT_EQ(table.size(), 116u);
    std::vector<std::string> significant;
    std::vector<double> p;
    for (const auto& row : table) {
      const double pu = std::stod(row.at("p_uncorrected")), pf = std::stod(row.at("p_fwe")), q = std::stod(row.at("q_fdr"));
      p.push_back(pu);
      if (pf <= 0.05) significant.push_back(row.at("name"));
      // Definitions: a p-value counts the observed share itself (>= 1 / 40); the family's maximum is at least the
      // region's own value, so p_FWE >= p; BH's q >= p.
      EXPECT_GE(pu, 1.0 / (kPermutations + 1) - 1e-15);
      EXPECT_GE(pf, pu);
      EXPECT_GE(q, pu - 1e-15);
      EXPECT_LE(pf, 1.0);
    }
    EXPECT_THAT(significant, ::testing::UnorderedElementsAreArray(kPlanted));
    // p_FWE compares every region with the same permutation maxima: it cannot rise as the share rises. Rows are
    // sorted by share, so p_FWE is non-decreasing down the table (a row matched to the wrong kernel breaks this).
    for (std::size_t i = 1; i < table.size(); ++i) EXPECT_GE(std::stod(table[i].at("p_fwe")), std::stod(table[i - 1].at("p_fwe"))) << table[i].at("name");
    // q_fdr is the Benjamini-Hochberg adjustment of the p_uncorrected column, transcribed from its definition.
    std::vector<double> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < table.size(); ++i) {
      double expected = 1.0;
      for (std::size_t k = 0; k < sorted.size(); ++k)
        if (sorted[k] >= p[i]) expected = std::min(expected, static_cast<double>(sorted.size()) * sorted[k] / static_cast<double>(k + 1));
      EXPECT_NEAR(std::stod(table[i].at("q_fdr")), expected, 1e-12) << table[i].at("name");
    }
  }
  // results.json: the same values per region, and how they were computed.
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  const auto& regions = j["learners"][0]["regions"];
  EXPECT_THAT(regions["significance"]["p_fwe"].get<std::string>(), HasSubstr("maximum statistic"));
  EXPECT_EQ(regions["significance"]["permutations"], kPermutations);
  const auto first = ReadTsvByColumn(out + "/regions_enmkl_svm.tsv")[0];
  EXPECT_EQ(regions["table"][0]["name"], first.at("name"));
  EXPECT_NEAR(regions["table"][0]["p_fwe"].get<double>(), std::stod(first.at("p_fwe")), 1e-15);
  // The report marks the significant regions and says how many there are.
  const std::string report = ReadFile(out + "/report.html");
  EXPECT_THAT(report, HasSubstr("<b>3 of 116 regions</b> at p<sub>FWE</sub> &le; 0.05"));
  EXPECT_THAT(report, HasSubstr(first.at("name") + " *"));
  // The methods paragraph says how the regions were tested, with the references.
  const std::string citation = ReadFile(out + "/CITATION.md");
  EXPECT_THAT(citation, HasSubstr("maximum statistic over the regions (Westfall & Young, 1993; Nichols & Holmes, 2002)"));
  EXPECT_THAT(citation, HasSubstr("Benjamini Y., Hochberg Y. (1995)"));
}

TEST_F(RegionSignificance, TheAtlasIsPaintedWithTheSharesAndMinusLog10PFwe) {
  const std::string out = Run(Study("maps", R"([{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}])"), "maps");
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  const auto& maps = j["learners"][0]["region_maps"];
  ASSERT_EQ(maps.size(), 1u);
  const auto share = neuromkl::io::ReadVolume(out + "/" + maps[0]["share"].get<std::string>());
  const auto logP = neuromkl::io::ReadVolume(out + "/" + maps[0]["log10_p_fwe"].get<std::string>());
  EXPECT_TRUE(ReadFile(out + "/" + maps[0]["share"].get<std::string>().replace(maps[0]["share"].get<std::string>().size() - 7, 7, ".json")).find("mean share") !=
              std::string::npos);
  // Each region's voxels hold its value: the set of painted values is the set of the table's values (as float).
  std::vector<float> shares, logs;
  for (const auto& row : ReadTsvByColumn(out + "/regions_enmkl_svm.tsv")) {
    shares.push_back(static_cast<float>(std::stod(row.at("mean_percent"))));
    logs.push_back(static_cast<float>(-std::log10(std::stod(row.at("p_fwe")))));
  }
  const auto painted = [](const std::vector<float>& data) {
    std::vector<float> values(data.begin(), data.end());
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    return values;
  };
  auto expected = [&](std::vector<float> v) {
    v.push_back(0.0f);  // outside the atlas
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  };
  EXPECT_EQ(painted(share.data), expected(shares));
  EXPECT_EQ(painted(logP.data), expected(logs));
  // Each of the top regions (distinct shares) covers exactly its own voxel count: its value went to its own region.
  const auto table = ReadTsvByColumn(out + "/regions_enmkl_svm.tsv");
  for (std::size_t i = 0; i < 3; ++i) {
    const auto value = static_cast<float>(std::stod(table[i].at("mean_percent")));
    EXPECT_EQ(std::count(share.data.begin(), share.data.end(), value), std::stol(table[i].at("voxels"))) << table[i].at("name");
  }
  EXPECT_FLOAT_EQ(*std::max_element(logP.data.begin(), logP.data.end()), static_cast<float>(std::log10(kPermutations + 1.0)));
}

TEST_F(RegionSignificance, TheSourceHoldingTheSignalIsSignificantAndTheNoiseSourceIsNot) {
  const std::string out = Run(Study("sources", R"([{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}])",
                                    R"(, "kernels": {"sources": [{"name": "mri", "kind": "images"}, {"name": "noise", "kind": "images", "image_column": "image_b"}]})"),
                              "sources");
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  const auto& mri = j["sources"][0]["weight_percent"]["enmkl_svm"];
  const auto& noise = j["sources"][1]["weight_percent"]["enmkl_svm"];
  // Holm over the two sources: the smaller p doubled.
  EXPECT_DOUBLE_EQ(mri["p_uncorrected"].get<double>(), 1.0 / (kPermutations + 1));
  EXPECT_DOUBLE_EQ(mri["p_fwe"].get<double>(), 2.0 / (kPermutations + 1));
  EXPECT_GT(noise["p_fwe"].get<double>(), 0.05);
  EXPECT_GE(noise["p_fwe"].get<double>(), noise["p_uncorrected"].get<double>());
  EXPECT_THAT(ReadFile(out + "/report.html"), HasSubstr("Sources (their summed shares"));
}

TEST_F(RegionSignificance, PValuesDoNotDependOnTheThreadCount) {
  const std::string one = Run(Study("threads1", kLearners, R"(, "threads": 1, "output": {"weight_maps": false})"), "threads1");
  const std::string two = Run(Study("threads2", kLearners, R"(, "threads": 2, "output": {"weight_maps": false})"), "threads2");
  for (const std::string learner : {"enmkl_svm", "svm"}) {
    const auto a = ReadTsvByColumn(one + "/regions_" + learner + ".tsv"), b = ReadTsvByColumn(two + "/regions_" + learner + ".tsv");
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      for (const char* column : {"name", "p_uncorrected", "p_fwe", "q_fdr"}) EXPECT_EQ(a[i].at(column), b[i].at(column)) << learner << " row " << i;
  }
}

// A checkpointed block keeps every permutation's shares exactly (a resumed test gives the same p-values); a block
// whose shares do not match its permutations is not trusted.
TEST(PermutationCheckpoint, SharesRoundTripExactlyAndAMismatchedBlockIsRecomputed) {
  neuromkl::testing::TempDir dir;
  namespace ex = neuromkl::exporting;
  ex::PermutationBlock block{"key", 10, {"enmkl_svm", "svm"}, {}, {}};
  block.pooled = {{{{"auc", 0.5}}, {{"auc", 0.25}}}, {{{"auc", 0.75}}, {{"auc", std::nan("")}}}};
  block.shares = {{{1.0 / 3, 2.0 / 3, 0.0}, {0.1, 0.2, 99.7}}, {{}, {std::nextafter(50.0, 0.0), 25.0, 25.0}}};  // {}: no successful fold
  ex::SavePermutationBlock(dir / "b.json", block);
  const auto loaded = ex::LoadPermutationBlock(dir / "b.json", "key");
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->shares, block.shares);  // bit for bit
  EXPECT_EQ(loaded->first, 10);
  block.shares.pop_back();
  ex::SavePermutationBlock(dir / "short.json", block);
  EXPECT_FALSE(ex::LoadPermutationBlock(dir / "short.json", "key").has_value());
  EXPECT_FALSE(ex::LoadPermutationBlock(dir / "b.json", "another key").has_value());
}

// Two learners on the same folds: every comparison is written, agrees with what the rest of the outputs say, and
// McNemar's p equals the exact binomial recomputed here from predictions.tsv.
class LearnerComparison : public neuromkl::testing::SimulatedCohortSuite<LearnerComparison> {
 protected:
  static void SetUpTestSuite() { SimulateCohort("--subjects 60 --downsample 3 --seed 4 --effect 0.5 --clinical-effect 1"); }
  static std::string Run(const std::string& name, const std::string& task, const std::string& learners) {
    const std::string path = Cohort() + "/" + name + ".json";
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": "participants.tsv"}, "target": )" + task + R"(, "atlas": "aal",
      "learners": )" + learners + R"(, "cv": {"outer": {"k": 5}, "inner": {"k": 3}}, "output": {"weight_maps": false, "model": false}, "seed": 4})");
    const auto r = RunCli("run " + path + " --out " + Cohort() + "/" + name + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return Cohort() + "/" + name;
  }
  static constexpr const char* kBinary = R"({"column": "group", "task": "classification", "positive_class": "patient"})";
};

TEST_F(LearnerComparison, EveryTestIsWrittenAndAgreesWithThePredictions) {
  const std::string out = Run("two", kBinary, R"([{"name": "enmkl_svm", "params": {"c": 1.0, "mu": 0.5}}, {"name": "svm", "params": {"c": 0.01}}])");
  const auto rows = ReadTsv(out + "/comparisons.tsv");
  ASSERT_EQ(rows.size(), 5u);  // header + t-test, McNemar, DeLong, paired permutation
  std::map<std::string, std::vector<std::string>> byTest;
  for (std::size_t r = 1; r < rows.size(); ++r) byTest[rows[r][2]] = rows[r];
  ASSERT_EQ(byTest.size(), 4u);
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  const auto pooled = [&](std::size_t l, const char* metric) { return j["learners"][l]["metrics"]["pooled"][metric].get<double>(); };
  // The paired permutation test and DeLong compare the pooled metrics the study reports (one repeat: the same predictions).
  EXPECT_NEAR(std::stod(byTest["paired_permutation"][4]), pooled(0, "balanced_accuracy"), 1e-12);
  EXPECT_NEAR(std::stod(byTest["paired_permutation"][5]), pooled(1, "balanced_accuracy"), 1e-12);
  EXPECT_NEAR(std::stod(byTest["delong"][4]), pooled(0, "auc"), 1e-12);
  EXPECT_NEAR(std::stod(byTest["delong"][5]), pooled(1, "auc"), 1e-12);
  EXPECT_EQ(byTest["corrected_resampled_t"][8], "5");  // one difference per outer fold
  // McNemar from predictions.tsv: subjects right by one learner only.
  std::map<std::string, std::map<std::string, bool>> right;  // subject -> learner -> predicted == target
  for (const auto& row : ReadTsv(out + "/predictions.tsv")) right[row[0]][row[1]] = row[4] == row[6];
  int onlyA = 0, onlyB = 0;
  for (const auto& [subject, byLearner] : right) {
    if (subject == "subject") continue;
    onlyA += byLearner.at("enmkl_svm") && !byLearner.at("svm");
    onlyB += byLearner.at("svm") && !byLearner.at("enmkl_svm");
  }
  double tail = 0;  // P(X <= min) for X ~ Bin(onlyA + onlyB, 1/2), by the binomial coefficients
  for (int i = 0; i <= std::min(onlyA, onlyB); ++i) {
    double c = 1;
    for (int k = 0; k < i; ++k) c = c * (onlyA + onlyB - k) / (k + 1);
    tail += c * std::pow(0.5, onlyA + onlyB);
  }
  EXPECT_NEAR(std::stod(byTest["mcnemar_exact"][7]), std::min(1.0, 2 * tail), 1e-12);
  EXPECT_DOUBLE_EQ(std::stod(byTest["mcnemar_exact"][6]), onlyA - onlyB);
  EXPECT_EQ(j["comparisons"]["tests"].size(), 4u);
  EXPECT_EQ(j["comparisons"]["paired_permutation_swaps"], 9999);
  EXPECT_THAT(ReadFile(out + "/report.html"), HasSubstr(">Comparing learners</h2>"));
}

// Every pooled rate gets a bootstrap interval around it, the binary AUC also DeLong's; neither depends on the thread count.
TEST_F(LearnerComparison, PooledMetricsHaveIntervalsAroundThemIndependentOfThreads) {
  const std::string learners = R"([{"name": "svm", "params": {"c": 0.01}}])";
  const std::string one = Run("ci1", kBinary, learners);
  const auto j = nlohmann::json::parse(ReadFile(one + "/results.json"));
  const auto& m = j["learners"][0]["metrics"];
  for (const char* metric : {"balanced_accuracy", "auc", "accuracy", "recall_positive"}) {
    const double pooled = m["pooled"][metric].get<double>(), low = m["pooled_ci95"][metric][0].get<double>(), high = m["pooled_ci95"][metric][1].get<double>();
    EXPECT_LE(low, pooled) << metric;
    EXPECT_GE(high, pooled) << metric;
    EXPECT_LT(low, high) << metric;  // 60 subjects and an imperfect model: a real spread
  }
  const auto& delong = m["auc_delong_ci95"];
  EXPECT_LE(delong[0].get<double>(), m["pooled"]["auc"].get<double>());
  EXPECT_GE(delong[1].get<double>(), m["pooled"]["auc"].get<double>());
  EXPECT_THAT(m["pooled_ci95_method"].get<std::string>(), HasSubstr("2000 subject bootstrap resamples"));
  // metrics.tsv carries the same interval; a second run with one thread gives the same numbers.
  const std::string path = Cohort() + "/ci1.json";
  std::string study = ReadFile(path);
  study.insert(study.rfind('}'), R"(, "threads": 1)");
  WriteFile(Cohort() + "/ci2.json", study);
  ASSERT_EQ(RunCli("run " + Cohort() + "/ci2.json --out " + Cohort() + "/ci2 -q").exitCode, 0);
  EXPECT_EQ(ReadFile(one + "/metrics.tsv"), ReadFile(Cohort() + "/ci2/metrics.tsv"));
  const auto rows = ReadTsv(one + "/metrics.tsv");
  ASSERT_EQ(rows[0].size(), 8u);
  EXPECT_EQ(rows[0][6], "pooled_ci95_low");
}

// Multiclass intervals are named by class, whatever the class names (here digits that are not the class indices).
TEST_F(LearnerComparison, MulticlassIntervalsAreNamedByClass) {
  neuromkl::testing::TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "mc") + " --subjects 45 --downsample 3 --classes 3 --seed 6 -q").exitCode, 0);
  auto rows = ReadTsv(dir / "mc/participants.tsv");
  const std::map<std::string, std::string> digits = {{"A", "3"}, {"B", "1"}, {"C", "2"}};
  std::string table;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t c = 0; c < rows[r].size(); ++c) table += (c ? "\t" : "") + (r > 0 && rows[0][c] == "group" ? digits.at(rows[r][c]) : rows[r][c]);
    table += "\n";
  }
  WriteFile(dir / "mc/participants.tsv", table);
  WriteFile(dir / "mc/study.json", R"({"name": "mc", "subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "multiclass"},
    "atlas": "aal", "learners": [{"name": "svm", "params": {"c": 0.01}}], "cv": {"outer": {"k": 3}, "inner": {"k": 3}}, "output": {"weight_maps": false}, "seed": 6})");
  const auto r = RunCli("run " + (dir / "mc/study.json") + " --out " + (dir / "mc/out") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto j = nlohmann::json::parse(ReadFile(dir / "mc/out/results.json"));
  const auto& m = j["learners"][0]["metrics"];
  for (const std::string c : {"1", "2", "3"}) {
    ASSERT_TRUE(m["pooled_ci95"].contains("recall_" + c)) << c;
    EXPECT_LE(m["pooled_ci95"]["recall_" + c][0].get<double>(), m["pooled"]["recall_" + c].get<double>()) << c;
    EXPECT_GE(m["pooled_ci95"]["recall_" + c][1].get<double>(), m["pooled"]["recall_" + c].get<double>()) << c;
  }
  EXPECT_FALSE(m["pooled_ci95"].contains("recall_0"));
  for (const auto& [metric, unused] : m["pooled_ci95"].items()) EXPECT_NE(metric.rfind("confusion_", 0), 0u) << metric;  // counts have none
}

// A learner compared with itself (two labels, the same fits): no difference, so every p is 1 and every statistic 0.
TEST_F(LearnerComparison, ALearnerComparedWithItselfShowsNoDifference) {
  const std::string out = Run("same", kBinary, R"([{"name": "svm", "label": "a", "params": {"c": 1}}, {"name": "svm", "label": "b", "params": {"c": 1}}])");
  const auto rows = ReadTsv(out + "/comparisons.tsv");
  ASSERT_EQ(rows.size(), 5u);
  for (std::size_t r = 1; r < rows.size(); ++r) {
    EXPECT_EQ(rows[r][4], rows[r][5]) << rows[r][2];
    EXPECT_DOUBLE_EQ(std::stod(rows[r][7]), 1.0) << rows[r][2];
  }
}

// Regression compares MSE (t-test and paired permutation); a single learner has nothing to compare.
TEST_F(LearnerComparison, RegressionComparesMseAndOneLearnerWritesNoComparisons) {
  const std::string out = Run("reg", R"({"column": "clinical", "task": "regression"})",
                              R"([{"name": "krr", "params": {"lambda": 1}}, {"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}])");
  const auto rows = ReadTsv(out + "/comparisons.tsv");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1][2], "corrected_resampled_t");
  EXPECT_EQ(rows[2][2], "paired_permutation");
  for (std::size_t r = 1; r < rows.size(); ++r) EXPECT_EQ(rows[r][3], "mse");
  const auto j = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_NEAR(std::stod(rows[2][4]), j["learners"][0]["metrics"]["pooled"]["mse"].get<double>(), 1e-9);
  const std::string one = Run("one", kBinary, R"([{"name": "svm", "params": {"c": 1}}])");
  EXPECT_FALSE(std::filesystem::exists(one + "/comparisons.tsv"));
  EXPECT_FALSE(nlohmann::json::parse(ReadFile(one + "/results.json")).contains("comparisons"));
}

// The resampling counts are the study's: the paired permutation p is a multiple of 1 / (swaps + 1) and the intervals
// say how many resamples they came from; counts outside their range are refused with the key.
TEST_F(LearnerComparison, ResamplingCountsAreStudySettings) {
  const std::string path = Cohort() + "/counts.json";
  const auto study = [&](const std::string& statistics) {
    WriteFile(path, R"({"name": "counts", "subjects": {"table": "participants.tsv"}, "target": )" + std::string(kBinary) + R"(, "atlas": "aal",
      "learners": [{"name": "svm", "params": {"c": 0.01}}, {"name": "krr", "params": {"lambda": 1}}], "cv": {"outer": {"k": 5}, "inner": {"k": 3}},
      "output": {"weight_maps": false, "model": false}, "seed": 4, "statistics": )" + statistics + "}");
    return path;
  };
  const auto r = RunCli("run " + study(R"({"bootstrap_resamples": 300, "paired_swaps": 199})") + " --out " + Cohort() + "/counts -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto j = nlohmann::json::parse(ReadFile(Cohort() + "/counts/results.json"));
  EXPECT_EQ(j["comparisons"]["paired_permutation_swaps"], 199);
  for (const auto& t : j["comparisons"]["tests"])
    if (t["test"] == "paired_permutation") {
      const double times = t["p_value"].get<double>() * 200;
      EXPECT_NEAR(times, std::round(times), 1e-9);
      EXPECT_THAT(t["detail"].get<std::string>(), HasSubstr("swapped at random 199 times"));
    }
  EXPECT_THAT(j["learners"][0]["metrics"]["pooled_ci95_method"].get<std::string>(), HasSubstr("300"));
  EXPECT_EQ(nlohmann::json::parse(ReadFile(Cohort() + "/counts/study.resolved.json"))["statistics"]["paired_swaps"], 199);
  const auto refused = RunCli("validate " + study(R"({"bootstrap_resamples": 50})") + " -q");
  EXPECT_EQ(refused.exitCode, 2);
  EXPECT_THAT(refused.output, HasSubstr("/statistics/bootstrap_resamples: expected an integer in [200, 1000000], found 50"));
}

}  // namespace
