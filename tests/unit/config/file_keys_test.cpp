// The key tables (neuromkl/config/file_keys.hpp) are the study and batch files' keys: the schemas name
// the same keys at every level, in both directions; the readers refuse every other key; the resolved
// study writes no other key.
#include <fstream>
#include <map>
#include <set>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "neuromkl/config/batch_config.hpp"
#include "neuromkl/config/file_keys.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "testing.hpp"

using Json = nlohmann::json;
using namespace neuromkl;
using ::testing::HasSubstr;

namespace {

using KeyMap = std::map<std::string, std::set<std::string>>;

/// Every object of `node` whose keys are closed (additionalProperties: false), by JSON pointer ("*" for
/// any array index), with its property names; $ref, oneOf, anyOf and allOf are followed.
void SchemaObjects(const Json& schema, const Json& node, const std::string& ptr, KeyMap& out) {
  if (!node.is_object()) return;
  if (node.contains("$ref")) {
    const std::string ref = node["$ref"];
    ASSERT_EQ(ref.rfind("#/$defs/", 0), 0u) << ref;
    SchemaObjects(schema, schema["$defs"][ref.substr(8)], ptr, out);
  }
  for (const char* combination : {"oneOf", "anyOf", "allOf"})
    if (node.contains(combination))
      for (const auto& branch : node[combination]) SchemaObjects(schema, branch, ptr, out);
  if (node.contains("properties")) {
    const bool closed = node.contains("additionalProperties") && node["additionalProperties"] == false;
    for (const auto& [key, child] : node["properties"].items()) {
      if (closed) out[ptr].insert(key);
      SchemaObjects(schema, child, ptr + "/" + key, out);
    }
  }
  if (node.contains("items")) SchemaObjects(schema, node["items"], ptr + "/*", out);
}

KeyMap TableObjects(const std::vector<config::ObjectKeys>& table) {
  KeyMap out;
  for (const auto& entry : table) {
    EXPECT_FALSE(out.count(entry.pointer)) << "\"" << entry.pointer << "\" is listed twice";
    out[entry.pointer].insert(entry.keys.begin(), entry.keys.end());
    EXPECT_EQ(out[entry.pointer].size(), entry.keys.size()) << "a key is listed twice at \"" << entry.pointer << "\"";
  }
  return out;
}

void ExpectSchemaEqualsTable(const std::string& schemaFile, const std::vector<config::ObjectKeys>& table) {
  std::ifstream in(neuromkl::testing::SourcePath(schemaFile));
  const Json schema = Json::parse(in);
  KeyMap fromSchema;
  SchemaObjects(schema, schema, "", fromSchema);
  const KeyMap fromTable = TableObjects(table);
  for (const auto& [ptr, keys] : fromSchema) {
    ASSERT_TRUE(fromTable.count(ptr)) << schemaFile << " has an object at \"" << ptr << "\" that the key table does not list";
    EXPECT_EQ(keys, fromTable.at(ptr)) << "keys at \"" << ptr << "\": " << schemaFile << " vs the key table";
  }
  for (const auto& [ptr, keys] : fromTable) EXPECT_TRUE(fromSchema.count(ptr)) << "the key table lists \"" << ptr << "\", " << schemaFile << " does not";
  EXPECT_GE(fromSchema.size(), table.size());  // guards against a walk that finds nothing
}

TEST(FileKeys, StudySchemaHasTheTablesKeysAtEveryLevel) { ExpectSchemaEqualsTable("configs/study.schema.json", config::StudyFileKeys()); }

TEST(FileKeys, BatchSchemaHasTheTablesKeysAtEveryLevel) { ExpectSchemaEqualsTable("configs/batch.schema.json", config::BatchFileKeys()); }

std::string ReadError(const std::string& text) {
  try {
    config::ParseStudyConfig(text, "/d", "s.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The readers take the allowed keys from the table, at nested and repeated places too.
TEST(FileKeys, TheStudyReaderRefusesAKeyTheTableDoesNotList) {
  const std::string head = R"({"name": "x", "subjects": {"table": "p.tsv"}, "target": {"column": "g", "task": "classification"}, "learners": [{"name": "svm"}], )";
  EXPECT_EQ(ReadError(head + R"("kernels": {"sources": [{"name": "a", "kind": "images", "atlas": {"images": [{"image": "i", "labels": "l", "colour": 1}]}}]}})"),
            "s.json: unknown key \"colour\" in /kernels/sources/0/atlas/images/0; allowed keys: image, labels, prefix, probabilistic, threshold");
  EXPECT_EQ(ReadError(head + R"("kernels": {"tabular": {"table": "t", "groups": "each_column", "functions": [{"type": "linear", "sigma": 1}]}}})"),
            "s.json: unknown key \"sigma\" in /kernels/tabular/functions/0; allowed keys: type, width, degree, offset");
  EXPECT_THAT(ReadError(head + R"("cv": {"inner": {"schem": "kfold"}}})"), HasSubstr("unknown key \"schem\" in /cv/inner; did you mean \"scheme\"?"));
  neuromkl::testing::TempDir dir;
  neuromkl::testing::WriteFile(dir / "b.json", R"({"name": "b", "studies": [{"file": "s.json", "overide": {}}]})");
  try {
    config::LoadBatchConfig(dir / "b.json");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown key \"overide\" in /studies/0; did you mean \"overrides\"?"));
  }
}

/// Every key of `value` (at `ptr`; `pattern` with "*" for array indices) at a place the table lists is one
/// of the table's keys there.
void ExpectTableKeys(const KeyMap& table, const Json& value, const std::string& ptr, const std::string& pattern) {
  if (value.is_array())
    for (std::size_t i = 0; i < value.size(); ++i) ExpectTableKeys(table, value[i], ptr + "/" + std::to_string(i), pattern + "/*");
  if (!value.is_object()) return;
  const auto it = table.find(pattern);
  if (it == table.end()) return;  // names chosen by the user (params, entities, groups, ...)
  for (const auto& [key, child] : value.items()) {
    EXPECT_TRUE(it->second.count(key)) << "the resolved study writes \"" << key << "\" at \"" << ptr << "\"";
    ExpectTableKeys(table, child, ptr + "/" + key, pattern + "/" + key);
  }
}

// A study with every kind of section resolves to the table's keys only, and parses again to itself.
TEST(FileKeys, TheResolvedStudyWritesOnlyTheTablesKeys) {
  const std::string text = R"({"name": "all", "subjects": {"bids": {"root": "ds", "entities": {"suffix": "T1w"}}},
    "target": {"column": "dx", "task": "multiclass", "multiclass_weights": "per_class"},
    "atlas": {"images": [{"image": "a.nii", "labels": "a.tsv", "prefix": "a"}, {"image": "p.nii", "labels": "p.tsv", "prefix": "p", "probabilistic": true, "threshold": 0.2}], "space": "MNI"},
    "kernels": {"sources": [
      {"name": "mri", "kind": "images", "bids_entities": {"suffix": "T1w"}, "atlas": {"name": "aal", "space": "MNI"}, "intensity": {"scaling": {"reference_region": {"image": "r.nii"}}}, "mask": "m.nii"},
      {"name": "c", "kind": "connectivity", "connectivity": {"column": "conn", "kernels": "network", "nodes": "n.tsv"}},
      {"name": "t", "kind": "tabular", "tabular": {"table": "t.tsv", "groups": {"g": ["x"]}, "functions": [{"type": "polynomial", "degree": 2}]}},
      {"name": "k", "kind": "precomputed", "precomputed": [{"name": "k1", "file": "k1.npy"}]}],
      "source_weighting": "equal", "missing_source": "drop"},
    "covariates": {"columns": ["age"], "categorical": ["site"], "fit_on": {"column": "dx", "value": "CN"}},
    "cv": {"outer": {"scheme": "custom", "fold_column": "f"}, "inner": {"scheme": "group_kfold", "group_column": "site"}, "criterion": "accuracy"},
    "learners": [{"name": "kelm", "class_weight": {"AD": 2}}], "permutations": {"count": 10}})";
  const auto c = config::ParseStudyConfig(text, "/d", "s.json");
  const Json resolved = Json::parse(config::ResolvedConfigJson(c));
  ExpectTableKeys(TableObjects(config::StudyFileKeys()), resolved, "", "");
  EXPECT_EQ(config::ResolvedConfigJson(config::ParseStudyConfig(resolved.dump(), "/elsewhere", "r.json")), resolved.dump(2));
}

}  // namespace
