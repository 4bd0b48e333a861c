// The schema documents every default; the code holds them. They must agree.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "neuromkl/config/batch_config.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/learners/learner.hpp"
#include "testing.hpp"

using Json = nlohmann::json;
using namespace neuromkl;

namespace {

Json Schema() {
  std::ifstream in(neuromkl::testing::SourcePath("configs/study.schema.json"));
  return Json::parse(in);
}

/// Compares every "default" under `props` with the resolved config at the same place.
void CompareDefaults(const Json& schema, const Json& props, const Json& resolved, const std::string& where, int& compared) {
  for (const auto& [key, spec] : props.items()) {
    if (key == "$schema") continue;
    Json s = spec;
    if (s.contains("$ref")) s = schema["$defs"][s["$ref"].get<std::string>().substr(std::string("#/$defs/").size())];
    if (s.contains("default")) {
      ASSERT_TRUE(resolved.contains(key)) << where << "/" << key << " missing in the resolved config";
      EXPECT_EQ(resolved[key], s["default"]) << "schema default of " << where << "/" << key;
      ++compared;
    }
    if (s.contains("properties") && resolved.contains(key) && resolved[key].is_object())
      CompareDefaults(schema, s["properties"], resolved[key], where + "/" + key, compared);
  }
}

TEST(SchemaDefaults, StudyDefaultsEqualTheCode) {
  const Json schema = Schema();
  const auto c = config::ParseStudyConfig(
      R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "classification"}, "learners": [{"name": "svm"}]})",
      "/d", "s.json");
  const Json resolved = Json::parse(config::ResolvedConfigJson(c));
  int compared = 0;
  CompareDefaults(schema, schema["properties"], resolved, "", compared);
  EXPECT_GE(compared, 17);  // guards against a walk that silently compares nothing
}

TEST(SchemaDefaults, LearnerParameterTablesEqualTheCode) {
  const Json schema = Schema();
  std::vector<std::string> names = schema["$defs"]["learner"]["properties"]["name"]["enum"];
  ASSERT_EQ(names.size(), learners::LearnerCatalog().size());
  for (const auto& info : learners::LearnerCatalog()) {
    const Json& props = schema["$defs"]["params_" + info.name]["properties"];
    ASSERT_EQ(props.size(), info.params.size()) << info.name;
    for (const auto& p : info.params) {
      ASSERT_TRUE(props.contains(p.name)) << info.name << "." << p.name;
      EXPECT_DOUBLE_EQ(props[p.name]["default"].get<double>(), p.defaultValue) << info.name << "." << p.name;
      if (props[p.name].contains("exclusiveMinimum")) {
        EXPECT_TRUE(p.loOpen) << info.name << "." << p.name;
      }
      if (props[p.name].contains("minimum")) {
        EXPECT_FALSE(p.loOpen) << info.name << "." << p.name;
      }
      EXPECT_EQ(props[p.name]["type"] == "integer", p.integer) << info.name << "." << p.name;
      const auto grid = learners::DefaultGrid(p.name);
      if (grid.empty()) {
        EXPECT_FALSE(props[p.name].contains("x-default-grid")) << info.name << "." << p.name;
      } else {
        EXPECT_EQ(props[p.name]["x-default-grid"].get<std::vector<double>>(), grid) << info.name << "." << p.name;
      }
    }
  }
}

}  // namespace

namespace {
TEST(SchemaDefaults, BatchSchemaNamesTheKeysTheLoaderAccepts) {
  std::ifstream in(std::string(NEUROMKL_SOURCE_DIR) + "/configs/batch.schema.json");
  const auto schema = nlohmann::json::parse(in);
  std::vector<std::string> top, matrix;
  for (const auto& [k, _] : schema["properties"].items()) top.push_back(k);
  for (const auto& [k, _] : schema["properties"]["matrix"]["properties"].items()) matrix.push_back(k);
  // The loader's key lists (modules/config/src/batch_config.cpp), alphabetically.
  EXPECT_EQ(top, (std::vector<std::string>{"$schema", "description", "matrix", "name", "output", "overrides", "studies", "threads"}));
  EXPECT_EQ(matrix, (std::vector<std::string>{"atlases", "base", "cohorts", "learners", "sources", "targets"}));
  // An unknown key is refused with the pointer, as for studies.
  neuromkl::testing::TempDir dir;
  neuromkl::testing::WriteFile(dir / "b.json", R"({"name": "b", "matrix": {"base": "s.json", "cohort": []}})");
  EXPECT_THROW(neuromkl::config::LoadBatchConfig(dir / "b.json"), neuromkl::ConfigError);
}
}  // namespace

namespace {

// A batch study taken from a study file in another folder keeps that folder for every path it
// names, including the BIDS root and each image of a multi-image atlas.
TEST(BatchPaths, StudyPathsResolveAgainstTheStudyFileFolder) {
  neuromkl::testing::TempDir dir;
  std::filesystem::create_directories(dir / "elsewhere/bids");
  neuromkl::testing::WriteFile(dir / "elsewhere/bids/participants.tsv", "participant_id\tgroup\nsub-01\ta\nsub-02\tb\n");
  neuromkl::testing::WriteFile(dir / "elsewhere/study.json", R"({"name": "s", "subjects": {"bids": {"root": "bids", "entities": {"suffix": "T1w"}}},
    "target": {"column": "group", "task": "classification"}, "learners": [{"name": "svm"}],
    "atlas": {"images": [{"image": "cort.nii.gz", "labels": "cort.tsv", "prefix": "ctx"}, {"image": "sub.nii.gz", "labels": "sub.tsv", "prefix": "sub"}]}})");
  neuromkl::testing::WriteFile(dir / "b.json", R"({"name": "b", "studies": [{"file": "elsewhere/study.json"}]})");
  const auto batch = neuromkl::config::LoadBatchConfig(dir / "b.json");
  ASSERT_EQ(batch.studies.size(), 1u);
  ASSERT_TRUE(batch.studies[0].error.empty()) << batch.studies[0].error;
  const auto& study = batch.studies[0].config;
  const std::string base = std::filesystem::path(dir / "elsewhere").lexically_normal().string();
  EXPECT_EQ(study.subjects.bids.root, base + "/bids");
  ASSERT_EQ(study.atlas.parts.size(), 2u);
  EXPECT_EQ(study.atlas.parts[0].image, base + "/cort.nii.gz");
  EXPECT_EQ(study.atlas.parts[1].labels, base + "/sub.tsv");
}

}  // namespace
