#include <gmock/gmock.h>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "testing.hpp"

using namespace neuromkl;
using config::ParseStudyConfig;
using ::testing::AllOf;
using ::testing::HasSubstr;

namespace {

const char* kMinimal = R"({
  "name": "demo",
  "subjects": {"table": "participants.tsv"},
  "target": {"column": "group", "task": "classification"},
  "learners": [{"name": "enmkl_svm"}]
})";

std::string With(const std::string& extra) {
  std::string s = kMinimal;
  s.insert(s.rfind('}'), ", " + extra);
  return s;
}

void ExpectConfigError(const std::string& text, const std::vector<std::string>& pieces) {
  try {
    ParseStudyConfig(text, "/data/study", "study.json");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    for (const auto& p : pieces) EXPECT_THAT(e.what(), HasSubstr(p));
    EXPECT_EQ(e.ExitCode(), kExitBadInput);
  }
}

TEST(StudyConfig, MinimalConfigGetsDefaults) {
  const auto c = ParseStudyConfig(kMinimal, "/data/study", "study.json");
  EXPECT_EQ(c.name, "demo");
  EXPECT_EQ(c.subjects.table, "/data/study/participants.tsv");  // relative to the config's folder
  EXPECT_EQ(c.subjects.idColumn, "participant_id");  // BIDS' id column (the table does not exist here)
  EXPECT_EQ(c.atlas.builtin, "aal");
  EXPECT_EQ(c.cv.outer.scheme, config::CvScheme::StratifiedKFold);
  EXPECT_EQ(c.cv.outer.k, 5);
  EXPECT_EQ(c.cv.seed, 42u);  // the study seed
  EXPECT_EQ(c.output.dir, "/data/study/results/demo");
  ASSERT_EQ(c.learners.size(), 1u);
  EXPECT_EQ(c.learners[0].params.at("mu"), 0.5);
  EXPECT_EQ(c.learners[0].params.at("c"), 1.0);
  EXPECT_EQ(c.learners[0].label, "enmkl_svm");
}

TEST(StudyConfig, FullConfigParses) {
  const auto c = ParseStudyConfig(R"({
    "name": "full", "description": "d", "seed": 7, "threads": 2,
    "subjects": {"table": "/abs/p.csv", "id_column": "id", "image_column": "gm"},
    "target": {"column": "dx", "task": "classification", "positive_class": "AD"},
    "atlas": {"image": "atlas/my.nii.gz", "labels": "atlas/my.tsv"},
    "mask": "mask.nii",
    "kernels": {"centre": false, "normalise": true, "nan_policy": "zero", "memory_budget_mb": 512, "cache": false},
    "cv": {"outer": {"scheme": "leave_one_group_out", "group_column": "site"}, "inner": {"scheme": "kfold", "k": 3}, "seed": 99},
    "learners": [{"name": "enmkl_svm", "label": "en", "grid": {"c": [0.1, 1, 10], "mu": [0.2, 0.8]}},
                 {"name": "svm", "params": {"c": 2}}],
    "permutations": {"count": 100},
    "output": {"dir": "out", "save_kernels": false}
  })", "/d", "s.json");
  EXPECT_EQ(c.subjects.table, "/abs/p.csv");
  EXPECT_EQ(c.atlas.image, "/d/atlas/my.nii.gz");
  EXPECT_TRUE(c.atlas.builtin.empty());
  EXPECT_EQ(c.mask, "/d/mask.nii");
  EXPECT_EQ(c.kernels.nanPolicy, kernels::NanPolicy::Zero);
  EXPECT_EQ(c.cv.outer.groupColumn, "site");
  EXPECT_EQ(c.cv.seed, 99u);
  EXPECT_EQ(c.learners[0].GridSize(), 6u);
  EXPECT_EQ(c.learners[1].params.at("c"), 2.0);
  EXPECT_EQ(c.permutations.count, 100);
  EXPECT_EQ(c.output.dir, "/d/out");
  EXPECT_FALSE(c.output.saveKernels);
}

TEST(StudyConfig, UnknownKeysAreRejectedWithAHint) {
  ExpectConfigError(With(R"("learner": [])"), {"unknown key \"learner\" in /", "did you mean \"learners\""});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p.tsv", "id_colum": "s"}, "target": {"column": "g", "task": "regression"}, "learners": [{"name": "krr"}]})",
                    {"unknown key \"id_colum\" in /subjects", "did you mean \"id_column\""});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "regression"}, "learners": [{"name": "krr", "params": {"lamda": 1}}]})",
                    {"unknown key \"lamda\" in /learners/0/params", "did you mean \"lambda\""});
}

TEST(StudyConfig, TypeAndRangeErrorsNameThePointerExpectedAndFound) {
  ExpectConfigError(With(R"("cv": {"outer": {"k": "five"}})"), {"/cv/outer/k", "expected an integer", "\"five\" (string)"});
  ExpectConfigError(With(R"("cv": {"outer": {"k": 1}})"), {"/cv/outer/k", "[2, 100000]", "1 (number)"});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "classification"}, "learners": [{"name": "svm", "params": {"c": -1}}]})",
                    {"/learners/0/params/c", "(0, inf)", "found -1"});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "classification"}, "learners": [{"name": "enmkl_svm", "grid": {"mu": [0.5, 1.5]}}]})",
                    {"/learners/0/grid/mu/1", "[0, 1]", "1.5"});
  ExpectConfigError(With(R"("kernels": {"nan_policy": "zeros"})"), {"/kernels/nan_policy", "drop_voxel, zero", "did you mean \"zero\""});
  ExpectConfigError(With(R"("seed": -3)"), {"/seed", "-3"});
}

TEST(StudyConfig, MissingRequiredPartsAreErrors) {
  ExpectConfigError(R"({"subjects": {"table": "p"}, "target": {"column": "g", "task": "regression"}, "learners": [{"name": "krr"}]})", {"/name", "required"});
  ExpectConfigError(R"({"name": "x", "target": {"column": "g", "task": "regression"}, "learners": [{"name": "krr"}]})", {"/subjects"});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p"}, "target": {"column": "g"}, "learners": [{"name": "krr"}]})", {"/target/task"});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p"}, "target": {"column": "g", "task": "regression"}, "learners": []})", {"/learners", "non-empty"});
  ExpectConfigError(With(R"("cv": {"outer": {"scheme": "group_kfold"}})"), {"/cv/outer/group_column", "needs a group_column"});
  ExpectConfigError(With(R"("kernels": {"source": "precomputed"})"), {"/kernels/precomputed"});
}

TEST(StudyConfig, InconsistentChoicesAreErrors) {
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p"}, "target": {"column": "g", "task": "regression"}, "learners": [{"name": "svm"}]})",
                    {"/learners/0/name", "does not do regression", "krr"});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p"}, "target": {"column": "g", "task": "classification"}, "learners": [{"name": "svm"}, {"name": "svm", "params": {"c": 2}}]})",
                    {"/learners/1", "share the label \"svm\""});
  ExpectConfigError(R"({"name": "x", "subjects": {"table": "p"}, "target": {"column": "g", "task": "classification"}, "learners": [{"name": "svm", "params": {"c": 1}, "grid": {"c": [1, 2]}}]})",
                    {"/learners/0/grid/c", "both fixed in params and searched in grid"});
  ExpectConfigError(R"({"name": "a b", "subjects": {"table": "p"}, "target": {"column": "g", "task": "regression"}, "learners": [{"name": "krr"}]})", {"/name"});
  ExpectConfigError(With(R"("atlas": "aal3")"), {"/atlas", "unknown built-in atlas \"aal3\"", "did you mean \"aal\""});
  ExpectConfigError("{ not json", {"not valid JSON"});
}

TEST(StudyConfig, ResolvedConfigRoundTrips) {
  const auto c = ParseStudyConfig(kMinimal, "/data/study", "study.json");
  const std::string resolved = config::ResolvedConfigJson(c);
  const auto again = ParseStudyConfig(resolved, "/elsewhere", "resolved.json");
  EXPECT_EQ(config::ResolvedConfigJson(again), resolved);  // absolute paths and every default survive
}

}  // namespace

TEST(StudyConfig, BidsSubjectsAndParticipantsSidecar) {
  neuromkl::testing::TempDir dir;
  neuromkl::testing::WriteFile(dir / "ds/participants.tsv", "participant_id\tdx\nsub-01\tAD\n");
  neuromkl::testing::WriteFile(dir / "ds/participants.json", R"({"dx": {"Description": "diagnosis", "Levels": {"AD": "Alzheimer's disease", "CN": "control"}}, "age": {"Units": "y"}})");
  const auto c = ParseStudyConfig(R"({"name": "b", "subjects": {"bids": {"root": "ds", "derivatives": "derivatives/cat12", "entities": {"space": "IXI549Space", "suffix": "T1w"}}},
    "target": {"column": "dx", "task": "classification"}, "learners": [{"name": "svm"}]})", dir.Path(), "study.json");
  EXPECT_EQ(c.subjects.table, dir / "ds/participants.tsv");  // default: <root>/participants.tsv
  EXPECT_EQ(c.subjects.bids.derivatives, dir / "ds/derivatives/cat12");  // relative to root
  EXPECT_EQ(c.subjects.idColumn, "participant_id");
  ASSERT_EQ(c.subjects.bids.entities.size(), 2u);
  EXPECT_THAT(ResolvedConfigJson(c), HasSubstr("\"suffix\": \"T1w\""));
  // The reader reads the study file only: the table (its id column) and participants.json are read with
  // the cohort (tests/unit/pipeline/cohort_test.cpp), so a table with "subject" instead of participant_id
  // and a malformed sidecar change nothing here.
  neuromkl::testing::WriteFile(dir / "old.tsv", "subject\tdx\n01\tAD\n");
  const auto old = ParseStudyConfig(R"({"name": "o", "subjects": {"table": "old.tsv"}, "target": {"column": "dx", "task": "classification"}, "learners": [{"name": "svm"}]})",
                                    dir.Path(), "study.json");
  EXPECT_EQ(old.subjects.idColumn, "participant_id");
  EXPECT_FALSE(old.subjects.idColumnGiven);
  neuromkl::testing::WriteFile(dir / "ds/participants.json", R"({"dx": {"Levels": ["AD", "CN"]}})");
  EXPECT_NO_THROW(ParseStudyConfig(R"({"name": "b", "subjects": {"bids": {"root": "ds", "entities": {"suffix": "T1w"}}}, "target": {"column": "dx", "task": "classification"}, "learners": [{"name": "svm"}]})",
                                   dir.Path(), "study.json"));
}

TEST(StudyConfig, BidsAndAtlasKeysAreCheckedWithPointers) {
  const std::string target = R"("target": {"column": "g", "task": "classification"}, "learners": [{"name": "svm"}])";
  ExpectConfigError(R"({"name": "x", "subjects": {"bids": {"root": "ds"}}, )" + target + "}", {"/subjects/bids/entities", "expected an object of BIDS entities"});
  ExpectConfigError(R"({"name": "x", "subjects": {"bids": {"root": "ds", "entities": {"space": 3}}}, )" + target + "}", {"/subjects/bids/entities/space", "3 (number)"});
  ExpectConfigError(R"({"name": "x", "subjects": {"bids": {"root": "ds", "entities": {"sub": "01"}}}, )" + target + "}", {"/subjects/bids/entities/sub"});
  ExpectConfigError(R"({"name": "x", "subjects": {"bids": {"root": "ds", "entitys": {}}}, )" + target + "}", {"/subjects/bids", "did you mean \"entities\""});
  ExpectConfigError(With(R"("atlas": {"image": "a.nii", "labels": "a.tsv", "threshold": 0.2})"), {"/atlas/threshold", "\"probabilistic\": true"});
  ExpectConfigError(With(R"("atlas": {"image": "a.nii", "labels": "a.tsv", "probabilistic": true, "threshold": 1.5})"), {"/atlas/threshold", "1.5"});
  ExpectConfigError(With(R"("atlas": {"images": [{"image": "a.nii", "labels": "a.tsv"}, {"image": "b.nii", "labels": "b.tsv"}]})"),
                    {"/atlas/images/0/prefix", "several atlas images need a \"prefix\""});
  ExpectConfigError(With(R"("atlas": {"images": [{"image": "a.nii", "labels": "a.tsv", "prefix": "c"}, {"image": "b.nii", "labels": "b.tsv", "prefix": "c"}]})"),
                    {"/atlas/images/1/prefix", "duplicate prefix"});
  ExpectConfigError(With(R"("atlas": {"images": [{"image": "a.nii"}]})"), {"/atlas/images/0/labels"});
  const auto c = ParseStudyConfig(With(R"("atlas": {"images": [{"image": "c.nii", "labels": "c.xml", "prefix": "ctx"}, {"image": "p.nii.gz", "labels": "p.tsv", "prefix": "sub", "probabilistic": true, "threshold": 0.25}], "space": "MNI152NLin6Asym"})"),
                                  "/data/study", "study.json");
  ASSERT_EQ(c.atlas.parts.size(), 2u);
  EXPECT_EQ(c.atlas.image, "/data/study/c.nii");
  EXPECT_TRUE(c.atlas.parts[1].probabilistic);
  EXPECT_DOUBLE_EQ(c.atlas.parts[1].threshold, 0.25);
  EXPECT_EQ(c.atlas.space, "MNI152NLin6Asym");
  EXPECT_THAT(ResolvedConfigJson(c), HasSubstr("\"space\": \"MNI152NLin6Asym\""));
}

// A deeply nested value of the wrong type must not overflow the stack while the error message is
// written: nesting is bounded before parsing, and the description of a wrong value is bounded in
// depth and length.
TEST(StudyConfig, DeepNestingIsRefusedWithoutRecursion) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ExpectConfigError(With("\"seed\": " + deep), {"nested more than 512 levels"});
  ExpectConfigError(deep, {"nested more than 512 levels"});
  // Brackets inside strings and comments do not count.
  const std::string quoted = "\"" + std::string(1000, '[') + "\"";
  ExpectConfigError(With("\"seed\": " + quoted + " // [[[[[[\n"), {"/seed", "expected"});
  // 500 levels are parsed; the wrong type is described briefly, within 60 characters.
  const std::string nested = std::string(500, '[') + "1" + std::string(500, ']');
  try {
    ParseStudyConfig(With("\"seed\": " + nested), "/data/study", "study.json");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/seed"));
    EXPECT_THAT(e.what(), HasSubstr("[[[[...]]]] (array)"));
    EXPECT_LT(std::string(e.what()).size(), 400u);
  }
}

// A number beyond double range (a JSON out_of_range exception) is a ConfigError at its JSON pointer.
TEST(StudyConfig, NumberBeyondDoubleRangeIsAConfigErrorAtItsPointer) {
  ExpectConfigError(With("\"seed\": 1e400"), {"/seed", "beyond the range of a double"});
  ExpectConfigError(With(R"("cv": {"outer": {"scheme": "kfold", "k": -1e999}})"), {"/cv/outer/k", "beyond the range of a double"});
  // (The whole file: With() would give "learners" twice, itself an error.)
  ExpectConfigError(R"({"name": "demo", "subjects": {"table": "participants.tsv"}, "target": {"column": "group", "task": "classification"},
                        "learners": [{"name": "svm"}, {"name": "krr", "grid": {"lambda": [1, 2, 1e400]}}]})",
                    {"/learners/1/grid/lambda/2", "beyond the range of a double"});
  // Whole numbers beyond the int64 range are range errors, not an undefined conversion.
  ExpectConfigError(With("\"seed\": 1e300"), {"/seed", "an integer in"});
}
