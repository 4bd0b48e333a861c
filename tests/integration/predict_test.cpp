// Exported models and `neuromkl predict` end to end (docs/predict.md): each outer fold's exported model,
// applied to that fold's held-out subjects, reproduces the nested-CV decision values; a model trained on
// one simulated cohort scores an independent one within the nested-CV interval; calibration and bias
// correction slots; bad inputs exit 2 with clear messages and no output.
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "neuromkl/core/npy.hpp"
#include "neuromkl/export/model.hpp"
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

using Rows = std::vector<std::vector<std::string>>;

std::size_t Col(const Rows& rows, const std::string& name) {
  for (std::size_t c = 0; c < rows[0].size(); ++c)
    if (rows[0][c] == name) return c;
  ADD_FAILURE() << "no column " << name;
  return 0;
}

/// The cohort's participants.tsv restricted to `ids`, image paths made absolute.
void WriteSubset(const std::string& cohort, const std::set<std::string>& ids, const std::string& path) {
  const Rows part = ReadTsv(cohort + "/participants.tsv");
  std::string text;
  for (std::size_t r = 0; r < part.size(); ++r) {
    if (r > 0 && !ids.count(part[r][0])) continue;
    for (std::size_t c = 0; c < part[r].size(); ++c) {
      const bool image = r > 0 && (part[0][c].rfind("image", 0) == 0 || part[0][c] == "connectome");  // paths
      text += (c ? "\t" : "") + (image ? fs::absolute(cohort + "/" + part[r][c]).string() : part[r][c]);
    }
    text += "\n";
  }
  WriteFile(path, text);
}

class PredictCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { dir_ = new TempDir(); }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string Path(const std::string& name) { return *dir_ / name; }
  /// A simulated cohort (written on first use: each test runs in its own process).
  static std::string Cohort(const std::string& name) {
    static const std::map<std::string, std::string> args = {
        {"cls", "--subjects 40 --seed 1 --downsample 3"},
        {"reg", "--subjects 50 --seed 3 --downsample 3 --task regression --age-regions Frontal_Sup_L --age-target-correlation 0.5 --clinical-effect 1"},
        {"multi", "--subjects 45 --seed 5 --downsample 3 --classes 3 --signal \"Hippocampus_L,Amygdala_L;Precuneus_R;Frontal_Mid_L\""},
        {"trainA", "--subjects 60 --seed 21 --downsample 3 --effect 0.6"},
        {"newB", "--subjects 60 --seed 22 --downsample 3 --effect 0.6"},
        {"coarse", "--subjects 6 --seed 4 --downsample 4"},
        {"nan", "--subjects 24 --seed 8 --downsample 3 --nan-fraction 0.01"},
        {"nanNew", "--subjects 24 --seed 9 --downsample 3 --nan-fraction 0.01"},
        {"imp", "--subjects 40 --seed 11 --downsample 3 --age-regions Frontal_Sup_L --age-target-correlation 0.5"},
        {"tab", "--subjects 50 --seed 3 --downsample 3 --task regression --age-regions Frontal_Sup_L --age-target-correlation 0.5 --clinical-effect 1"},
        {"conn", "--subjects 60 --seed 31 --downsample 3 --connectivity 10 --connectivity-signal node03 --age-regions Frontal_Sup_L"},
        {"tsites", "--subjects 72 --seed 17 --downsample 3 --sites 3 --effect 0.8 --clinical-effect 1"},
        {"sites", "--subjects 72 --seed 13 --downsample 3 --sites 3 --effect 0.8 --age-regions Frontal_Sup_L --age-target-correlation 0.3"}};
    if (!fs::exists(Path(name))) {
      const auto r = RunCli("simulate --out " + Path(name) + " " + args.at(name) + " -q");
      EXPECT_EQ(r.exitCode, 0) << r.output;
    }
    return Path(name);
  }
  /// Writes and runs a study on cohort `cohort`; returns its results folder.
  static std::string Run(const std::string& name, const std::string& cohort, const std::string& body,
                         const std::string& output = R"({"weight_maps": false})") {
    const std::string study = Path(name + ".json");
    WriteFile(study, R"({"name": ")" + name + R"(", "subjects": {"table": ")" + cohort + R"(/participants.tsv"}, "atlas": "aal",
      "output": )" + output + R"(, "seed": 7, )" + body + "}");
    const auto r = RunCli("run " + study + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return Path("results/" + name);
  }
  /// Every learner's fold models applied to their held-out subjects: the decision values (or class scores)
  /// of the study's predictions.tsv, to 1e-6 of the fold's largest magnitude (the kernels are float32
  /// products accurate to ~1e-7 relative, README; predict works in double on the same float32 voxels).
  static void ExpectFoldModelsReproduce(const std::string& results, const std::string& cohort, std::size_t learners, bool expectCalibrated = false,
                                        const std::string& options = "") {
    const auto index = nlohmann::json::parse(ReadFile(results + "/model/model.json"));
    ASSERT_EQ(index.at("learners").size(), learners);
    const Rows study = ReadTsv(results + "/predictions.tsv");
    const std::size_t subject = Col(study, "subject"), learner = Col(study, "learner"), fold = Col(study, "fold");
    const Rows studyParts = fs::exists(results + "/attributions.tsv") ? ReadTsv(results + "/attributions.tsv") : Rows{};
    std::vector<std::string> valueColumns;
    for (const auto& c : study[0])
      if (c.rfind("score_", 0) == 0) valueColumns.push_back(c);
    if (valueColumns.empty()) valueColumns = {"decision"};
    int checked = 0, calibrated = 0;
    for (const auto& entry : index.at("learners")) {
      const std::string label = entry.at("label"), folder = entry.at("folder");
      std::map<std::string, std::map<std::string, std::vector<double>>> expected;  // fold -> subject -> values
      for (std::size_t r = 1; r < study.size(); ++r)
        if (study[r][learner] == label)
          for (const auto& c : valueColumns) expected[study[r][fold]][study[r][subject]].push_back(std::stod(study[r][Col(study, c)]));
      for (const auto& [k, bySubject] : expected) {
        std::set<std::string> ids;
        double scale = 0;
        for (const auto& [id, v] : bySubject) {
          ids.insert(id);
          for (double x : v) scale = std::max(scale, std::abs(x));
        }
        const std::string table = Path("fold_" + label + "_" + k + ".tsv"), out = Path("pred_" + label + "_" + k);
        WriteSubset(cohort, ids, table);
        const auto r = RunCli("predict " + results + "/model/" + folder + "/folds/" + k + " " + table + " --out " + out + " -q" + options);
        ASSERT_EQ(r.exitCode, 0) << r.output;
        const Rows pred = ReadTsv(out + "/predictions.tsv");
        ASSERT_EQ(pred.size(), ids.size() + 1);
        const bool multi = valueColumns[0] != "decision";
        const std::string regressionColumn = std::find(pred[0].begin(), pred[0].end(), "prediction") != pred[0].end() ? "prediction" : "decision";
        for (std::size_t p = 1; p < pred.size(); ++p) {
          const auto& want = bySubject.at(pred[p][0]);
          for (std::size_t c = 0; c < valueColumns.size(); ++c) {
            const double got = std::stod(pred[p][Col(pred, multi ? valueColumns[c] : regressionColumn)]);
            EXPECT_NEAR(got, want[c], 1e-6 * scale) << label << " fold " << k << " subject " << pred[p][0] << " " << valueColumns[c];
          }
        }
        // Each decision's split over the kernels travels too: predict's attributions.tsv has the study's parts of the
        // same subject and fold (same tolerance), and bias + the parts is predict's decision value.
        if (!multi) {
          const Rows parts = ReadTsv(out + "/attributions.tsv");
          ASSERT_EQ(parts.size(), ids.size() + 1);
          for (std::size_t p = 1; p < parts.size(); ++p) {
            const auto it = std::find_if(studyParts.begin() + 1, studyParts.end(), [&](const std::vector<std::string>& row) {
              return row[Col(studyParts, "subject")] == parts[p][0] && row[Col(studyParts, "learner")] == label && row[Col(studyParts, "fold")] == k;
            });
            ASSERT_NE(it, studyParts.end()) << label << " fold " << k << " subject " << parts[p][0];
            double sum = std::stod(parts[p][Col(parts, "bias")]);
            for (std::size_t c = Col(parts, "bias") + 1; c < parts[0].size(); ++c) {
              sum += std::stod(parts[p][c]);
              EXPECT_NEAR(std::stod(parts[p][c]), std::stod((*it)[Col(studyParts, parts[0][c])]), 1e-6 * scale) << label << " fold " << k << " " << parts[0][c];
            }
            const double decision = std::stod(parts[p][Col(parts, "decision")]);
            EXPECT_NEAR(sum, decision, 1e-9 * std::max(1.0, std::abs(decision))) << label << " fold " << k << " subject " << parts[p][0];
          }
        }
        // The fold's Platt probabilities and bias-corrected predictions travel with its model: predict gives
        // the study's values (Platt's slope |A| and 1/slope are O(1-10) here: 1e-5 covers the 1e-6 decisions).
        for (const auto& [studyColumn, predictColumn] : {std::pair<std::string, std::string>{"probability", "probability"},
                                                          {"prediction_corrected", "prediction_corrected"}}) {
          if (std::find(study[0].begin(), study[0].end(), studyColumn) == study[0].end()) continue;
          ASSERT_NE(std::find(pred[0].begin(), pred[0].end(), predictColumn), pred[0].end()) << predictColumn << " missing from predict's output";
          for (std::size_t p = 1; p < pred.size(); ++p)
            for (std::size_t r = 1; r < study.size(); ++r)
              if (study[r][learner] == label && study[r][fold] == k && study[r][subject] == pred[p][0] && study[r][Col(study, studyColumn)] != "n/a") {
                EXPECT_NEAR(std::stod(pred[p][Col(pred, predictColumn)]), std::stod(study[r][Col(study, studyColumn)]), 1e-5 * std::max(1.0, scale))
                    << label << " fold " << k << " subject " << pred[p][0] << " " << studyColumn;
              }
          ++calibrated;
        }
        ++checked;
      }
    }
    EXPECT_GE(checked, static_cast<int>(learners) * 5);
    if (expectCalibrated) {
      EXPECT_EQ(calibrated, checked);
    }
  }
  /// The classification and regression studies (each test runs in its own process: run once there).
  static std::string Cls() {
    if (!fs::exists(Path("results/cls")))
      Run("cls", Cohort("cls"), R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
        "learners": [{"name": "svm"}, {"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])");
    return Path("results/cls");
  }
  static std::string Reg() {
    if (!fs::exists(Path("results/reg")))
      Run("reg", Cohort("reg"), R"("target": {"column": "score", "task": "regression", "bias_correction": "linear"}, "covariates": ["age"],
        "kernels": {"sources": [{"name": "mri", "kind": "images"},
          {"name": "clin", "kind": "tabular", "tabular": {"table": ")" + Cohort("reg") + R"(/participants.tsv", "id_column": "subject",
           "groups": {"clinical": ["clinical"]}}}]},
        "learners": [{"name": "krr"}, {"name": "enmkl_krr"}])");
    return Path("results/reg");
  }
  static TempDir* dir_;
};
TempDir* PredictCli::dir_ = nullptr;

TEST_F(PredictCli, FoldModelsReproduceNestedCvClassification) {
  const auto results = Cls();
  ExpectFoldModelsReproduce(results, Cohort("cls"), 2, true);
  // The model card: what was trained and how well it is expected to predict.
  const auto card = nlohmann::json::parse(ReadFile(results + "/model/Svm/model.json"));
  EXPECT_EQ(card.at("learner").at("name"), "svm");
  EXPECT_EQ(card.at("training").at("summary").at("n"), 40);
  EXPECT_TRUE(card.at("expected_performance").at("pooled").contains("balanced_accuracy"));
  EXPECT_EQ(card.at("sources").at(0).at("grid").at("dims").size(), 3u);
  EXPECT_FALSE(card.at("info").at("atlas_xxh3").get<std::string>().empty());
  // The final model carries Platt scaling fitted on its inner-CV out-of-fold decision values (A < 0: a larger
  // decision value means the positive class is more likely).
  ASSERT_FALSE(card.at("calibration").is_null());
  EXPECT_LT(card.at("calibration").at("A").get<double>(), 0.0);
}

// Regression with covariates (age) and two sources (images + a tabular clinical score): KRR and ENMKL-KRR.
TEST_F(PredictCli, FoldModelsReproduceNestedCvRegressionWithCovariatesAndTabularSource) {
  const auto results = Reg();
  ExpectFoldModelsReproduce(results, Cohort("reg"), 2, true);
}

TEST_F(PredictCli, FoldModelsReproduceNestedCvMulticlassKelm) {
  const auto results = Run("multi", Cohort("multi"), R"("target": {"column": "group", "task": "multiclass"}, "learners": [{"name": "kelm"}])");
  ExpectFoldModelsReproduce(results, Cohort("multi"), 1);
}

// Missing covariate values imputed inside the folds (/covariates/impute): every fold model carries its own training
// fill, so predict on a fold's held-out subjects (some lacking age, some the scanner) reproduces their decision values;
// the final model fills a new subject's missing age with the median of all training ages, and says so.
TEST_F(PredictCli, FoldModelsReproduceNestedCvWithImputedCovariates) {
  const std::string cohort = Cohort("imp");
  const Rows table = ReadTsv(cohort + "/participants.tsv");
  const std::size_t ageCol = Col(table, "age");
  std::string text;
  std::vector<double> ages;
  for (std::size_t r = 0; r < table.size(); ++r) {
    std::vector<std::string> row = table[r];
    if (r > 0 && r % 7 == 3) row[ageCol] = "n/a";
    if (r > 0 && row[ageCol] != "n/a") ages.push_back(std::stod(row[ageCol]));
    row.push_back(r == 0 ? "scanner" : r % 9 == 4 ? "n/a" : r % 3 == 0 ? "S1" : "S2");
    for (std::size_t c = 0; c < row.size(); ++c) text += (c ? "\t" : "") + row[c];
    text += "\n";
  }
  WriteFile(cohort + "/participants.tsv", text);
  const auto results = Run("imp", cohort, R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "covariates": {"columns": ["age"], "categorical": ["scanner"], "impute": "median"}, "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])");
  ExpectFoldModelsReproduce(results, cohort, 1, true);
  const auto j = nlohmann::json::parse(ReadFile(results + "/results.json"));
  EXPECT_EQ(j.at("covariates").at("impute"), "median");
  EXPECT_EQ(j.at("covariates").at("imputed").at("missing_per_column").at("age"), 6);      // rows 3, 10, ..., 38
  EXPECT_EQ(j.at("covariates").at("imputed").at("missing_per_column").at("scanner"), 5);  // rows 4, 13, 22, 31, 40
  int tested = 0;
  for (const auto& fold : j.at("covariates").at("imputed").at("subjects_per_outer_fold")) tested += fold.at("test").get<int>();
  EXPECT_EQ(tested, 10);  // every subject is tested once; sub-0031 lacks both
  // The final model on two subjects lacking age: the median of the 34 training ages (even: the mean of the middle two).
  std::sort(ages.begin(), ages.end());
  ASSERT_EQ(ages.size(), 34U);
  const double median = 0.5 * (ages[16] + ages[17]);
  WriteSubset(cohort, {"sub-0003", "sub-0010"}, Path("imp_new.tsv"));
  const auto r = RunCli("predict " + results + "/model " + Path("imp_new.tsv") + " --out " + Path("pred_imp"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("subject sub-0003: covariate column \"age\" is missing; imputed with the training subjects' median {}",
                                            median)));
  const auto card = nlohmann::json::parse(ReadFile(results + "/model/EnmklSvm/model.json"));
  EXPECT_NEAR(card.at("covariates").at("impute").at("fill").at(1).get<double>(), median, 1e-12 * median);
}

// A tabular source imputed and standardised inside the folds (/kernels/tabular impute, standardise): every fold model
// keeps its own training subjects' medians, means and SDs and its training rows as they made them, so predict on a
// fold's held-out subjects (some lacking a value) reproduces their decision values, linear and Gaussian kernels alike;
// the final model's statistics are those of every subject, and a new subject's gap takes the median, said in a warning.
TEST_F(PredictCli, FoldModelsReproduceNestedCvWithTabularColumnsImputedAndStandardisedInTheFolds) {
  const std::string cohort = Cohort("tab");
  const Rows table = ReadTsv(cohort + "/participants.tsv");
  const std::size_t clinicalCol = Col(table, "clinical"), ageCol = Col(table, "age");
  std::string text;
  std::vector<double> clinical, filled;
  for (std::size_t r = 0; r < table.size(); ++r) {
    std::vector<std::string> row = table[r];
    if (r > 0 && r % 7 == 3) row[clinicalCol] = "n/a";
    if (r > 0 && r % 11 == 5) row[ageCol] = "";
    if (r > 0 && row[clinicalCol] != "n/a") clinical.push_back(std::stod(row[clinicalCol]));
    for (std::size_t c = 0; c < row.size(); ++c) text += (c ? "\t" : "") + row[c];
    text += "\n";
  }
  WriteFile(cohort + "/participants.tsv", text);
  const auto results = Run("tab", cohort, R"("target": {"column": "score", "task": "regression"},
    "kernels": {"sources": [{"name": "mri", "kind": "images"},
      {"name": "clin", "kind": "tabular", "tabular": {"table": ")" + cohort + R"(/participants.tsv", "standardise": true, "impute": "median",
       "groups": {"both": ["clinical", "age"], "age": ["age"]}, "functions": [{"type": "linear"}, {"type": "gaussian", "width": [2]}]}}]},
    "learners": [{"name": "krr", "params": {"lambda": 0.1}}, {"name": "enmkl_krr", "params": {"lambda": 0.1, "mu": 0.5}}])");
  ExpectFoldModelsReproduce(results, cohort, 2);
  const auto j = nlohmann::json::parse(ReadFile(results + "/results.json"));
  const auto& folds = j.at("tabular_in_folds").at(0);
  EXPECT_EQ(folds.at("source"), "clin");
  EXPECT_EQ(folds.at("missing_per_column").at("clinical"), 7);  // rows 3, 10, ..., 45
  EXPECT_EQ(folds.at("missing_per_column").at("age"), 5);       // rows 5, 16, 27, 38, 49
  int tested = 0;
  for (const auto& fold : folds.at("imputed_subjects_per_outer_fold")) tested += fold.at("test").get<int>();
  EXPECT_EQ(tested, 11);  // every subject is tested once; sub-0038 lacks both
  // The final model: the median and the mean and SD of the filled column over all 50 subjects (43 values: the middle one).
  std::sort(clinical.begin(), clinical.end());
  ASSERT_EQ(clinical.size(), 43U);
  const double median = clinical[21];
  double sum = 0, squares = 0;
  for (const double v : clinical) sum += v;
  const double mean = (sum + 7 * median) / 50;
  for (const double v : clinical) squares += (v - mean) * (v - mean);
  const double sd = std::sqrt((squares + 7 * (median - mean) * (median - mean)) / 49);
  const std::string modelDir = results + "/model/EnmklKrr";
  const auto card = nlohmann::json::parse(ReadFile(modelDir + "/model.json"));
  for (const auto& source : card.at("sources")) {
    if (source.at("kind") != "tabular") continue;
    EXPECT_EQ(source.at("impute"), "median");
    // (The groups in name order: "age" first, so its column is the first used.)
    EXPECT_EQ(source.at("columns"), (std::vector<std::string>{"age", "clinical"}));
    const Eigen::MatrixXd fill = neuromkl::ReadNpy(modelDir + "/" + source.at("fill").at("file").get<std::string>());
    const Eigen::MatrixXd stats = neuromkl::ReadNpy(modelDir + "/" + source.at("column_stats").at("file").get<std::string>());
    EXPECT_NEAR(fill(0, 1), median, 1e-12 * std::abs(median));
    EXPECT_NEAR(stats(0, 1), mean, 1e-12 * std::max(1.0, std::abs(mean)));
    EXPECT_NEAR(stats(1, 1), sd, 1e-12 * sd);
  }
  WriteSubset(cohort, {"sub-0003", "sub-0004"}, Path("tab_new.tsv"));
  const auto r = RunCli("predict " + results + "/model " + Path("tab_new.tsv") + " --out " + Path("pred_tab"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("subject sub-0003: feature column \"clinical\" is missing; imputed with the training subjects' median {}", median)));
  EXPECT_THAT(r.output, Not(HasSubstr("subject sub-0004: feature column")));
}

// Connectivity and precomputed kernels travel too: the model keeps the connections' training means, covariate
// coefficients and primal weights (as for voxels), and each precomputed kernel's training block; predict reads each new
// subject's matrix, and the precomputed kernel's rows from a table (--kernel-rows) whose columns name the training subjects.
TEST_F(PredictCli, FoldModelsReproduceNestedCvWithImageConnectivityAndPrecomputedSources) {
  const std::string cohort = Cohort("conn");
  const Rows table = ReadTsv(cohort + "/participants.tsv");
  const auto n = static_cast<Eigen::Index>(table.size() - 1);
  // A precomputed linear kernel of six features, the first shifted for patients.
  Eigen::MatrixXd X(n, 6);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < 6; ++j) X(i, j) = std::sin(1.7 * static_cast<double>(i) + 2.3 * static_cast<double>(j)) + (j == 0 && table[i + 1][Col(table, "group")] == "patient");
  const Eigen::MatrixXd K = X * X.transpose();
  neuromkl::WriteNpy(cohort + "/pre.npy", K);
  std::string rows = "subject\tself";
  for (Eigen::Index i = 0; i < n; ++i) rows += fmt::format("\t{}", table[i + 1][0]);
  rows += "\n";
  for (Eigen::Index i = 0; i < n; ++i) {
    rows += fmt::format("{}\t{:.17g}", table[i + 1][0], K(i, i));
    for (Eigen::Index j = 0; j < n; ++j) rows += fmt::format("\t{:.17g}", K(i, j));
    rows += "\n";
  }
  WriteFile(Path("pre_rows.tsv"), rows);
  const auto results = Run("conn", cohort, R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "covariates": ["age"], "kernels": {"sources": [{"name": "gm", "kind": "images"},
      {"name": "fc", "kind": "connectivity", "connectivity": {"column": "connectome", "kernels": "node", "nodes": ")" + cohort + R"(/nodes.tsv"}},
      {"name": "dti", "kind": "precomputed", "precomputed": [{"name": "fa", "file": ")" + cohort + R"(/pre.npy"}]}]},
    "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])");
  ExpectFoldModelsReproduce(results, cohort, 1, true, " --kernel-rows dti:fa=" + Path("pre_rows.tsv"));
  const auto card = nlohmann::json::parse(ReadFile(results + "/model/EnmklSvm/model.json"));
  ASSERT_EQ(card.at("sources").size(), 3u);
  EXPECT_EQ(card.at("sources").at(1).at("kind"), "connectivity");
  EXPECT_EQ(card.at("sources").at(1).at("nodes").size(), 10u);
  EXPECT_EQ(card.at("precomputed_kernels").size(), 1u);

  // Without the precomputed kernel's rows, or with a table that lacks training subjects: exit 2, naming what is missing.
  WriteSubset(cohort, {"sub-0001", "sub-0002"}, Path("conn_new.tsv"));
  auto r = RunCli("predict " + results + "/model " + Path("conn_new.tsv") + " --out " + Path("pred_conn_bad"));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("give each new subject's kernel row against the training subjects with --kernel-rows KERNEL=FILE"));
  WriteFile(Path("pre_rows_short.tsv"), "subject\tself\tsub-0001\nsub-0001\t1\t1\nsub-0002\t1\t1\n");
  r = RunCli("predict " + results + "/model " + Path("conn_new.tsv") + " --out " + Path("pred_conn_bad") + " --kernel-rows dti:fa=" + Path("pre_rows_short.tsv"));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("kernel dti:fa: no column for " + std::to_string(n - 1) + " of the " + std::to_string(n) + " training subjects"));
  r = RunCli("predict " + results + "/model " + Path("conn_new.tsv") + " --out " + Path("pred_conn_bad") + " --kernel-rows dti:md=" + Path("pre_rows.tsv"));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("--kernel-rows names kernel \"dti:md\", which is not a precomputed kernel of the models (theirs: dti:fa)"));
  EXPECT_FALSE(fs::exists(Path("pred_conn_bad")));
}

/// Two predict runs on the same subjects (a training site under its own and under a new name) give the same decision
/// values, to 1e-8 relative: the new site's ComBat estimates are the training site's to the iteration's 1e-10 change.
void ExpectSameDecisions(const std::string& knownTable, const std::string& estimatedTable) {
  const Rows known = ReadTsv(knownTable), estimated = ReadTsv(estimatedTable);
  ASSERT_EQ(known.size(), estimated.size());
  const std::size_t decision = Col(known, "decision");
  for (std::size_t i = 1; i < known.size(); ++i) {
    const double want = std::stod(known[i][decision]);
    EXPECT_NEAR(std::stod(estimated[i][decision]), want, 1e-8 * std::max(1.0, std::abs(want))) << known[i][0];
  }
}

/// The rows of `cohort`'s table whose site is in `sites`, images as absolute paths, each site renamed as `rename` says.
void WriteSiteRows(const std::string& cohort, const std::set<std::string>& sites, const std::map<std::string, std::string>& rename, const std::string& path) {
  const Rows part = ReadTsv(cohort + "/participants.tsv");
  std::set<std::string> ids;
  const std::size_t site = Col(part, "site");
  for (std::size_t r = 1; r < part.size(); ++r)
    if (sites.count(part[r][site])) ids.insert(part[r][0]);
  WriteSubset(cohort, ids, path);
  Rows rows = ReadTsv(path);
  std::string text;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (r > 0 && rename.count(rows[r][site])) rows[r][site] = rename.at(rows[r][site]);
    for (std::size_t c = 0; c < rows[r].size(); ++c) text += (c ? "\t" : "") + rows[r][c];
    text += "\n";
  }
  WriteFile(path, text);
}

// A harmonised study's fold models carry each fold's ComBat fit (on its training controls here) and apply it to the
// held-out subjects' images before the covariates and centring: the study's out-of-fold decisions, as for any study.
TEST_F(PredictCli, FoldModelsReproduceNestedCvOfAHarmonisedStudy) {
  const std::string cohort = Cohort("sites");
  const auto results = Run("harm", cohort, R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "covariates": ["age"], "harmonisation": {"site_column": "site", "covariates": ["age"], "fit_on": {"column": "group", "value": "control"}},
    "learners": [{"name": "svm", "params": {"c": 1}}, {"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])");
  ExpectFoldModelsReproduce(results, cohort, 2, true);
  const auto card = nlohmann::json::parse(ReadFile(results + "/model/Svm/model.json"));
  const auto& h = card.at("sources").at(0).at("harmonisation");
  EXPECT_EQ(h.at("sites"), (std::vector<std::string>{"site1", "site2", "site3"}));
  EXPECT_EQ(h.at("fit_on"), "group = control");
  EXPECT_EQ(h.at("covariates").at("numeric"), std::vector<std::string>{"age"});
}

// A tabular source harmonised inside the folds (/harmonisation/sources names it): every fold imputes its columns, fits
// ComBat on the imputed training columns and standardises what that gives; each fold model keeps the fit, so predict on
// the held-out subjects reproduces their decisions. A model trained on two sites estimates a third site's effects from
// that site's own rows: a training site's subjects presented under a new name get the same decisions back.
TEST_F(PredictCli, AHarmonisedTabularSourceTravelsToHeldOutSubjectsAndNewSites) {
  const std::string cohort = Cohort("tsites");
  const Rows table = ReadTsv(cohort + "/participants.tsv");
  const std::size_t site = Col(table, "site"), clinical = Col(table, "clinical");
  const std::map<std::string, std::pair<double, double>> effect = {{"site1", {0.0, 1.0}}, {"site2", {3.0, 2.5}}, {"site3", {-2.0, 0.5}}};
  std::string text;
  for (std::size_t r = 0; r < table.size(); ++r) {
    std::vector<std::string> row = table[r];
    if (r == 0) {
      row.insert(row.end(), {"f1", "f2"});
    } else {
      const auto [shift, scale] = effect.at(row[site]);
      row.push_back(r % 13 == 4 ? "NA" : fmt::format("{:.9g}", shift + scale * std::stod(row[clinical])));
      row.push_back(fmt::format("{:.9g}", 10 + shift + scale * std::sin(3.1 * static_cast<double>(r))));
    }
    for (std::size_t c = 0; c < row.size(); ++c) text += (c ? "\t" : "") + row[c];
    text += "\n";
  }
  WriteFile(cohort + "/participants.tsv", text);
  const std::string body = R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "harmonisation": {"site_column": "site", "sources": ["clin"]},
    "kernels": {"sources": [{"name": "mri", "kind": "images"},
      {"name": "clin", "kind": "tabular", "tabular": {"table": "TABLE", "standardise": true, "impute": "median", "groups": {"feat": ["f1", "f2"]}}}]},
    "learners": [{"name": "svm", "params": {"c": 1}}, {"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])";
  auto withTable = [&](const std::string& path) {
    std::string b = body;
    b.replace(b.find("TABLE"), 5, path);
    return b;
  };
  const auto results = Run("tharm", cohort, withTable(cohort + "/participants.tsv"));
  ExpectFoldModelsReproduce(results, cohort, 2, true);
  const auto j = nlohmann::json::parse(ReadFile(results + "/results.json"));
  EXPECT_EQ(j.at("harmonisation").at("sources"), nlohmann::json::parse(R"([{"name": "clin", "kind": "tabular", "columns": 2}])"));
  EXPECT_EQ(j.at("tabular_in_folds").at(0).at("harmonise"), true);
  const auto card = nlohmann::json::parse(ReadFile(results + "/model/Svm/model.json"));
  for (const auto& source : card.at("sources")) {
    EXPECT_EQ(source.contains("harmonisation"), source.at("kind") == "tabular") << source.at("kind");  // the images are not harmonised
    if (source.at("kind") == "tabular") {
      EXPECT_EQ(source.at("harmonisation").at("sites"), (std::vector<std::string>{"site1", "site2", "site3"}));
    }
  }
  // Trained on sites 1 and 2; site 1's subjects under a new site name have that site's effects estimated from them.
  WriteSiteRows(cohort, {"site1", "site2"}, {}, Path("tsites_train.tsv"));
  WriteFile(Path("tharm_new.json"), R"({"name": "tharm_new", "subjects": {"table": ")" + Path("tsites_train.tsv") + R"("}, "atlas": "aal",
    "output": {"weight_maps": false}, "seed": 7, )" + withTable(Path("tsites_train.tsv")) + "}");
  auto r = RunCli("run " + Path("tharm_new.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  WriteSiteRows(cohort, {"site1"}, {}, Path("tsite1.tsv"));
  WriteSiteRows(cohort, {"site1"}, {{"site1", "siteX"}}, Path("tsiteX.tsv"));
  const std::string model = Path("results/tharm_new/model/EnmklSvm");
  r = RunCli("predict " + model + " " + Path("tsite1.tsv") + " --out " + Path("tpred_site1"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  r = RunCli("predict " + model + " " + Path("tsiteX.tsv") + " --out " + Path("tpred_siteX"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("source clin: site \"siteX\" is not among the model's training sites (site1, site2); its ComBat effects were "
                                  "estimated from its"));
  // The new site's estimates are the training site's to the iteration's 1e-10 relative change.
  ExpectSameDecisions(Path("tpred_site1/predictions.tsv"), Path("tpred_siteX/predictions.tsv"));
  r = RunCli("predict " + model + " " + Path("tsiteX.tsv") + " --new-sites refuse --out " + Path("tpred_refused"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("source clin: subjects of site(s) \"siteX\""));
  EXPECT_FALSE(fs::exists(Path("tpred_refused")));
}

// A site the model never saw: its effects are estimated from its own subjects. Empirical Bayes estimates each site from
// its own rows (priors over that site's voxels), so a training site's own subjects presented as a new site must get
// that site's estimates back, and the same decisions, through the whole path (images, covariates, estimation).
TEST_F(PredictCli, AHarmonisedModelEstimatesANewSitesEffectsFromItsOwnSubjects) {
  const std::string cohort = Cohort("sites");
  WriteSiteRows(cohort, {"site1", "site2"}, {}, Path("sites_train.tsv"));
  WriteFile(Path("harm_new.json"), R"({"name": "harm_new", "subjects": {"table": ")" + Path("sites_train.tsv") + R"("}, "atlas": "aal",
    "output": {"weight_maps": false}, "seed": 7, "target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "harmonisation": {"site_column": "site", "covariates": ["age"]}, "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]})");
  auto r = RunCli("run " + Path("harm_new.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::string model = Path("results/harm_new/model/EnmklSvm");
  WriteSiteRows(cohort, {"site1"}, {}, Path("site1.tsv"));
  WriteSiteRows(cohort, {"site1"}, {{"site1", "siteX"}}, Path("siteX.tsv"));
  const std::size_t site1Count = ReadTsv(Path("site1.tsv")).size() - 1;
  r = RunCli("predict " + model + " " + Path("site1.tsv") + " --out " + Path("pred_site1"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  r = RunCli("predict " + model + " " + Path("siteX.tsv") + " --out " + Path("pred_siteX"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("source images: site \"siteX\" is not among the model's training sites (site1, site2); its ComBat "
                                              "effects were estimated from its {} subjects",
                                              site1Count)));
  // The same sums over the same voxels; the iteration stops at a relative change of 1e-10.
  ExpectSameDecisions(Path("pred_site1/predictions.tsv"), Path("pred_siteX/predictions.tsv"));
  const auto summary = nlohmann::json::parse(ReadFile(Path("pred_siteX/summary.json")));
  EXPECT_THAT(summary.dump(), HasSubstr("siteX"));

  // Refused when asked, below the minimum count, and for a subject without a site: exit 2, no output.
  WriteSiteRows(cohort, {"site3"}, {}, Path("site3.tsv"));
  const std::size_t site3Count = ReadTsv(Path("site3.tsv")).size() - 1;
  const std::vector<std::pair<std::string, std::string>> refusals = {
      {" --new-sites refuse", "subjects of site(s) \"site3\" (" + std::to_string(site3Count) + " subjects) that the model was not trained on"},
      {" --new-site-min " + std::to_string(site3Count + 1),
       fmt::format("{} found, at least {} needed (--new-site-min)", site3Count, site3Count + 1)},
      {" --new-site-reference group=nobody", "site \"site3\" is not among the model's training sites (site1, site2), and its effects are estimated "
                                             "from its own subjects with group = nobody: 0 found"}};
  for (const auto& [options, message] : refusals) {
    r = RunCli("predict " + model + " " + Path("site3.tsv") + " --out " + Path("pred_refused") + options);
    EXPECT_EQ(r.exitCode, 2) << options << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr(message)) << options;
    EXPECT_FALSE(fs::exists(Path("pred_refused"))) << options;
  }
  Rows rows = ReadTsv(Path("site3.tsv"));
  rows[2][Col(rows, "site")] = "n/a";
  std::string text;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) text += (c ? "\t" : "") + row[c];
    text += "\n";
  }
  WriteFile(Path("site3_missing.tsv"), text);
  r = RunCli("predict " + model + " " + Path("site3_missing.tsv") + " --out " + Path("pred_refused"));
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("1 subjects have no value in the site column \"site\" that the model harmonises by: " + rows[2][0]));
}

// A covariate level the model never saw, estimated from its own subjects (--unseen-levels estimate): their prepared images
// are centred on their own mean. With least squares on every training subject, each training level's residual images
// average to zero, so a training level's subjects presented under a new name get that level's correction back.
TEST_F(PredictCli, AnUnseenCovariateLevelIsEstimatedFromItsOwnSubjects) {
  const std::string cohort = Cohort("sites");
  const auto results = Run("cov_site", cohort, R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "covariates": {"columns": ["age"], "categorical": ["site"]}, "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}])");
  const std::string model = results + "/model/EnmklSvm";
  WriteSiteRows(cohort, {"site1"}, {}, Path("cov_site1.tsv"));
  WriteSiteRows(cohort, {"site1"}, {{"site1", "siteX"}}, Path("cov_siteX.tsv"));
  auto r = RunCli("predict " + model + " " + Path("cov_site1.tsv") + " --out " + Path("pred_cov_site1"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  r = RunCli("predict " + model + " " + Path("cov_siteX.tsv") + " --out " + Path("pred_cov_siteX") + " --unseen-levels estimate");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const std::size_t count = ReadTsv(Path("cov_site1.tsv")).size() - 1;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("covariate level(s) site = siteX are not among the model's training levels: their effect was "
                                              "estimated from the mean of their {} subjects",
                                              count)));
  EXPECT_EQ(nlohmann::json::parse(ReadFile(Path("pred_cov_siteX/summary.json"))).at("unseen_levels"), "estimate");
  const Rows known = ReadTsv(Path("pred_cov_site1/predictions.tsv")), estimated = ReadTsv(Path("pred_cov_siteX/predictions.tsv"));
  ASSERT_EQ(known.size(), estimated.size());
  for (std::size_t i = 1; i < known.size(); ++i) {
    const double want = std::stod(known[i][Col(known, "decision")]);
    // The same voxels and coefficients; the residuals' mean is zero up to rounding.
    EXPECT_NEAR(std::stod(estimated[i][Col(estimated, "decision")]), want, 1e-9 * std::max(1.0, std::abs(want))) << known[i][0];
  }
  r = RunCli("predict " + model + " " + Path("cov_siteX.tsv") + " --out " + Path("pred_cov_bad") + " --unseen-levels estimate --new-site-min " +
             std::to_string(count + 1));
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr(fmt::format("site = siteX that the model was not trained with: {} subjects to estimate their effect from, at "
                                              "least {} needed",
                                              count, count + 1)));
  EXPECT_FALSE(fs::exists(Path("pred_cov_bad")));
}

// The final model of one simulated cohort applied to an independent cohort with the same effect (another
// seed): its accuracy lies within the nested CV's Wilson 95 % interval (observed: nested CV 0.850
// [0.739, 0.919], new cohort 0.800).
TEST_F(PredictCli, IndependentCohortScoresWithinNestedCvInterval) {
  const auto results = Run("trainA", Cohort("trainA"), R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "learners": [{"name": "svm", "params": {"c": 1}}])");
  const auto r = RunCli("predict " + results + "/model " + Cohort("newB") + "/participants.tsv --out " + Path("predB") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("balanced accuracy"));
  // Its subjects share the training cohort's ids (sub-0001, ...) but not its images: new subjects, scored.
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("among its training subjects")));
  const auto summary = nlohmann::json::parse(ReadFile(Path("predB") + "/summary.json"));
  const auto card = nlohmann::json::parse(ReadFile(results + "/model/Svm/model.json"));
  const double accuracy = summary.at("performance").at("svm").at("accuracy");
  const auto& pooled = card.at("expected_performance").at("pooled");
  EXPECT_GE(accuracy, pooled.at("accuracy_ci95_low").get<double>());
  EXPECT_LE(accuracy, pooled.at("accuracy_ci95_high").get<double>());
  EXPECT_GT(accuracy, 0.65);  // not chance: the signal transfers
  const Rows pred = ReadTsv(Path("predB") + "/predictions.tsv");
  EXPECT_EQ(pred.size(), 61u);
  EXPECT_EQ(pred[1][Col(pred, "model")], "final");
  // The same subjects given as a study file (its table and image column) give the same predictions.
  const auto c = RunCli("predict " + results + "/model/Svm " + Cohort("newB") + "/study.json --out " + Path("predB2") + " -q");
  ASSERT_EQ(c.exitCode, 0) << c.output;
  EXPECT_EQ(ReadFile(Path("predB2") + "/predictions.tsv"), ReadFile(Path("predB") + "/predictions.tsv"));
}

// New subjects with NaN voxels where the model has weights (drop_voxel: treated as the training mean): one warning
// per subject and model, in the table's order, whatever the threads (they came in the order the threads finished).
TEST_F(PredictCli, NonFiniteVoxelWarningsDoNotDependOnTheThreadCount) {
  const auto results = Run("nan", Cohort("nan"), R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "learners": [{"name": "svm", "params": {"c": 1}}])");
  std::vector<std::string> summaries;
  for (const char* threads : {"1", "2"}) {
    const std::string out = Path(std::string("pred_nan_") + threads);
    const auto r = RunCli("predict " + results + "/model " + Cohort("nanNew") + "/participants.tsv --out " + out + " --threads " + threads + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    auto summary = nlohmann::json::parse(ReadFile(out + "/summary.json"));
    std::vector<std::string> nanWarnings;
    for (const auto& w : summary.at("warnings"))
      if (w.get<std::string>().find("NaN or infinite") != std::string::npos) nanWarnings.push_back(w);
    ASSERT_EQ(nanWarnings.size(), 24u) << "one per subject";
    for (std::size_t i = 0; i < nanWarnings.size(); ++i) EXPECT_THAT(nanWarnings[i], HasSubstr(fmt::format("subject sub-{:04d}:", i + 1)));
    summary.erase("seconds");
    summary.erase("date");
    summaries.push_back(summary.dump());
  }
  EXPECT_EQ(summaries[0], summaries[1]);
}

// Optional model.json slots filled by hand: Platt probabilities and linear bias correction.
TEST_F(PredictCli, CalibrationAndBiasCorrectionSlotsAreApplied) {
  const std::string results = Cls();
  auto model = neuromkl::exporting::ReadModel(results + "/model/Svm");
  model.calibration = std::make_pair(-2.0, 0.5);
  neuromkl::exporting::WriteModel(Path("calibrated"), model);
  auto r = RunCli("predict " + Path("calibrated") + " " + Cohort("cls") + "/participants.tsv --out " + Path("predCal") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  Rows pred = ReadTsv(Path("predCal") + "/predictions.tsv");
  for (std::size_t p = 1; p < pred.size(); ++p) {
    const double f = std::stod(pred[p][Col(pred, "decision")]);
    EXPECT_NEAR(std::stod(pred[p][Col(pred, "probability")]), 1.0 / (1.0 + std::exp(-2.0 * f + 0.5)), 1e-12);
  }
  const std::string reg = Reg();
  auto regModel = neuromkl::exporting::ReadModel(reg + "/model/Krr");
  regModel.biasCorrection = std::make_pair(0.5, 0.25);
  neuromkl::exporting::WriteModel(Path("corrected"), regModel);
  r = RunCli("predict " + Path("corrected") + " " + Cohort("reg") + "/participants.tsv --out " + Path("predCorr") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  pred = ReadTsv(Path("predCorr") + "/predictions.tsv");
  for (std::size_t p = 1; p < pred.size(); ++p) {
    const double f = std::stod(pred[p][Col(pred, "prediction")]), y = std::stod(pred[p][Col(pred, "target")]);
    const double corrected = std::stod(pred[p][Col(pred, "prediction_corrected")]);
    EXPECT_NEAR(corrected, (f - 0.25) / 0.5, 1e-12 * (1 + std::abs(corrected)));
    EXPECT_NEAR(std::stod(pred[p][Col(pred, "gap")]), f - y, 1e-12 * (1 + std::abs(f - y)));
    EXPECT_NEAR(std::stod(pred[p][Col(pred, "gap_corrected")]), corrected - y, 1e-12 * (1 + std::abs(corrected - y)));
  }
}

// Bad inputs: exit 2, a message naming the file and what was expected, and no output folder.
TEST_F(PredictCli, BadInputsExitTwoWithClearMessagesAndNoOutput) {
  const std::string results = Cls();
  const std::string model = results + "/model/Svm";
  auto expectBad = [&](const std::string& modelDir, const std::string& table, const std::vector<std::string>& words) {
    const std::string out = Path("bad_out");
    const auto r = RunCli("predict " + modelDir + " " + table + " --out " + out);
    EXPECT_EQ(r.exitCode, 2) << r.output;
    for (const auto& w : words) EXPECT_THAT(r.output, HasSubstr(w));
    EXPECT_FALSE(fs::exists(out)) << "partial output left behind";
  };
  // An image on another grid (a coarser simulated cohort): names the file, the expected and the found grid.
  expectBad(model, Cohort("coarse") + "/participants.tsv", {"predict:GridMismatch", "sub-0001", "expected", "found", "spacing"});
  // A table without the model's image column.
  WriteFile(Path("noimage.tsv"), "subject\tgroup\nsub-0001\tpatient\n");
  expectBad(model, Path("noimage.tsv"), {"noimage.tsv", "\"image\""});
  // A covariate column the model needs is missing (regression model with covariates [age]).
  expectBad(Reg() + "/model/Krr", Cohort("cls") + "/participants.tsv", {"\"age\""});
  // A model whose array file is missing, and one whose model.json is corrupt.
  fs::copy(model, Path("broken"), fs::copy_options::recursive);
  fs::remove(Path("broken") + "/images0_weights.npy");
  expectBad(Path("broken"), Cohort("cls") + "/participants.tsv", {"model:Missing", "images0_weights.npy"});
  fs::copy(model, Path("corrupt"), fs::copy_options::recursive);
  WriteFile(Path("corrupt") + "/model.json", ReadFile(model + "/model.json").substr(0, 200));
  expectBad(Path("corrupt"), Cohort("cls") + "/participants.tsv", {"model:Corrupt", "model.json", "not valid JSON"});
  // An edited array (the checksum in model.json no longer matches).
  fs::copy(model, Path("edited"), fs::copy_options::recursive);
  WriteFile(Path("edited") + "/coef.npy", ReadFile(Path("edited") + "/coef.npy") + "x");
  expectBad(Path("edited"), Cohort("cls") + "/participants.tsv", {"model:Corrupt", "coef.npy", "checksum"});
  // An edited model card: model.json carries the checksum of its own content, as each array has one (a changed bias
  // shifted every prediction silently).
  fs::copy(model, Path("edited_card"), fs::copy_options::recursive);
  auto card = nlohmann::json::parse(ReadFile(model + "/model.json"));
  ASSERT_TRUE(card.contains("bias")) << card.dump();
  card["bias"] = card["bias"].is_array() ? card["bias"] : nlohmann::json(card["bias"].get<double>() + 0.5);
  if (card["bias"].is_array()) card["bias"][0] = card["bias"][0].get<double>() + 0.5;
  WriteFile(Path("edited_card") + "/model.json", card.dump(2));
  expectBad(Path("edited_card"), Cohort("cls") + "/participants.tsv", {"model:Corrupt", "model.json", "card_xxh3", "was edited or damaged"});
  // Re-indenting the card alone changes nothing it says: accepted.
  fs::copy(model, Path("reindented"), fs::copy_options::recursive);
  WriteFile(Path("reindented") + "/model.json", nlohmann::json::parse(ReadFile(model + "/model.json")).dump(4));
  EXPECT_EQ(RunCli("predict " + Path("reindented") + " " + Cohort("cls") + "/participants.tsv --out " + Path("reindented_out") + " -q").exitCode, 0);
  // A subject listed twice would be scored (and counted in the metrics) twice.
  const std::string table = ReadFile(Cohort("cls") + "/participants.tsv");
  const std::string firstRow = table.substr(table.find('\n') + 1, table.find('\n', table.find('\n') + 1) - table.find('\n'));
  WriteFile(Cohort("cls") + "/twice.tsv", table + firstRow);
  expectBad(model, Cohort("cls") + "/twice.tsv", {"table:DuplicateId", "twice.tsv", "appears twice (lines 2 and 42)"});
  // No model at all.
  expectBad(Cohort("cls"), Cohort("cls") + "/participants.tsv", {"model:Missing"});
}

// Predicting the subjects a model was trained on (model.json lists them) gave a near-perfect score beside the expected
// one, without a word. Such predictions are in-sample: they are marked, and left out of the metrics.
TEST_F(PredictCli, TrainingSubjectsAreMarkedAndLeftOutOfTheMetrics) {
  const std::string model = Cls() + "/model/Svm";
  auto r = RunCli("predict " + model + " " + Cohort("cls") + "/participants.tsv --out " + Path("pred_training"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("model svm (final): 40 of the 40 subjects were among its training subjects"));
  EXPECT_THAT(r.output, HasSubstr("no metrics: every subject with a target was among the model's training subjects"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("balanced accuracy")));
  const Rows pred = ReadTsv(Path("pred_training") + "/predictions.tsv");
  for (std::size_t p = 1; p < pred.size(); ++p) EXPECT_EQ(pred[p][Col(pred, "in_training")], "yes");
  const auto summary = nlohmann::json::parse(ReadFile(Path("pred_training") + "/summary.json"));
  EXPECT_FALSE(summary.contains("performance") && summary["performance"].contains("svm")) << summary.dump();
  // A fold model scores its held-out subjects as new ones: those keep their metrics, its training subjects do not.
  const auto foldCard = nlohmann::json::parse(ReadFile(model + "/folds/1/model.json"));
  const auto trainingIds = foldCard.at("training").at("subjects").get<std::vector<std::string>>();
  r = RunCli("predict " + model + "/folds/1 " + Cohort("cls") + "/participants.tsv --out " + Path("pred_fold"));
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(fmt::format("{} of the 40 subjects were among its training subjects", trainingIds.size())));
  EXPECT_THAT(r.output, HasSubstr(fmt::format("on {} subjects", 40 - trainingIds.size())));
}

// /output/model false: no model/ folder (and the resolved study says so).
TEST_F(PredictCli, ModelOutputCanBeSwitchedOff) {
  const auto results = Run("nomodel", Cohort("cls"), R"("target": {"column": "group", "task": "classification", "positive_class": "patient"},
    "learners": [{"name": "svm", "params": {"c": 1}}])", R"({"weight_maps": false, "model": false})");
  EXPECT_TRUE(fs::exists(results + "/results.json"));
  EXPECT_FALSE(fs::exists(results + "/model"));
  EXPECT_THAT(ReadFile(results + "/study.resolved.json"), HasSubstr("\"model\": false"));
}

}  // namespace
