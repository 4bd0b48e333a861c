// Kernels that do not come from images: precomputed matrices (.npy or text) and tabular feature
// groups. They make neuromkl usable for non-imaging data and every later stage testable without images.
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "neuromkl/core/npy.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/io/nifti.hpp"
#include "neuromkl/learners/learner.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;

namespace {

/// 30 subjects; feature group "signal" separates the classes, "noise" does not.
struct TabularCohort {
  TempDir dir;
  Eigen::MatrixXd signal, noise;
  TabularCohort() : signal(30, 4), noise(30, 6) {
    std::mt19937 rng(12);
    std::normal_distribution<double> n;
    std::string participants = "subject\tgroup\n", features = "subject,s1,s2,s3,s4,n1,n2,n3,n4,n5,n6\n";
    for (int i = 0; i < 30; ++i) {
      const double y = i % 2 ? 1.0 : -1.0;
      for (int c = 0; c < 4; ++c) signal(i, c) = n(rng) + 1.5 * y;
      for (int c = 0; c < 6; ++c) noise(i, c) = n(rng);
      std::string id = "p";
      id += std::to_string(i);
      participants += id;
      participants += '\t';
      participants += y > 0 ? "case" : "control";
      participants += '\n';
      features += id;
      for (int c = 0; c < 4; ++c) {
        features += ',';
        features += neuromkl::FormatDouble(signal(i, c));
      }
      for (int c = 0; c < 6; ++c) {
        features += ',';
        features += neuromkl::FormatDouble(noise(i, c));
      }
      features += '\n';
    }
    WriteFile(dir / "participants.tsv", participants);
    WriteFile(dir / "features.csv", features);
  }
};

TEST(Inputs, EveryLearnerRunsOnPrecomputedKernelsWithWeightsDecisionsAndStatus) {
  TabularCohort c;
  neuromkl::WriteNpy(c.dir / "signal.npy", c.signal * c.signal.transpose());
  // The second kernel as delimited text.
  const Eigen::MatrixXd K = c.noise * c.noise.transpose();
  std::string text;
  for (Eigen::Index i = 0; i < K.rows(); ++i) {
    for (Eigen::Index j = 0; j < K.cols(); ++j) {
      if (j) text += '\t';
      text += neuromkl::FormatDouble(K(i, j));
    }
    text += '\n';
  }
  WriteFile(c.dir / "noise.tsv", text);
  WriteFile(c.dir / "study.json", R"({"name": "pre", "subjects": {"table": "participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "case"},
    "kernels": {"source": "precomputed", "precomputed": [{"name": "signal", "file": "signal.npy"}, {"name": "noise", "file": "noise.tsv"}]},
    "cv": {"outer": {"k": 3}},
    "learners": [{"name": "svm", "params": {"c": 1}}, {"name": "krr", "params": {"lambda": 1}}, {"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}},
                 {"name": "enmkl_krr", "params": {"lambda": 1, "mu": 0.5}}, {"name": "simplemkl", "params": {"c": 1}},
                 {"name": "kelm", "params": {"c": 1}}, {"name": "mkelm", "params": {"c": 1}}, {"name": "mkl_bp", "params": {"c": 1}},
                 {"name": "bsadmm_kelm", "params": {"c": 1, "bias": 1}}, {"name": "dkelm", "params": {"c": 1, "neighbours": 5}}]})");
  const auto r = RunCli("run " + (c.dir / "study.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto results = nlohmann::json::parse(ReadFile(c.dir / "results/pre/results.json"));
  ASSERT_EQ(results["learners"].size(), neuromkl::learners::LearnerCatalog().size());
  for (const auto& l : results["learners"]) {
    for (const auto& f : l["folds"]) {
      EXPECT_EQ(f["status"], "converged") << l["label"];
      EXPECT_EQ(f["kernel_weights"].size(), 2u);
      EXPECT_EQ(f["decision_values"].size(), f["n_test"].get<std::size_t>());
    }
    EXPECT_GT(l["metrics"]["pooled"]["balanced_accuracy"].get<double>(), 0.8) << l["label"];
    if (neuromkl::learners::FindLearner(l["name"].get<std::string>())->multipleKernels) {
      EXPECT_GT(l["folds"][0]["kernel_weights"][0].get<double>(), l["folds"][0]["kernel_weights"][1].get<double>()) << l["label"];
    }
  }
  EXPECT_FALSE(std::filesystem::exists(c.dir / "results/pre/weights"));  // no images: no voxel maps
}

TEST(Inputs, TabularFeatureGroupsBecomeKernels) {
  TabularCohort c;
  WriteFile(c.dir / "study.json", R"({"name": "tab", "subjects": {"table": "participants.tsv"},
    "target": {"column": "group", "task": "classification", "positive_class": "case"},
    "kernels": {"source": "tabular", "tabular": {"table": "features.csv", "groups": {"signal": ["s1", "s2", "s3", "s4"], "noise": ["n1", "n2", "n3", "n4", "n5", "n6"]}}},
    "cv": {"outer": {"k": 3}}, "learners": [{"name": "enmkl_svm", "params": {"c": 1, "mu": 0.5}}]})");
  const auto r = RunCli("run " + (c.dir / "study.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto rows = ReadFile(c.dir / "results/tab/regions_enmkl_svm.tsv");
  EXPECT_THAT(rows.substr(rows.find('\n') + 1, 20), HasSubstr("signal"));  // ranked first
  // A tabular kernel is made of table columns, not voxels, and has no atlas label.
  const auto table = neuromkl::testing::ReadTsv(c.dir / "results/tab/regions_enmkl_svm.tsv");
  EXPECT_EQ(std::vector<std::string>(table[0].begin(), table[0].begin() + 5), (std::vector<std::string>{"rank", "label", "name", "columns", "subjects_with_signal"}));
  for (std::size_t i = 1; i < table.size(); ++i) {
    EXPECT_EQ(table[i][1], "n/a");
    EXPECT_EQ(table[i][3], table[i][2] == "signal" ? "4" : "6") << table[i][2];
  }
  // The kernels are the linear kernels of the groups (groups in name order: "noise", then "signal").
  const Eigen::MatrixXd K = neuromkl::ReadNpy(c.dir / "results/tab/kernels/k001_signal.npy");
  EXPECT_TRUE(neuromkl::testing::MatrixNear(K, c.signal * c.signal.transpose(), 1e-9, 1e-12));
}

TEST(Inputs, TabularKernelFunctionsOnEveryColumnOfATableWithoutIds) {
  // Qi, Liang & Xu's (2018) protocol on a UCI-style CSV (features, then "label"; no id column): Gaussian and
  // polynomial kernels on each column and on all columns.
  TempDir dir;
  std::string csv = "a,b,const,label\n";
  Eigen::MatrixXd X(12, 2);
  for (int i = 0; i < 12; ++i) {
    X(i, 0) = i % 2 ? 1.0 + 0.1 * i : -1.0 - 0.05 * i;
    X(i, 1) = std::sin(i);
    csv += neuromkl::FormatDouble(X(i, 0)) + "," + neuromkl::FormatDouble(X(i, 1)) + ",7," + (i % 2 ? "1" : "-1") + "\n";
  }
  WriteFile(dir / "data.csv", csv);
  WriteFile(dir / "study.json", R"({"name": "uci", "subjects": {"table": "data.csv", "id_column": "#row"},
    "target": {"column": "label", "task": "classification", "positive_class": "1"},
    "kernels": {"source": "tabular", "centre": false, "tabular": {"table": "data.csv", "id_column": "#row", "groups": "each_and_all",
      "exclude_columns": ["const"], "functions": [{"type": "gaussian", "width": [0.5, 2]}, {"type": "polynomial", "degree": 2}]}},
    "cv": {"outer": {"scheme": "repeated_kfold", "k": 2, "repeats": 2}},
    "learners": [{"name": "mkl_bp", "params": {"c": 10}}]})");
  const auto r = RunCli("run " + (dir / "study.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto index = nlohmann::json::parse(ReadFile(dir / "results/uci/kernels/index.json"));
  std::vector<std::string> names;
  for (const auto& k : index["kernels"]) names.push_back(k["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"a:gaussian(0.5)", "a:gaussian(2)", "a:poly(2)", "b:gaussian(0.5)", "b:gaussian(2)", "b:poly(2)",
                                              "all:gaussian(0.5)", "all:gaussian(2)", "all:poly(2)"}));
  // Values: subject ids are row numbers; kernel entries from the formulas on the raw columns.
  const Eigen::MatrixXd G = neuromkl::ReadNpy(dir / ("results/uci/kernels/" + index["kernels"][7]["file"].get<std::string>()));
  const Eigen::MatrixXd P = neuromkl::ReadNpy(dir / ("results/uci/kernels/" + index["kernels"][2]["file"].get<std::string>()));
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 12; ++j) {
      EXPECT_NEAR(G(i, j), std::exp(-(X.row(i) - X.row(j)).squaredNorm() / 8.0), 1e-12);
      EXPECT_NEAR(P(i, j), std::pow(X(i, 0) * X(j, 0) + 1, 2), 1e-12);
    }
  EXPECT_THAT(ReadFile(dir / "results/uci/subjects.tsv"), HasSubstr("\n12\tyes\t1"));
  // Bad kernel functions are config errors with their JSON pointer.
  WriteFile(dir / "bad.json", R"({"name": "bad", "subjects": {"table": "data.csv", "id_column": "#row"},
    "target": {"column": "label", "task": "classification"},
    "kernels": {"source": "tabular", "tabular": {"table": "data.csv", "id_column": "#row", "groups": "each_column",
      "functions": [{"type": "polynomial", "degree": [2, 2.5]}]}}, "learners": [{"name": "svm"}]})");
  const auto bad = RunCli("validate " + (dir / "bad.json"));
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_THAT(bad.output, HasSubstr("/kernels/tabular/functions/0/degree: expected positive whole degrees, found 2.5"));
}

TEST(Inputs, BadKernelInputsAreClearErrors) {
  TabularCohort c;
  auto study = [&](const std::string& kernels) {
    WriteFile(c.dir / "bad.json", R"({"name": "bad", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification"}, "kernels": )" + kernels + R"(, "learners": [{"name": "svm", "params": {"c": 1}}]})");
    return RunCli("run " + (c.dir / "bad.json") + " --force -q");
  };
  neuromkl::WriteNpy(c.dir / "small.npy", Eigen::MatrixXd::Identity(29, 29));
  auto r = study(R"({"source": "precomputed", "precomputed": [{"name": "k", "file": "small.npy"}]})");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("kernel k is 29x29, expected 30x30 (= subjects)"));
  Eigen::MatrixXd asym = Eigen::MatrixXd::Identity(30, 30);
  asym(0, 1) = 0.5;
  neuromkl::WriteNpy(c.dir / "asym.npy", asym);
  r = study(R"({"source": "precomputed", "precomputed": [{"name": "k", "file": "asym.npy"}]})");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("not symmetric"));
  r = study(R"({"source": "tabular", "tabular": {"table": "features.csv", "groups": {"g": ["s1", "s9"]}}})");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("no column \"s9\""));
  std::string holes = "subject,a\n";
  for (int i = 0; i < 30; ++i) {
    holes += 'p';
    holes += std::to_string(i);
    holes += i == 1 ? ",\n" : ",1\n";  // p1 has no value
  }
  WriteFile(c.dir / "holes.csv", holes);
  r = study(R"({"source": "tabular", "tabular": {"table": "holes.csv", "groups": {"g": ["a"]}}})");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("p1: column \"a\" holds \"\", expected a finite number"));
}

// Tabular gaps and fold statistics: a gap without impute names the way out; a training set with no value to impute a
// column from is refused before any fit, naming the fold and the column; float32 kernels cannot hold fold-formed tabular
// kernels. validate and run agree (exit 2, no results); validate and results.json state what is imputed.
TEST(Inputs, TabularGapsAndFoldStatisticsAreCheckedByValidateAndRunAlike) {
  TabularCohort c;
  // Custom folds: p0-p14 are fold 1, p15-p29 fold 2. s1 lacks p3's value; n1 has values in fold 1 only.
  std::string participants = "subject\tgroup\tfold\n", features = "subject,s1,n1\n";
  for (int i = 0; i < 30; ++i) {
    // (Appended piece by piece: GCC 12 warns of an overlap, wrongly, in a chain of "literal" + std::string.)
    std::string id = "p";
    id += std::to_string(i);
    for (const std::string& cell : {id, std::string(i % 2 ? "case" : "control"), std::string(i < 15 ? "1" : "2")}) participants += cell + '\t';
    participants.back() = '\n';
    for (const std::string& cell : {id, i == 3 ? std::string() : neuromkl::FormatDouble(c.signal(i, 0)), i < 15 ? neuromkl::FormatDouble(c.noise(i, 0)) : std::string("NA")})
      features += cell + ',';
    features.back() = '\n';
  }
  WriteFile(c.dir / "folds.tsv", participants);
  WriteFile(c.dir / "gaps.csv", features);
  auto study = [&](const std::string& name, const std::string& tabular, const std::string& precision = "float64") {
    const std::string path = c.dir / (name + ".json");
    WriteFile(path, R"({"name": ")" + name + R"(", "subjects": {"table": "folds.tsv"}, "target": {"column": "group", "task": "classification",
      "positive_class": "case"}, "kernels": {"source": "tabular", "precision": ")" + precision + R"(", "tabular": {"table": "gaps.csv", )" + tabular +
                        R"(}}, "cv": {"outer": {"scheme": "custom", "fold_column": "fold"}}, "learners": [{"name": "svm", "params": {"c": 1}}]})");
    return path;
  };
  struct Case {
    std::string name, tabular, precision, expected;
  };
  const std::vector<Case> cases = {
      {"gap_none", R"("groups": {"g": ["s1"]})", "float64",
       "subject p3: column \"s1\" holds \"\", expected a finite number (a missing value: set \"impute\": \"median\" in the tabular section to fill "
       "it inside the folds) [tabular:NotNumeric]"},
      {"gap_fold", R"("groups": {"g": ["s1", "n1"]}, "impute": "median")", "float64",
       (c.dir / "gap_fold.json") + " /kernels/tabular/impute: none of the 15 training subjects of outer fold 1 (of 2) has a value in feature column "
       "\"n1\", so its missing values there cannot be imputed (test subjects lacking it: none); fill in some of them, or use a split that spreads "
       "them [tabular:NothingToImpute]"},
      {"gap_f32", R"("groups": {"g": ["s1"]}, "standardise": true)", "float32", "/kernels/tabular/standardise: the folds form a standardised"},
  };
  for (const auto& k : cases)
    for (const std::string command : {"validate ", "run "}) {
      const auto r = RunCli(command + study(k.name, k.tabular, k.precision) + " -q");
      EXPECT_EQ(r.exitCode, 2) << command << k.name << "\n" << r.output;
      EXPECT_THAT(r.output, HasSubstr(k.expected)) << command << k.name;
      EXPECT_FALSE(std::filesystem::exists(c.dir / ("results/" + k.name))) << k.name;
    }
  const std::string ok = study("gap_ok", R"("groups": {"g": ["s1"]}, "impute": "median", "standardise": true)");
  const auto v = RunCli("validate " + ok);
  EXPECT_EQ(v.exitCode, 0) << v.output;
  EXPECT_THAT(v.output, HasSubstr("inside every fold: the columns imputed (median) and standardised (mean, SD) with the fold's training subjects' "
                                  "statistics, then its kernels formed"));
  EXPECT_THAT(v.output, HasSubstr("imputed inside the folds: s1: 1 missing"));
  const auto r = RunCli("run " + ok + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto j = nlohmann::json::parse(ReadFile(c.dir / "results/gap_ok/results.json"));
  const auto& folds = j.at("tabular_in_folds").at(0);
  EXPECT_EQ(folds.at("standardise"), true);
  EXPECT_EQ(folds.at("missing_per_column").at("s1"), 1);
  // p3 is in fold 1: a test subject of outer fold 1 and a training subject of outer fold 2.
  EXPECT_EQ(folds.at("imputed_subjects_per_outer_fold"), nlohmann::json::parse(R"([{"training": 0, "test": 1}, {"training": 1, "test": 0}])"));
}

TEST(Inputs, UnitNormWeightMapsAndSimulatedNans) {
  TempDir dir;
  ASSERT_EQ(RunCli("simulate --out " + (dir / "c") + " --subjects 20 --downsample 3 --nan-fraction 0.002 --seed 2 -q").exitCode, 0);
  WriteFile(dir / "c/unit.json", R"({"name": "unit", "subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "classification"},
    "cv": {"outer": {"k": 4}}, "output": {"weight_maps_unit_norm": true}, "learners": [{"name": "svm", "params": {"c": 1}}]})");
  const auto r = RunCli("run " + (dir / "c/unit.json") + " -q");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  const auto map = neuromkl::io::ReadVolume(dir / "c/results/unit/weights/sub-group_space-MNIColin27_desc-SvmFold1_weights.nii.gz");
  double norm = 0;
  for (float v : map.data) norm += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);  // PRoNTo-style per-fold unit norm
  // 20 images with 0.2 % NaN voxels each: the drop rule removes them and reports them per region.
  const auto regions = neuromkl::testing::ReadTsv(dir / "c/results/unit/regions.tsv");
  long nonFinite = 0;
  for (std::size_t r = 1; r < regions.size(); ++r) nonFinite += std::stol(regions[r][5]);
  EXPECT_GT(nonFinite, 0);
}

}  // namespace

namespace {

long CountLines(const std::string& text, const std::string& needle) {
  long n = 0;
  for (std::size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

TEST(Inputs, RepeatedLeaveOneOutAndGroupSchemesRunEndToEnd) {
  TabularCohort c;
  // A site column for the group schemes.
  std::string table = "subject\tgroup\tsite\n";
  for (int i = 0; i < 30; ++i) {
    table += 'p';
    table += std::to_string(i);
    table += i % 2 ? "\tcase\t" : "\tcontrol\t";
    table += "site";
    table += std::to_string(i % 5);
    table += '\n';
  }
  WriteFile(c.dir / "participants.tsv", table);
  neuromkl::WriteNpy(c.dir / "signal.npy", c.signal * c.signal.transpose());
  neuromkl::WriteNpy(c.dir / "noise.npy", c.noise * c.noise.transpose());
  auto run = [&](const std::string& name, const std::string& cv) {
    WriteFile(c.dir / (name + ".json"), R"({"name": ")" + name + R"(", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "case"},
      "kernels": {"source": "precomputed", "precomputed": [{"name": "signal", "file": "signal.npy"}, {"name": "noise", "file": "noise.npy"}]},
      "cv": )" + cv + R"(, "learners": [{"name": "enmkl_svm", "params": {"mu": 0.5}, "grid": {"c": [0.1, 10]}}]})");
    const auto r = RunCli("run " + (c.dir / (name + ".json")) + " -q");
    EXPECT_EQ(r.exitCode, 0) << r.output;
    return c.dir / ("results/" + name);
  };
  // Repeated 3-fold, 2 repeats: every subject predicted twice, 6 outer folds.
  auto out = run("rep", R"({"outer": {"scheme": "repeated_kfold", "k": 3, "repeats": 2}, "inner": {"k": 3}})");
  EXPECT_EQ(CountLines(ReadFile(out + "/predictions.tsv"), "\tenmkl_svm\t"), 60);
  EXPECT_EQ(CountLines(ReadFile(out + "/folds.tsv"), "enmkl_svm\t"), 6);
  EXPECT_THAT(ReadFile(out + "/report.html"), HasSubstr("repeated_kfold k=3 repeats=2"));
  // Leave-one-out: pooled AUC is defined, per-fold AUC is not (one subject per fold) and is left out.
  out = run("loo", R"({"outer": {"scheme": "leave_one_out"}, "inner": {"k": 3}})");
  const auto results = nlohmann::json::parse(ReadFile(out + "/results.json"));
  EXPECT_TRUE(results["learners"][0]["metrics"]["pooled"]["auc"].is_number());
  EXPECT_FALSE(results["learners"][0]["metrics"]["fold_mean"].contains("auc"));
  EXPECT_EQ(results["learners"][0]["folds"].size(), 30u);
  // Group k-fold on sites (inner too): no site in both the training and the test subjects of a fold.
  out = run("grp", R"({"outer": {"scheme": "group_kfold", "k": 5, "group_column": "site"}, "inner": {"scheme": "leave_one_group_out", "group_column": "site"}})");
  const auto grp = nlohmann::json::parse(ReadFile(out + "/results.json"));
  for (const auto& f : grp["learners"][0]["folds"]) {
    std::set<int> sites;
    for (const auto& s : f["test_subjects"]) sites.insert(std::stoi(s.get<std::string>().substr(1)) % 5);
    EXPECT_EQ(sites.size(), 1u);  // 5 sites, 5 folds: one site per fold
  }
}

}  // namespace
