// The output folder as a BIDS derivative (docs/outputs.md): dataset_description.json, voxel maps named
// with entities and a JSON sidecar each, "n/a" for missing TSV values, and a CITATION.md methods
// paragraph built from the run.
#include <filesystem>
#include <regex>
#include <set>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "neuromkl/export/citation.hpp"
#include "neuromkl/export/derivative.hpp"
#include "testing.hpp"

using neuromkl::testing::ReadFile;
using neuromkl::testing::ReadTsv;
using neuromkl::testing::RunCli;
using neuromkl::testing::TempDir;
using neuromkl::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

TEST(BidsNames, LearnerLabelsBecomeUniqueAlphanumericLabels) {
  using neuromkl::exporting::BidsLabel;
  EXPECT_EQ(BidsLabel("enmkl_svm"), "EnmklSvm");
  EXPECT_EQ(BidsLabel("svm"), "Svm");
  EXPECT_EQ(BidsLabel("mkl_bp-p3.5"), "MklBpP35");
  EXPECT_EQ(BidsLabel("__"), "");
  EXPECT_EQ(neuromkl::exporting::BidsLearnerLabels({"svm", "SVM", "svm_2", "__", "Svm2"}),
            (std::vector<std::string>{"Svm", "SVM2", "Svm22", "Learner4", "Svm23"}));
  EXPECT_EQ(neuromkl::exporting::BidsLearnerLabels({"svm", "Svm", "s_vm"}), (std::vector<std::string>{"Svm", "Svm2", "SVm3"}));  // "SVm2" is "svm2" ignoring case
  EXPECT_EQ(neuromkl::exporting::MapStem("MNIColin27", "SvmFold0"), "weights/sub-group_space-MNIColin27_desc-SvmFold0_weights");
  EXPECT_EQ(neuromkl::exporting::MapStem("", "SvmMean"), "weights/sub-group_desc-SvmMean_weights");
}

TEST(Citation, RegressionRunGivesNAndRangeAndEachLearnersPapers) {
  neuromkl::exporting::RunRecord r;
  r.study = "age";
  r.version = "9.9.9";
  r.versions = {{"neuromkl", "9.9.9"}, {"eigen", "3.4.0"}};
  r.task = "regression";
  r.targetColumn = "age";
  r.labelledSubjects = {"a", "b", "c"};
  r.targets = {20, 35.5, 71};
  r.kernelSource = "tabular";
  r.outerScheme = "kfold k=3";
  r.innerScheme = "kfold k=2";
  for (const char* name : {"mkelm", "bsadmm_kelm", "dkelm", "simplemkl", "mkl_bp", "enmkl_krr"}) {
    neuromkl::exporting::LearnerRecord lr;
    lr.outcome.name = lr.outcome.label = name;
    lr.outcome.grid = {{{"c", 0.1}, {"mu", 0.5}}, {{"c", 10}, {"mu", 0.5}}};
    lr.searched = {"c"};
    r.learners.push_back(lr);
  }
  const std::string md = neuromkl::exporting::CitationMarkdown(r);
  EXPECT_THAT(md, HasSubstr("n = 3 subjects (regression of column \"age\", range 20 to 71"));
  EXPECT_THAT(md, HasSubstr("outer kfold k=3, inner kfold k=2"));
  EXPECT_THAT(md, HasSubstr("c in {0.1, 10}; mu = 0.5"));
  EXPECT_THAT(md, HasSubstr("eigen 3.4.0"));
  for (const char* ref : {"Multiple kernel extreme learning machine", "binary splitting", "Deformed kernel based extreme learning machine",
                          "SimpleMKL. Journal of Machine Learning Research", "based on p-norm", "Elastic-net multiple kernel learning",
                          "Extreme learning machine for regression", "PRoNTo: Pattern Recognition for Neuroimaging Toolbox"})
    EXPECT_THAT(md, HasSubstr(ref)) << ref;
  EXPECT_THAT(md, Not(HasSubstr("Tzourio-Mazoyer")));  // no AAL atlas in a tabular study
  EXPECT_THAT(md, Not(HasSubstr("permutations")));
}

/// A simulated study (AAL atlas, 3 outer folds, 3 permutations) whose learner labels need sanitising
/// ("svm_c1" -> "SvmC1"; "SVM-c-1" -> "SVMC1", taken ignoring case -> "SVMC12").
class DerivativeOutputs : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_EQ(RunCli("simulate --out " + (*dir_ / "c") + " --subjects 24 --downsample 3 --effect 1.2 --seed 5 -q").exitCode, 0);
    WriteFile(*dir_ / "c/study.json", R"({"name": "bidsout", "subjects": {"table": "participants.tsv"},
      "target": {"column": "group", "task": "classification", "positive_class": "patient"}, "atlas": "aal",
      "cv": {"outer": {"k": 3}, "inner": {"k": 3}}, "permutations": {"count": 3},
      "learners": [{"name": "enmkl_svm", "grid": {"c": [0.1, 10]}}, {"name": "svm", "label": "svm_c1", "params": {"c": 1}},
                   {"name": "svm", "label": "SVM-c-1", "params": {"c": 1}}]})");
    const auto r = RunCli("run " + (*dir_ / "c/study.json") + " --out " + (*dir_ / "out") + " -q");
    ASSERT_EQ(r.exitCode, 0) << r.output;
    results_ = new Json(Json::parse(ReadFile(*dir_ / "out/results.json")));
  }
  static void TearDownTestSuite() {
    delete results_;
    delete dir_;
  }
  static std::string Out(const std::string& rel) { return *dir_ / ("out/" + rel); }
  static TempDir* dir_;
  static Json* results_;
};
TempDir* DerivativeOutputs::dir_ = nullptr;
Json* DerivativeOutputs::results_ = nullptr;

TEST_F(DerivativeOutputs, DatasetDescriptionIsABidsDerivative) {
  const Json d = Json::parse(ReadFile(Out("dataset_description.json")));
  EXPECT_EQ(d["Name"], "neuromkl study bidsout");
  EXPECT_EQ(d["BIDSVersion"], "1.8.0");
  EXPECT_EQ(d["DatasetType"], "derivative");
  ASSERT_EQ(d["GeneratedBy"].size(), 1u);
  EXPECT_EQ(d["GeneratedBy"][0]["Name"], "neuromkl");
  EXPECT_EQ(d["GeneratedBy"][0]["Version"], (*results_)["neuromkl_version"]);
  EXPECT_FALSE(d.contains("SourceDatasets"));  // a subjects table, not a BIDS dataset
}

TEST_F(DerivativeOutputs, MapsFollowTheDocumentedSchemeWithASidecarEach) {
  // Weight maps and, beside each, its activation pattern (the same name ending in _pattern); per learner the atlas
  // painted with its region table (..._desc-<Learner>RegionShare_statmap, with permutations also RegionLogPFwe).
  const std::regex scheme(R"(sub-group_space-MNIColin27_desc-([A-Za-z0-9]+)_(weights|pattern|statmap)\.(nii\.gz|json))");
  std::set<std::string> images, sidecars, patternImages, patternSidecars, statmaps;
  for (const auto& e : fs::directory_iterator(Out("weights"))) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(name, m, scheme)) << name;
    if (m[2] == "weights") (m[3] == "json" ? sidecars : images).insert(m[1]);
    else if (m[2] == "pattern") (m[3] == "json" ? patternSidecars : patternImages).insert(m[1]);
    else statmaps.insert(m[1].str() + "." + m[3].str());
  }
  for (const std::string learner : {"EnmklSvm", "SvmC1", "SVMC12"})
    for (const std::string what : {"RegionShare", "RegionLogPFwe"})
      for (const std::string ext : {"nii.gz", "json"}) EXPECT_TRUE(statmaps.count(learner + what + "." + ext)) << learner << what << "." << ext;
  EXPECT_EQ(patternImages, images);
  EXPECT_EQ(patternSidecars, sidecars);
  std::set<std::string> expected;
  for (const std::string learner : {"EnmklSvm", "SvmC1", "SVMC12"}) {
    expected.insert(learner + "Mean");
    for (int k = 0; k < 3; ++k) expected.insert(learner + "Fold" + std::to_string(k));
  }
  EXPECT_EQ(images, expected);
  EXPECT_EQ(sidecars, expected);
  // results.json records the same paths as written.
  for (const auto& l : (*results_)["learners"]) {
    const std::string label = l["label"] == "enmkl_svm" ? "EnmklSvm" : l["label"] == "svm_c1" ? "SvmC1" : "SVMC12";
    EXPECT_EQ(l["weight_maps"]["mean"], "weights/sub-group_space-MNIColin27_desc-" + label + "Mean_weights.nii.gz");
    ASSERT_EQ(l["weight_maps"]["folds"].size(), 3u);
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(l["weight_maps"]["folds"][static_cast<std::size_t>(k)],
                "weights/sub-group_space-MNIColin27_desc-" + label + "Fold" + std::to_string(k) + "_weights.nii.gz");
  }
  EXPECT_THAT(ReadFile(Out("report.html")), HasSubstr("weights/sub-group_space-MNIColin27_desc-EnmklSvmMean_weights.nii.gz"));
  // The patterns configs/results.schema.json documents for these paths.
  const Json schema = Json::parse(ReadFile(neuromkl::testing::SourcePath("configs/results.schema.json")));
  const auto& props = schema["$defs"]["learner"]["properties"]["weight_maps"]["properties"];
  const std::regex meanPattern(props["mean"]["pattern"].get<std::string>()), foldPattern(props["folds"]["items"]["pattern"].get<std::string>());
  for (const auto& l : (*results_)["learners"]) {
    EXPECT_TRUE(std::regex_search(l["weight_maps"]["mean"].get<std::string>(), meanPattern)) << l["weight_maps"]["mean"];
    for (const auto& f : l["weight_maps"]["folds"]) EXPECT_TRUE(std::regex_search(f.get<std::string>(), foldPattern)) << f;
  }
}

TEST_F(DerivativeOutputs, SidecarsSayWhatEachMapIs) {
  const Json fold = Json::parse(ReadFile(Out("weights/sub-group_space-MNIColin27_desc-SvmC1Fold1_weights.json")));
  EXPECT_THAT(fold["Description"].get<std::string>(), HasSubstr("<w, x~> + bias is the decision value"));
  EXPECT_EQ(fold["Learner"], "svm_c1");
  EXPECT_EQ(fold["LearnerName"], "svm");
  EXPECT_EQ(fold["Fold"], 1);
  EXPECT_EQ(fold["Repeat"], 0);
  EXPECT_EQ(fold["ChosenParameters"]["c"], 1.0);
  const auto& f1 = (*results_)["learners"][1]["folds"][1];
  EXPECT_EQ(fold["TrainingSubjects"], f1["n_train"]);
  EXPECT_DOUBLE_EQ(fold["Bias"].get<double>(), f1["bias"].get<double>());
  EXPECT_EQ(fold["Units"], "decision value per unit of image intensity");
  EXPECT_THAT(fold["Normalisation"].get<std::string>(), HasSubstr("weight_maps_unit_norm = false"));
  EXPECT_THAT(fold["KernelCentring"].get<std::string>(), HasSubstr("training subjects"));
  EXPECT_THAT(fold["KernelNormalisation"].get<std::string>(), HasSubstr("cosine"));
  EXPECT_EQ(fold["IntensityScaling"], "none");
  EXPECT_EQ(fold["Atlas"], "aal");
  EXPECT_EQ(fold["Space"], "MNIColin27");
  const Json mean = Json::parse(ReadFile(Out("weights/sub-group_space-MNIColin27_desc-EnmklSvmMean_weights.json")));
  EXPECT_EQ(mean["Map"], "mean over 3 outer folds");
  EXPECT_EQ(mean["FoldsInMean"], 3);
  EXPECT_EQ(mean["Learner"], "enmkl_svm");
  EXPECT_FALSE(mean.contains("Fold"));
}

TEST_F(DerivativeOutputs, TsvFilesWriteMissingValuesAsNa) {
  int na = 0;
  for (const char* tsv : {"subjects.tsv", "regions.tsv", "metrics.tsv", "predictions.tsv", "folds.tsv", "null_distribution.tsv",
                          "regions_enmkl_svm.tsv", "regions_svm_c1.tsv"}) {
    const auto rows = ReadTsv(Out(tsv));
    ASSERT_GT(rows.size(), 1u) << tsv;
    for (const auto& row : rows)
      for (const auto& cell : row) {
        EXPECT_NE(cell, "") << tsv;
        EXPECT_NE(cell, "NA") << tsv;
        na += cell == "n/a";
      }
  }
  EXPECT_GT(na, 0);
  // Used subjects have no reason not to be used.
  const auto subjects = ReadTsv(Out("subjects.tsv"));
  EXPECT_EQ(subjects[1][1], "yes");
  EXPECT_EQ(subjects[1][3], "n/a");
}

TEST_F(DerivativeOutputs, CitationDescribesTheRunAndCitesItsLearners) {
  const std::string md = ReadFile(Out("CITATION.md"));
  int patients = 0;
  for (const auto& t : (*results_)["subjects"]["targets"]) patients += t.get<double>() > 0;
  const int n = static_cast<int>((*results_)["subjects"]["labelled"].size());
  EXPECT_THAT(md, HasSubstr("n = " + std::to_string(n) + " subjects (" + std::to_string(patients) + " patient, " + std::to_string(n - patients) +
                            " "));
  EXPECT_THAT(md, HasSubstr("outer stratified_kfold k=3, inner stratified_kfold k=3"));
  EXPECT_THAT(md, HasSubstr("with 3 permutations"));
  EXPECT_THAT(md, HasSubstr("atlas aal (" + std::to_string((*results_)["kernels"]["count"].get<int>()) + " regions"));
  EXPECT_THAT(md, HasSubstr("neuromkl " + (*results_)["neuromkl_version"].get<std::string>()));
  EXPECT_THAT(md, HasSubstr("c in {0.1, 10}"));
  for (const char* ref : {"Elastic-net multiple kernel learning", "LIBSVM: a library for support vector machines", "Working set selection",
                          "PRoNTo: Pattern Recognition for Neuroimaging Toolbox", "Tzourio-Mazoyer"})
    EXPECT_THAT(md, HasSubstr(ref)) << ref;
  EXPECT_THAT(md, Not(HasSubstr("SimpleMKL.")));  // not used in this run
}

}  // namespace
