#include "file_keys.hpp"

#include <stdexcept>

namespace neuromkl::config {

namespace {

// Objects found at several places of a study file, with the same keys.
const std::vector<std::string> kAtlas = {"name", "image", "labels", "prefix", "probabilistic", "threshold", "images", "space"};
const std::vector<std::string> kAtlasImage = {"image", "labels", "prefix", "probabilistic", "threshold"};
const std::vector<std::string> kIntensity = {"scaling"};
const std::vector<std::string> kScaling = {"reference_region"};
const std::vector<std::string> kReferenceImage = {"image"};
const std::vector<std::string> kPrecomputed = {"name", "file"};
const std::vector<std::string> kTabular = {"table", "id_column", "groups", "exclude_columns", "functions", "standardise", "impute"};
const std::vector<std::string> kFunction = {"type", "width", "degree", "offset"};
const std::vector<std::string> kScheme = {"scheme", "k", "repeats", "group_column", "fold_column"};

/// The objects of an images source's or the study's atlas, intensity, precomputed and tabular sections under `at`.
void AddKernelSections(std::vector<ObjectKeys>& table, const std::string& at, bool atlas) {
  if (atlas) {
    table.push_back({at + "/atlas", kAtlas});
    table.push_back({at + "/atlas/images/*", kAtlasImage});
  }
  table.push_back({at + "/intensity", kIntensity});
  table.push_back({at + "/intensity/scaling", kScaling});
  table.push_back({at + "/intensity/scaling/reference_region", kReferenceImage});
  table.push_back({at + "/precomputed/*", kPrecomputed});
  table.push_back({at + "/tabular", kTabular});
  table.push_back({at + "/tabular/functions/*", kFunction});
}

std::vector<ObjectKeys> MakeStudyKeys() {
  std::vector<ObjectKeys> t = {
      {"", {"$schema", "name", "description", "subjects", "target", "atlas", "mask", "kernels", "covariates", "harmonisation", "cv", "learners", "permutations", "statistics",
            "region_scan", "ablation", "output", "seed", "threads"}},
      {"/subjects", {"table", "id_column", "image_column", "bids"}},
      {"/subjects/bids", {"root", "derivatives", "entities"}},
      {"/target", {"column", "task", "positive_class", "multiclass_weights", "bias_correction", "confounds"}},
      {"/target/confounds", {"columns", "categorical", "fit_on", "impute"}},
      {"/target/confounds/fit_on", {"column", "value"}},
      {"/atlas", kAtlas},
      {"/atlas/images/*", kAtlasImage},
      {"/kernels", {"source", "centre", "normalise", "nan_policy", "memory_budget_mb", "cache", "precision", "representation", "intensity", "precomputed", "tabular", "sources",
                    "source_weighting", "missing_source"}},
  };
  AddKernelSections(t, "/kernels", false);
  t.push_back({"/kernels/sources/*",
               {"name", "kind", "image_column", "mask", "nan_policy", "precomputed", "tabular", "connectivity", "atlas", "bids_entities", "intensity"}});
  AddKernelSections(t, "/kernels/sources/*", true);
  t.push_back({"/kernels/sources/*/connectivity", {"column", "kernels", "nodes"}});
  const std::vector<ObjectKeys> rest = {
      {"/covariates", {"columns", "categorical", "fit_on", "impute"}},
      {"/covariates/fit_on", {"column", "value"}},
      {"/harmonisation", {"site_column", "covariates", "fit_on", "empirical_bayes", "sources"}},
      {"/harmonisation/covariates", {"columns", "categorical", "impute"}},
      {"/harmonisation/fit_on", {"column", "value"}},
      {"/cv", {"outer", "inner", "seed", "criterion"}},
      {"/cv/outer", kScheme},
      {"/cv/inner", kScheme},
      {"/learners/*", {"name", "label", "params", "grid", "class_weight"}},
      {"/permutations", {"count"}},
      {"/statistics", {"bootstrap_resamples", "paired_swaps"}},
      {"/region_scan", {"learner"}},
      {"/ablation", {"learner", "top_regions"}},
      {"/output", {"dir", "cache_dir", "save_kernels", "weight_maps", "weight_maps_unit_norm", "min_subjects_with_signal", "model"}},
  };
  t.insert(t.end(), rest.begin(), rest.end());
  return t;
}

/// True when the concrete `pointer` is at the table's `pattern` ("*" = one array index).
bool Matches(const std::string& pattern, const std::string& pointer) {
  std::size_t i = 0, j = 0;
  while (i < pattern.size() && j < pointer.size()) {
    if (pattern[i] == '*') {
      const std::size_t start = j;
      while (j < pointer.size() && pointer[j] >= '0' && pointer[j] <= '9') ++j;
      if (j == start) return false;
      ++i;
    } else if (pattern[i++] != pointer[j++]) {
      return false;
    }
  }
  return i == pattern.size() && j == pointer.size();
}

const std::vector<std::string>* KeysAt(const std::vector<ObjectKeys>& table, const std::string& pointer) {
  for (const auto& entry : table)
    if (Matches(entry.pointer, pointer)) return &entry.keys;
  return nullptr;
}

const std::vector<std::string>& RequireKeysAt(const std::vector<ObjectKeys>& table, const std::string& pointer, const char* file) {
  if (const auto* keys = KeysAt(table, pointer)) return *keys;
  throw std::logic_error(std::string("the ") + file + " key table has no object at \"" + pointer + "\"");
}

void RequireKeysUnder(const std::vector<ObjectKeys>& table, const Json& value, const std::string& pointer) {
  if (value.is_array()) {
    for (std::size_t i = 0; i < value.size(); ++i) RequireKeysUnder(table, value[i], pointer + "/" + std::to_string(i));
    return;
  }
  if (!value.is_object()) return;
  const auto* keys = KeysAt(table, pointer);
  if (!keys) return;  // a map of names chosen by the user
  for (const auto& [key, child] : value.items()) {
    if (std::find(keys->begin(), keys->end(), key) == keys->end())
      throw std::logic_error("key \"" + key + "\" at \"" + (pointer.empty() ? "/" : pointer) + "\" is not in the key table");
    RequireKeysUnder(table, child, pointer + "/" + key);
  }
}

}  // namespace

const std::vector<ObjectKeys>& StudyFileKeys() {
  static const std::vector<ObjectKeys> table = MakeStudyKeys();
  return table;
}

const std::vector<ObjectKeys>& BatchFileKeys() {
  static const std::vector<ObjectKeys> table = {
      {"", {"$schema", "name", "description", "output", "threads", "overrides", "studies", "matrix"}},
      {"/output", {"dir"}},
      {"/studies/*", {"file", "name", "overrides"}},
      {"/matrix", {"base", "cohorts", "targets", "atlases", "sources", "learners"}},
      {"/matrix/sources/*", {"name", "use"}},
  };
  return table;
}

const std::vector<std::string>& StudyKeysAt(const std::string& pointer) { return RequireKeysAt(StudyFileKeys(), pointer, "study file"); }
const std::vector<std::string>& BatchKeysAt(const std::string& pointer) { return RequireKeysAt(BatchFileKeys(), pointer, "batch file"); }

void RequireTableKeys(const std::vector<ObjectKeys>& table, const Json& document) { RequireKeysUnder(table, document, ""); }

}  // namespace neuromkl::config
