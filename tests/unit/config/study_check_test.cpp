// CheckStudyConfig refuses an invalid study whoever made it: a program (no JSON source; the error
// names the JSON pointer the value would have), the JSON reader, and batch expansion.
#include <gmock/gmock.h>

#include "neuromkl/config/batch_config.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "testing.hpp"

using namespace neuromkl;
using ::testing::HasSubstr;

namespace {

/// A valid study made in code, as a program or a binding would make it.
config::StudyConfig MadeInCode() {
  config::StudyConfig s;
  s.name = "coded";
  s.subjects.table = "/data/participants.tsv";
  s.target.column = "dx";
  s.target.task = learners::Task::Classification;
  config::LearnerSpec l;
  l.name = "svm";
  l.label = "svm";
  l.params = learners::ResolveParams("svm", {});
  s.learners.push_back(l);
  s.output.dir = "/data/results/coded";
  s.output.cacheDir = "/data/.neuromkl_cache";
  return s;
}

/// CheckStudyConfig's message for `s` ("" when it passes); every refusal is a bad-input error.
std::string CheckError(const config::StudyConfig& s) {
  try {
    config::CheckStudyConfig(s);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.ExitCode(), kExitBadInput);
    return e.what();
  }
  return "";
}

TEST(CheckStudyConfig, AStudyMadeInCodeIsRefusedAtTheValuesJsonPointer) {
  ASSERT_EQ(CheckError(MadeInCode()), "");
  {
    auto s = MadeInCode();
    s.learners[0].params["c"] = -1;
    EXPECT_EQ(CheckError(s), "/learners/0/params/c: expected a value in (0, inf), found -1");
    s.path = "made.json";  // a study with a source names it
    EXPECT_EQ(CheckError(s), "made.json: /learners/0/params/c: expected a value in (0, inf), found -1");
  }
  {
    auto s = MadeInCode();
    s.learners[0].grid["c"] = {1, 0};
    EXPECT_EQ(CheckError(s), "/learners/0/grid/c/1: expected a value in (0, inf), found 0");
  }
  {
    auto s = MadeInCode();
    s.threads = 5000;
    EXPECT_EQ(CheckError(s), "/threads: expected an integer in [0, 4096], found 5000 (number)");
  }
  {
    auto s = MadeInCode();
    s.target.task = learners::Task::Regression;
    EXPECT_THAT(CheckError(s), HasSubstr("/learners/0/name: learner \"svm\" does not do regression"));
  }
  {
    auto s = MadeInCode();
    s.learners.push_back(s.learners[0]);
    EXPECT_EQ(CheckError(s), "/learners/1: two learners share the label \"svm\"; give each a distinct \"label\"");
    s.learners.clear();
    EXPECT_EQ(CheckError(s), "/learners: expected a non-empty array of learners, e.g. [{\"name\": \"enmkl_svm\"}]");
  }
  {
    auto s = MadeInCode();
    s.cv.inner.scheme = config::CvScheme::GroupKFold;
    EXPECT_THAT(CheckError(s), HasSubstr("/cv/inner/group_column: scheme \"group_kfold\" needs a group_column"));
  }
  {
    auto s = MadeInCode();
    s.covariates.columns = {"age", "dx"};
    EXPECT_THAT(CheckError(s), HasSubstr("/covariates: the target column \"dx\" cannot be a covariate"));
    s.covariates.columns = {"age", "age"};
    EXPECT_EQ(CheckError(s), "/covariates/columns/1: column \"age\" is listed twice");
  }
  {
    auto s = MadeInCode();
    s.kernels.source = config::KernelSource::Sources;
    config::SourceSpec a;
    a.name = "pet";
    s.kernels.sources = {a, a};
    EXPECT_EQ(CheckError(s), "/kernels/sources/1/name: two sources are named \"pet\"; give each a distinct name");
    s.kernels.sources[1].name = "mri scan";
    EXPECT_THAT(CheckError(s), HasSubstr("/kernels/sources/1/name: a source name made of letters"));
  }
  {
    auto s = MadeInCode();
    s.atlas.builtin = "aal3";
    EXPECT_EQ(CheckError(s), "/atlas: unknown built-in atlas \"aal3\"; built in: aal; did you mean \"aal\"?");
  }
}

// The JSON reader ends in the same check: a file and the same study made in code give the same error.
TEST(CheckStudyConfig, TheJsonReaderAndAStudyMadeInCodeGiveTheSameError) {
  const std::string text = R"({"name": "coded", "subjects": {"table": "/data/participants.tsv"}, "target": {"column": "dx", "task": "classification"},
    "cv": {"outer": {"scheme": "leave_one_group_out"}}, "learners": [{"name": "svm"}]})";
  std::string fromFile;
  try {
    config::ParseStudyConfig(text, "/data", "study.json");
  } catch (const ConfigError& e) {
    fromFile = e.what();
  }
  EXPECT_THAT(fromFile, HasSubstr("study.json: /cv/outer/group_column"));
  auto s = MadeInCode();
  s.path = "study.json";
  s.cv.outer.scheme = config::CvScheme::LeaveOneGroupOut;
  EXPECT_EQ(CheckError(s), fromFile);
  // Reading alone does not apply the rule; checking what was read does.
  const auto read = config::ReadStudyConfig(text, "/data", "study.json");
  EXPECT_EQ(CheckError(read), fromFile);
}

// Batch expansion builds each study from the base, the overrides and the axis entries: a combination the
// overrides make invalid is refused by CheckStudyConfig, named by the study; the others stay valid.
TEST(CheckStudyConfig, BatchExpansionIsRefusedByTheSameCheckWithTheStudysName) {
  neuromkl::testing::TempDir dir;
  neuromkl::testing::WriteFile(dir / "b.json", R"({"name": "b",
    "overrides": {"covariates": ["age"]},
    "matrix": {"base": {"subjects": {"table": "p.tsv"}, "target": {"column": "dx", "task": "classification"}, "learners": [{"name": "svm"}]},
               "targets": [{"name": "dx", "column": "dx", "task": "classification"}, {"name": "age", "column": "age", "task": "regression"}],
               "learners": [{"name": "krr"}, {"name": "kelm"}]}})");
  const auto batch = config::LoadBatchConfig(dir / "b.json");
  ASSERT_EQ(batch.studies.size(), 4u);
  for (const auto& s : batch.studies) {
    if (s.axes.at("target") == "dx") {
      EXPECT_TRUE(s.error.empty()) << s.name << ": " << s.error;
      continue;
    }
    // The override's covariate is the target of the "age" studies.
    EXPECT_THAT(s.error, HasSubstr("(study \"" + s.name + "\", " + s.origin + "): /covariates: the target column \"age\" cannot be a covariate"));
    const std::string source = (dir / "b.json") + " (study \"" + s.name + "\", " + s.origin + ")";
    EXPECT_EQ(CheckError(config::ReadStudyConfig(s.studyJson, batch.baseDir, source)), s.error);
  }
}

}  // namespace

namespace {

/// MadeInCode with kernels.sources: images "gm", tabular "clin", precomputed "dti".
config::StudyConfig WithSources() {
  auto s = MadeInCode();
  s.kernels.source = config::KernelSource::Sources;
  config::SourceSpec gm, clin, dti;
  gm.name = "gm";
  gm.kind = config::KernelSource::Images;
  clin.name = "clin";
  clin.kind = config::KernelSource::Tabular;
  clin.tabular.table = "/data/clinical.tsv";
  clin.tabular.groups = {{"cognition", {"mmse"}}};
  dti.name = "dti";
  dti.kind = config::KernelSource::Precomputed;
  dti.precomputed = {{"fa", "/data/fa.npy"}};
  s.kernels.sources = {gm, clin, dti};
  s.harmonisation.siteColumn = "site";
  return s;
}

TEST(CheckStudyConfig, HarmonisationNamesImageAndTabularSourcesOnly) {
  auto s = WithSources();
  s.harmonisation.sources = {"gm", "clin"};
  EXPECT_EQ(CheckError(s), "");
  s.harmonisation.sources = {"dti"};
  EXPECT_EQ(CheckError(s), "/harmonisation/sources/0: expected the name of an image or tabular source of /kernels/sources (gm, clin), found \"dti\" (string)");
  s.kernels.sources = {s.kernels.sources[2]};  // only a precomputed source: nothing ComBat can act on
  s.harmonisation.sources.clear();
  EXPECT_THAT(CheckError(s), HasSubstr("/harmonisation: harmonisation applies to image sources (ComBat on their voxels) and tabular sources"));
}

TEST(CheckStudyConfig, FoldFormedTabularKernelsNeedFloat64) {
  auto s = WithSources();
  s.harmonisation.siteColumn.clear();
  s.kernels.precision = config::KernelPrecision::Float32;
  EXPECT_EQ(CheckError(s), "");  // the tabular columns as they are: the compact store holds their kernels
  s.kernels.sources[1].tabular.imputeMedian = true;
  EXPECT_THAT(CheckError(s), HasSubstr("/kernels/sources/1/tabular/impute: the folds form a standardised or imputed tabular source's kernels"));
  s.kernels.sources[1].tabular.standardise = true;
  EXPECT_THAT(CheckError(s), HasSubstr("/kernels/sources/1/tabular/standardise: "));
}

}  // namespace

// The feature form's learners: svm, krr, ENMKL, and SimpleMKL for classification (its C-SVC; its epsilon-SVR has none).
TEST(WhyNoFeatureForm, NamesTheLearnerThatHasNone) {
  config::StudyConfig s = MadeInCode();
  EXPECT_EQ(config::WhyNoFeatureForm(s).pointer, "");
  s.learners[0].name = "simplemkl";
  EXPECT_EQ(config::WhyNoFeatureForm(s).pointer, "");
  s.target.task = learners::Task::Regression;
  const auto regression = config::WhyNoFeatureForm(s);
  EXPECT_EQ(regression.pointer, "/learners/0/name");
  EXPECT_THAT(regression.reason, HasSubstr("classification"));
  s.learners[0].name = "kelm";
  EXPECT_EQ(config::WhyNoFeatureForm(s).pointer, "/learners/0/name");
  EXPECT_THAT(config::WhyNoFeatureForm(s).reason, HasSubstr("simplemkl"));
}

// Covariates are removed on features as on kernels; ComBat's per-voxel site scale has no feature form here.
TEST(WhyNoFeatureForm, CovariatesHaveOneHarmonisationHasNone) {
  config::StudyConfig s = MadeInCode();
  s.covariates.columns = {"age"};
  s.covariates.categorical = {"sex"};
  EXPECT_EQ(config::WhyNoFeatureForm(s).pointer, "");
  s.harmonisation.siteColumn = "site";
  EXPECT_EQ(config::WhyNoFeatureForm(s).pointer, "/harmonisation");
}
