// The study file read into a StudyConfig (ReadStudyConfig): what is wrong with the document itself.
// Every key is checked against the key table (file_keys.cpp); as each value is read, its type, a
// required key's presence, a choice's allowed values (some depend on the task: criteria, learners) and
// a number's range; and keys that do not apply with the other keys given. The other rules on values
// (names, duplicates, rules across fields) are CheckStudyConfig's, which applies these again to a
// study made in code (the shared ones are in study_rules.hpp and study_limits.hpp).
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "file_keys.hpp"
#include "json_reader.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "study_limits.hpp"
#include "study_rules.hpp"

namespace neuromkl::config {

namespace fs = std::filesystem;
using learners::Task;

namespace {

/// An object at `pointer` whose keys must be the table's keys for that place.
ObjectReader Reader(const Json& value, const std::string& pointer, const std::string& src) {
  return ObjectReader(value, pointer, src, StudyKeysAt(pointer));
}

std::int64_t Integer(const ObjectReader& r, const std::string& key, std::int64_t fallback, IntegerRange range) {
  return r.Integer(key, fallback, range.lo, range.hi);
}

const std::vector<std::string> kSchemes = {"kfold", "stratified_kfold", "repeated_kfold", "leave_one_out",
                                           "leave_one_group_out", "group_kfold", "custom"};

CvSchemeSpec ParseScheme(const Json& j, const std::string& ptr, const std::string& src) {
  const ObjectReader r = Reader(j, ptr, src);
  CvSchemeSpec s;
  const std::string scheme = r.Choice("scheme", ToString(s.scheme), kSchemes);
  s.scheme = static_cast<CvScheme>(std::find(kSchemes.begin(), kSchemes.end(), scheme) - kSchemes.begin());
  s.k = static_cast<int>(Integer(r, "k", s.k, kFoldsRange));
  s.repeats = static_cast<int>(Integer(r, "repeats", s.repeats, kRepeatsRange));
  s.groupColumn = r.String("group_column", "");
  s.foldColumn = r.String("fold_column", "");
  return s;
}

/// A learner's "params" or "grid" object: the catalogue's parameter names, each value a number in its range.
learners::ParamMap ParseParams(const ObjectReader& r, const learners::LearnerInfo& info, const std::vector<std::string>& known) {
  learners::ParamMap given;
  const ObjectReader pr(r.At("params"), r.Pointer("params"), r.Source(), known);
  for (const auto& p : info.params) {
    if (!pr.Has(p.name)) continue;
    if (!pr.At(p.name).is_number()) pr.Fail(p.name, "a number");
    const double v = pr.At(p.name).get<double>();
    if (auto msg = learners::CheckParam(p, v); !msg.empty()) pr.FailAt(pr.Pointer(p.name), msg);
    given[p.name] = v;
  }
  return given;
}

void ParseGrid(const ObjectReader& r, const learners::LearnerInfo& info, const std::vector<std::string>& known, const learners::ParamMap& given,
               LearnerSpec& spec) {
  const ObjectReader gr(r.At("grid"), r.Pointer("grid"), r.Source(), known);
  for (const auto& p : info.params) {
    if (!gr.Has(p.name)) continue;
    const Json& values = gr.At(p.name);
    if (!values.is_array() || values.empty()) gr.Fail(p.name, "a non-empty array of numbers");
    std::vector<double> list;
    for (std::size_t i = 0; i < values.size(); ++i) {
      const std::string vp = gr.Pointer(p.name) + "/" + std::to_string(i);
      if (!values[i].is_number()) gr.FailAt(vp, "expected a number, found " + Describe(values[i]));
      const double v = values[i].get<double>();
      if (auto msg = learners::CheckParam(p, v); !msg.empty()) gr.FailAt(vp, msg);
      list.push_back(v);
    }
    if (given.count(p.name))
      gr.FailAt(gr.Pointer(p.name), "\"" + p.name + "\" is both fixed in params and searched in grid: give it in one place");
    spec.grid[p.name] = list;
  }
}

void ParseClassWeight(const ObjectReader& r, Task task, LearnerSpec& spec) {
  const std::string cwp = r.Pointer("class_weight");
  if (task == Task::Regression) r.FailAt(cwp, "class_weight applies to classification and multiclass targets only, but task is \"regression\"");
  const Json& cw = r.At("class_weight");
  if (cw.is_string()) {
    if (cw.get<std::string>() != "balanced")
      r.FailAt(cwp, "expected \"balanced\" or an object {class: weight}, found \"" + cw.get<std::string>() + "\"");
    spec.classWeightBalanced = true;
  } else if (cw.is_object()) {
    for (const auto& [name, value] : cw.items()) {
      const std::string wp = cwp + "/" + PointerToken(name);
      if (!value.is_number()) r.FailAt(wp, "expected a number (the class's weight), found " + Describe(value));
      const double w = value.get<double>();
      if (!std::isfinite(w) || !(w > 0)) r.FailAt(wp, "expected a class weight > 0, found " + FormatDouble(w));
      spec.classWeights.emplace_back(name, w);
    }
  } else {
    r.FailAt(cwp, "expected \"balanced\" or an object {class: weight}, found " + Describe(cw));
  }
}

LearnerSpec ParseLearner(const Json& j, const std::string& ptr, const std::string& src, Task task) {
  const ObjectReader r = Reader(j, ptr, src);
  LearnerSpec spec;
  std::vector<std::string> names;
  for (const auto& l : learners::LearnerCatalog()) names.push_back(l.name);
  spec.name = r.Choice("name", "", names);
  spec.label = r.String("label", spec.name);
  const learners::LearnerInfo& info = *learners::FindLearner(spec.name);
  if (auto msg = LearnerTaskProblem(info, task); !msg.empty()) r.FailAt(ptr + "/name", msg);
  std::vector<std::string> known;
  for (const auto& p : info.params) known.push_back(p.name);
  const learners::ParamMap given = r.Has("params") ? ParseParams(r, info, known) : learners::ParamMap{};
  spec.params = learners::ResolveParams(spec.name, given);
  if (r.Has("grid")) ParseGrid(r, info, known, given, spec);
  for (const auto& p : info.params)
    if (!given.count(p.name) && !spec.grid.count(p.name))
      if (auto def = learners::DefaultGrid(p.name); !def.empty()) spec.grid[p.name] = def;
  if (r.Has("class_weight")) ParseClassWeight(r, task, spec);
  return spec;
}

AtlasPart ParseAtlasPart(const ObjectReader& r, const std::string& baseDir) {
  AtlasPart part;
  part.image = ResolvePath(baseDir, r.RequiredString("image"));
  part.labels = ResolvePath(baseDir, r.RequiredString("labels"));
  part.prefix = r.String("prefix", "");
  part.probabilistic = r.Bool("probabilistic", false);
  part.threshold = r.Number("threshold", 0, kThresholdRange.lo, kThresholdRange.hi);
  if (part.threshold >= kThresholdRange.hi)
    r.FailAt(r.Pointer("threshold"), "expected a probability threshold in [0, 1), found 1: no voxel would be kept");
  if (r.Has("threshold") && !part.probabilistic)
    r.FailAt(r.Pointer("threshold"), "\"threshold\" applies to probabilistic atlases: add \"probabilistic\": true");
  return part;
}

/// An atlas section at `ptr` (/atlas or an images source's): a built-in name, one image + labels, or several images.
AtlasSpec ParseAtlas(const Json& a, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  AtlasSpec atlas;
  if (a.is_string()) {
    atlas.builtin = a.get<std::string>();
    return atlas;
  }
  const ObjectReader ar = Reader(a, ptr, src);
  atlas.builtin = ar.String("name", "");
  atlas.space = ar.String("space", "");
  if (ar.Has("images")) {
    if (ar.Has("image") || ar.Has("labels") || ar.Has("name"))
      ar.FailAt(ptr + "/images", "give either \"images\" (a list of {\"image\", \"labels\", \"prefix\"}) or \"image\" + \"labels\" (or \"name\"), not both");
    const Json& list = ar.At("images");
    if (!list.is_array() || list.empty()) ar.Fail("images", "a non-empty array of {\"image\", \"labels\", \"prefix\", \"probabilistic\", \"threshold\"}");
    for (std::size_t i = 0; i < list.size(); ++i) atlas.parts.push_back(ParseAtlasPart(Reader(list[i], ptr + "/images/" + std::to_string(i), src), baseDir));
  } else if (ar.Has("image") || ar.Has("labels")) {
    if (!atlas.builtin.empty()) ar.FailAt(ptr, "give either \"name\" (a built-in atlas) or \"image\" + \"labels\", not both");
    if (!ar.Has("image") || !ar.Has("labels")) ar.FailAt(ptr, "expected a built-in atlas name (\"aal\") or both \"image\" and \"labels\"");
    atlas.parts.push_back(ParseAtlasPart(ar, baseDir));
  } else if (atlas.builtin.empty()) {
    ar.FailAt(ptr, "expected a built-in atlas name (\"aal\") or both \"image\" and \"labels\" (or \"images\")");
  } else {
    for (const char* key : {"prefix", "probabilistic", "threshold"})
      if (ar.Has(key)) ar.FailAt(ptr + "/" + key, std::string("\"") + key + "\" applies to a custom atlas image, not to the built-in \"" + atlas.builtin + "\"");
  }
  if (!atlas.parts.empty()) {
    atlas.image = atlas.parts[0].image;
    atlas.labels = atlas.parts[0].labels;
  }
  return atlas;
}

/// kernels.intensity (or an images source's) at `ptr`: "none", "global_mean" or {"reference_region": ...}.
IntensitySpec ParseIntensity(const Json& j, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  IntensitySpec out;
  const ObjectReader in = Reader(j, ptr, src);
  if (in.Has("scaling") && in.At("scaling").is_object()) {
    const ObjectReader ref = Reader(in.At("scaling"), ptr + "/scaling", src);
    const Json& names = ref.Has("reference_region") ? ref.At("reference_region") : Json();
    auto isName = [](const Json& v) { return v.is_string() && !v.get<std::string>().empty(); };
    if (names.is_string() && isName(names)) {
      out.referenceRegions = {names.get<std::string>()};
    } else if (names.is_array() && !names.empty() && std::all_of(names.begin(), names.end(), isName)) {
      out.referenceRegions = names.get<std::vector<std::string>>();
    } else if (names.is_object()) {
      out.referenceImage = ResolvePath(baseDir, Reader(names, ptr + "/scaling/reference_region", src).RequiredString("image"));
    } else {
      ref.Fail("reference_region", "a region name, a non-empty array of region names of the atlas (e.g. [\"Cerebelum_Crus1_L\", "
                                   "\"Cerebelum_Crus1_R\"]) or {\"image\": \"a label image whose non-zero voxels are the reference\"}");
    }
    out.scaling = kernels::IntensityScaling::ReferenceRegions;
  } else {
    out.scaling = in.Choice("scaling", "none", {"none", "global_mean"}) == "global_mean" ? kernels::IntensityScaling::GlobalMean
                                                                                     : kernels::IntensityScaling::None;
  }
  out.pointer = ptr;
  return out;
}

/// BIDS entities at `ptr` (/subjects/bids/entities or an images source's bids_entities): a non-empty object
/// of key -> non-empty string.
std::vector<std::pair<std::string, std::string>> ParseBidsEntities(const Json& j, const std::string& ptr, const std::string& src) {
  if (!j.is_object() || j.empty()) throw ConfigError("config:Value", src, ptr + ": " + kBidsEntitiesExpected);
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string() || value.get<std::string>().empty())
      throw ConfigError("config:Value", src, ptr + "/" + key + ": expected a non-empty string, found " + Describe(value));
    out.emplace_back(key, value.get<std::string>());
  }
  return out;
}

void ParseSubjects(const Json& json, const std::string& baseDir, const std::string& src, SubjectsSpec& subjects) {
  const ObjectReader s = Reader(json, "/subjects", src);
  if (s.Has("bids")) {
    const ObjectReader b = Reader(s.At("bids"), "/subjects/bids", src);
    auto& bids = subjects.bids;
    bids.root = ResolvePath(baseDir, b.RequiredString("root"));
    if (b.Has("derivatives")) bids.derivatives = ResolvePath(bids.root, b.String("derivatives", ""));
    bids.entities = ParseBidsEntities(b.Has("entities") ? b.At("entities") : Json(), "/subjects/bids/entities", src);
    subjects.table = ResolvePath(baseDir, s.String("table", ""));
    if (subjects.table.empty()) subjects.table = (fs::path(bids.root) / "participants.tsv").lexically_normal().string();
    if (s.Has("image_column")) s.FailAt("/subjects/image_column", "with \"bids\", images are found by entities: remove \"image_column\"");
  } else {
    subjects.table = ResolvePath(baseDir, s.RequiredString("table"));
  }
  subjects.imageColumn = s.String("image_column", subjects.imageColumn);
  subjects.idColumnGiven = s.Has("id_column");
  subjects.idColumn = s.String("id_column", subjects.idColumn);
}

void ParseCovariates(const Json& j, const std::string& src, bool withFitOn, CovariateSpec& c);

TargetSpec ParseTarget(const Json& json, const std::string& src) {
  const ObjectReader t = Reader(json, "/target", src);
  TargetSpec target;
  target.column = t.RequiredString("column");
  if (!t.Has("task"))
    throw ConfigError("config:MissingKey", src, "/target/task: required key is missing (expected \"classification\", \"multiclass\" or \"regression\")");
  const std::string task = t.Choice("task", "", {"classification", "multiclass", "regression"});
  target.task = task == "regression" ? Task::Regression : task == "multiclass" ? Task::Multiclass : Task::Classification;
  target.positiveClass = t.String("positive_class", "");
  if (target.task != Task::Classification && !target.positiveClass.empty())
    t.FailAt("/target/positive_class", TargetKeyMisplaced("positive_class", target.task));
  if (t.Has("multiclass_weights")) {
    if (target.task != Task::Multiclass)
      t.FailAt("/target/multiclass_weights", "multiclass_weights applies to task \"multiclass\" only, but task is \"" + task + "\"");
    target.multiclassWeights =
        t.Choice("multiclass_weights", "shared", {"shared", "per_class"}) == "per_class" ? learners::MulticlassWeights::PerClass : learners::MulticlassWeights::Shared;
  }
  if (t.Has("bias_correction")) {
    target.biasCorrection = t.Choice("bias_correction", "none", {"none", "linear"}) == "linear";
    if (target.biasCorrection && target.task != Task::Regression) t.FailAt("/target/bias_correction", TargetKeyMisplaced("bias_correction", target.task));
  }
  if (t.Has("confounds")) {
    if (target.task != Task::Regression) t.FailAt("/target/confounds", TargetKeyMisplaced("confounds", target.task));
    ParseCovariates(t.At("confounds"), src, true, target.confounds);
  }
  return target;
}

std::vector<std::string> ColumnList(const Json& j, const std::string& ptr, const std::string& src) {
  if (!j.is_array()) throw ConfigError("config:Type", src, ptr + ": expected an array of column names, found " + Describe(j));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_string() || j[i].get<std::string>().empty())
      throw ConfigError("config:Type", src, ptr + "/" + std::to_string(i) + ": expected a column name (non-empty string), found " + Describe(j[i]));
    out.push_back(j[i].get<std::string>());
  }
  return out;
}

/// A list of precomputed kernels {name, file} at `ptr` (/kernels/precomputed or a source's).
std::vector<PrecomputedKernelSpec> ParsePrecomputed(const Json& list, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  if (!list.is_array()) throw ConfigError("config:Type", src, ptr + ": expected an array of {\"name\", \"file\"} objects, found " + Describe(list));
  std::vector<PrecomputedKernelSpec> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const ObjectReader e = Reader(list[i], ptr + "/" + std::to_string(i), src);
    out.push_back({e.RequiredString("name"), ResolvePath(baseDir, e.RequiredString("file"))});
  }
  return out;
}

/// One kernel function of a tabular section at `p`: linear, gaussian widths or polynomial degrees.
TabularFunction ParseTabularFunction(const Json& j, const std::string& p, const std::string& src) {
  const ObjectReader f = Reader(j, p, src);
  TabularFunction fn;
  const std::string type = f.Choice("type", "linear", {"linear", "gaussian", "polynomial"});
  fn.type = type == "linear" ? TabularFunction::Type::Linear : type == "gaussian" ? TabularFunction::Type::Gaussian : TabularFunction::Type::Polynomial;
  const std::string key = fn.type == TabularFunction::Type::Gaussian ? "width" : "degree";
  if (fn.type != TabularFunction::Type::Linear) {
    if (!f.Has(key)) f.FailAt(p + "/" + key, "a " + type + " kernel needs \"" + key + "\": a number or a list of numbers");
    const Json& v = f.At(key);
    const std::vector<Json> values = v.is_array() ? std::vector<Json>(v.begin(), v.end()) : std::vector<Json>{v};
    if (values.empty()) f.FailAt(p + "/" + key, "expected at least one value");
    for (const auto& x : values) {
      if (!x.is_number() || !TabularFunctionValueOk(fn.type, x.get<double>())) f.FailAt(p + "/" + key, TabularFunctionValueExpected(fn.type) + ", found " + Describe(x));
      fn.values.push_back(x.get<double>());
    }
  } else if (f.Has("width") || f.Has("degree")) {
    f.FailAt(p, "a linear kernel takes no width or degree");
  }
  fn.offset = f.Number("offset", 1, kOffsetRange.lo, kOffsetRange.hi);
  return fn;
}

/// The "groups" of a tabular section: {"kernel name": [columns], ...} or a preset name.
void ParseTabularGroups(const ObjectReader& t, const std::string& ptr, TabularSpec& tab) {
  if (!t.Has("groups")) t.FailAt(ptr + "/groups", kTabularGroupsExpected);
  if (t.At("groups").is_string()) {
    tab.groupsPreset = t.Choice("groups", "", {"each_column", "all_columns", "each_and_all"});
    return;
  }
  if (!t.At("groups").is_object() || t.At("groups").empty()) t.FailAt(ptr + "/groups", std::string(kTabularGroupsExpected) + ", found " + Describe(t.At("groups")));
  for (const auto& [name, cols] : t.At("groups").items()) {
    const std::string p = ptr + "/groups/" + name;
    if (!cols.is_array() || cols.empty()) t.FailAt(p, "expected a non-empty array of column names, found " + Describe(cols));
    std::vector<std::string> columns;
    for (const auto& col : cols) {
      if (!col.is_string()) t.FailAt(p, "expected column names (strings), found " + Describe(col));
      columns.push_back(col.get<std::string>());
    }
    tab.groups.emplace_back(name, columns);
  }
}

/// A tabular kernel section at `ptr` (/kernels/tabular or a source's).
TabularSpec ParseTabular(const Json& j, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  const ObjectReader t = Reader(j, ptr, src);
  TabularSpec tab;
  tab.table = ResolvePath(baseDir, t.RequiredString("table"));
  tab.idColumn = t.String("id_column", tab.idColumn);
  tab.standardise = t.Bool("standardise", false);
  tab.imputeMedian = t.Choice("impute", "none", {"none", "median"}) == "median";
  ParseTabularGroups(t, ptr, tab);
  if (t.Has("exclude_columns")) {
    const Json& list = t.At("exclude_columns");
    if (!list.is_array()) t.Fail("exclude_columns", "an array of column names");
    for (const auto& col : list) {
      if (!col.is_string()) t.FailAt(ptr + "/exclude_columns", "expected column names (strings), found " + Describe(col));
      tab.excludeColumns.push_back(col.get<std::string>());
    }
  }
  if (t.Has("functions")) {
    const Json& list = t.At("functions");
    if (!list.is_array() || list.empty()) t.Fail("functions", "a non-empty array of {\"type\": \"linear\" | \"gaussian\" | \"polynomial\", ...}");
    tab.functions.clear();
    for (std::size_t i = 0; i < list.size(); ++i) tab.functions.push_back(ParseTabularFunction(list[i], ptr + "/functions/" + std::to_string(i), src));
  }
  return tab;
}

ConnectivitySpec ParseConnectivity(const Json& j, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  const ObjectReader cr = Reader(j, ptr, src);
  ConnectivitySpec conn;
  conn.column = cr.RequiredString("column");
  const std::string kinds = cr.Choice("kernels", "node", {"node", "network", "whole"});
  conn.kernels = kinds == "network" ? ConnectivitySpec::Kernels::Network
                 : kinds == "whole" ? ConnectivitySpec::Kernels::Whole
                                    : ConnectivitySpec::Kernels::Node;
  if (cr.Has("nodes")) conn.nodes = ResolvePath(baseDir, cr.RequiredString("nodes"));
  return conn;
}

/// One named source of /kernels/sources at `p`; `c` holds the study's subjects and kernel defaults.
SourceSpec ParseSource(const Json& j, const std::string& p, const std::string& src, const std::string& baseDir, const StudyConfig& c) {
  const ObjectReader e = Reader(j, p, src);
  SourceSpec spec;
  spec.pointer = p;
  spec.name = e.RequiredString("name");
  if (!e.Has("kind")) e.FailAt(p + "/kind", "required key is missing (expected \"images\", \"tabular\", \"precomputed\" or \"connectivity\")");
  const std::string kind = e.Choice("kind", "images", {"images", "tabular", "precomputed", "connectivity"});
  spec.kind = kind == "images"        ? KernelSource::Images
              : kind == "tabular"     ? KernelSource::Tabular
              : kind == "precomputed" ? KernelSource::Precomputed
                                      : KernelSource::Connectivity;
  auto only = [&](const char* key, KernelSource owner) {
    if (e.Has(key) && spec.kind != owner) e.FailAt(p + "/" + key, std::string("\"") + key + "\" belongs to sources of kind \"" + ToString(owner) + "\", not \"" + kind + "\"");
  };
  for (const char* key : {"image_column", "mask", "nan_policy", "atlas", "bids_entities", "intensity"}) only(key, KernelSource::Images);
  only("precomputed", KernelSource::Precomputed);
  only("tabular", KernelSource::Tabular);
  only("connectivity", KernelSource::Connectivity);
  if (e.Has("image_column") && !c.subjects.bids.root.empty())
    e.FailAt(p + "/image_column", "with /subjects/bids, images are found by entities: give this source \"bids_entities\" instead");
  if (e.Has("bids_entities") && c.subjects.bids.root.empty())
    e.FailAt(p + "/bids_entities", "BIDS entities need /subjects/bids (the dataset to search); without it give the source an \"image_column\"");
  spec.imageColumn = e.String("image_column", c.subjects.imageColumn);
  spec.bidsEntities = e.Has("bids_entities") ? ParseBidsEntities(e.At("bids_entities"), p + "/bids_entities", src) : c.subjects.bids.entities;
  if (e.Has("mask")) spec.mask = ResolvePath(baseDir, e.RequiredString("mask"));
  spec.nanPolicy = e.Choice("nan_policy", c.kernels.nanPolicy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel", {"drop_voxel", "zero"}) == "zero"
                       ? kernels::NanPolicy::Zero
                       : kernels::NanPolicy::DropVoxel;
  if (e.Has("atlas")) {
    spec.ownAtlas = true;
    spec.atlas = ParseAtlas(e.At("atlas"), p + "/atlas", src, baseDir);
  }
  if (e.Has("intensity")) spec.intensity = ParseIntensity(e.At("intensity"), p + "/intensity", src, baseDir);
  if (spec.kind == KernelSource::Precomputed) {
    if (!e.Has("precomputed")) e.FailAt(p + "/precomputed", "a precomputed source needs a list of {\"name\", \"file\"} kernels");
    spec.precomputed = ParsePrecomputed(e.At("precomputed"), p + "/precomputed", src, baseDir);
  }
  if (spec.kind == KernelSource::Tabular) {
    if (!e.Has("tabular")) e.FailAt(p + "/tabular", "a tabular source needs a \"tabular\" section with a table and column groups");
    spec.tabular = ParseTabular(e.At("tabular"), p + "/tabular", src, baseDir);
  }
  if (spec.kind == KernelSource::Connectivity) {
    if (!e.Has("connectivity"))
      e.FailAt(p + "/connectivity", "a connectivity source needs a \"connectivity\" section, e.g. {\"column\": \"connectome\", \"kernels\": \"node\"}");
    spec.connectivity = ParseConnectivity(e.At("connectivity"), p + "/connectivity", src, baseDir);
  }
  return spec;
}

void ParseSources(const ObjectReader& k, const std::string& src, const std::string& baseDir, StudyConfig& c) {
  for (const char* key : {"source", "precomputed", "tabular"})
    if (k.Has(key))
      k.FailAt(std::string("/kernels/") + key, "give the kernels either as /kernels/sources (a list of named sources) or by /kernels/source with its "
                                               "sections, not both");
  const Json& list = k.At("sources");
  if (!list.is_array() || list.empty())
    k.Fail("sources", "a non-empty array of sources {\"name\": ..., \"kind\": \"images\" | \"tabular\" | \"precomputed\" | \"connectivity\", ...}");
  c.kernels.source = KernelSource::Sources;
  c.kernels.sourceWeighting = k.Choice("source_weighting", "none", {"none", "equal"}) == "equal" ? SourceWeighting::Equal : SourceWeighting::None;
  const std::string missing = k.Choice("missing_source", "error", {"error", "drop", "impute"});
  c.kernels.missingSource = missing == "drop" ? MissingSource::Drop : missing == "impute" ? MissingSource::Impute : MissingSource::Error;
  for (std::size_t i = 0; i < list.size(); ++i) c.kernels.sources.push_back(ParseSource(list[i], "/kernels/sources/" + std::to_string(i), src, baseDir, c));
}

void ParseKernels(const Json& json, const std::string& src, const std::string& baseDir, StudyConfig& c) {
  const ObjectReader k = Reader(json, "/kernels", src);
  const std::string source = k.Choice("source", "images", {"images", "precomputed", "tabular"});
  c.kernels.source = source == "images" ? KernelSource::Images : source == "precomputed" ? KernelSource::Precomputed : KernelSource::Tabular;
  c.kernels.centre = k.Bool("centre", c.kernels.centre);
  c.kernels.normalise = k.Bool("normalise", c.kernels.normalise);
  c.kernels.nanPolicy = k.Choice("nan_policy", "drop_voxel", {"drop_voxel", "zero"}) == "zero" ? kernels::NanPolicy::Zero : kernels::NanPolicy::DropVoxel;
  c.kernels.memoryBudgetMb = k.Number("memory_budget_mb", 0, kMemoryBudgetRange.lo, kMemoryBudgetRange.hi);
  c.kernels.cache = k.Bool("cache", c.kernels.cache);
  c.kernels.precision = k.Choice("precision", "float64", {"float64", "float32"}) == "float32" ? KernelPrecision::Float32 : KernelPrecision::Float64;
  const std::string representation = k.Choice("representation", "auto", {"auto", "kernel", "features"});
  c.kernels.representation = representation == "kernel"     ? KernelRepresentation::Kernel
                             : representation == "features" ? KernelRepresentation::Features
                                                            : KernelRepresentation::Auto;
  if (k.Has("intensity")) c.kernels.intensity = ParseIntensity(k.At("intensity"), "/kernels/intensity", src, baseDir);
  if (k.Has("precomputed")) c.kernels.precomputed = ParsePrecomputed(k.At("precomputed"), "/kernels/precomputed", src, baseDir);
  if (k.Has("tabular")) c.kernels.tabular = ParseTabular(k.At("tabular"), "/kernels/tabular", src, baseDir);
  if (k.Has("sources")) ParseSources(k, src, baseDir, c);
  for (const char* key : {"source_weighting", "missing_source"})
    if (k.Has(key) && c.kernels.source != KernelSource::Sources)
      k.FailAt(std::string("/kernels/") + key, std::string("\"") + key + "\" applies to studies with several sources (/kernels/sources)");
}

/// fit_on: "all" or {column, value}, at `pointer`.
void ParseFitOn(const ObjectReader& r, const std::string& pointer, const std::string& src, CovariateSpec& c) {
  const Json& f = r.At("fit_on");
  if (f.is_string()) {
    if (f.get<std::string>() != "all") r.FailAt(pointer, "expected \"all\" or {\"column\": ..., \"value\": ...}, found " + Describe(f));
    return;
  }
  const ObjectReader fo = Reader(f, pointer, src);
  c.fitOnColumn = fo.RequiredString("column");
  if (!fo.Has("value")) fo.FailAt(pointer + "/value", "required key is missing (the value of the column that marks the subjects to fit on, e.g. \"CN\")");
  const Json& v = fo.At("value");
  if (v.is_string()) c.fitOnValue = v.get<std::string>();
  else if (v.is_number_integer()) c.fitOnValue = std::to_string(v.get<std::int64_t>());
  else fo.FailAt(pointer + "/value", "expected a string or an integer, found " + Describe(v));
}

/// covariates: ["age", "sex"] (numeric columns) or {columns, categorical, fit_on}; at `c.pointer` (fit_on only where
/// `withFitOn`).
void ParseCovariates(const Json& j, const std::string& src, bool withFitOn, CovariateSpec& c) {
  const std::string& at = c.pointer;
  if (j.is_array()) {
    c.columns = ColumnList(j, at, src);
    c.listForm = true;
    if (c.columns.empty() && withFitOn) throw ConfigError("config:Value", src, at + ": expected at least one column name");
    return;
  }
  const ObjectReader r = Reader(j, at, src);
  if (r.Has("columns")) c.columns = ColumnList(r.At("columns"), at + "/columns", src);
  if (r.Has("categorical")) c.categorical = ColumnList(r.At("categorical"), at + "/categorical", src);
  if (withFitOn && r.Has("fit_on")) ParseFitOn(r, c.fitOnPointer, src, c);
  if (r.Has("impute")) c.imputeMedian = r.Choice("impute", "", {"none", "median"}) == "median";
  if (withFitOn && !c.Active()) r.FailAt(at, "expected at least one column in \"columns\" or \"categorical\"");
}

/// harmonisation: {site_column, covariates, fit_on, empirical_bayes, sources}.
HarmonisationSpec ParseHarmonisation(const Json& j, const std::string& src) {
  HarmonisationSpec h;
  const ObjectReader r = Reader(j, "/harmonisation", src);
  h.siteColumn = r.RequiredString("site_column");
  if (r.Has("covariates")) ParseCovariates(r.At("covariates"), src, false, h.preserve);
  if (r.Has("fit_on")) ParseFitOn(r, h.preserve.fitOnPointer, src, h.preserve);
  h.empiricalBayes = r.Bool("empirical_bayes", h.empiricalBayes);
  if (r.Has("sources")) h.sources = ColumnList(r.At("sources"), "/harmonisation/sources", src);
  return h;
}

void ParseCv(const Json& json, const std::string& src, Task task, CvSpec& cv) {
  const ObjectReader r = Reader(json, "/cv", src);
  if (r.Has("criterion")) cv.criterion = r.Choice("criterion", "", cv::InnerCriteria(task));
  if (r.Has("outer")) cv.outer = ParseScheme(r.At("outer"), "/cv/outer", src);
  if (r.Has("inner")) cv.inner = ParseScheme(r.At("inner"), "/cv/inner", src);
  if (r.Has("seed")) {
    cv.seed = static_cast<std::uint64_t>(Integer(r, "seed", 0, kSeedRange));
    cv.seedGiven = true;
  }
}

void ParseOutput(const Json& json, const std::string& src, const std::string& baseDir, StudyConfig& c) {
  const ObjectReader o = Reader(json, "/output", src);
  if (o.Has("dir")) c.output.dir = ResolvePath(baseDir, o.RequiredString("dir"));
  if (o.Has("cache_dir")) c.output.cacheDir = ResolvePath(baseDir, o.RequiredString("cache_dir"));
  c.output.saveKernels = o.Bool("save_kernels", c.output.saveKernels);
  c.output.weightMaps = o.Bool("weight_maps", c.output.weightMaps);
  c.output.weightMapUnitNorm = o.Bool("weight_maps_unit_norm", c.output.weightMapUnitNorm);
  c.output.minSubjectsWithSignal = static_cast<int>(Integer(o, "min_subjects_with_signal", c.output.minSubjectsWithSignal, kMinSubjectsRange));
  c.output.model = o.Bool("model", c.output.model);
  if (o.Has("save_kernels") && c.output.saveKernels && c.kernels.representation == KernelRepresentation::Features)
    o.FailAt("/output/save_kernels", "/kernels/representation \"features\" never forms the kernels, so there are none to save: drop save_kernels, "
                                     "or use representation \"kernel\"");
  if (o.Has("save_kernels") && c.output.saveKernels && c.kernels.precision == KernelPrecision::Float32)
    o.FailAt("/output/save_kernels", "the saved kernels are the raw float64 kernels, but /kernels/precision \"float32\" keeps only the compact "
                                     "store after the kernel stage: save them from a float64 run (the kernel cache makes it cheap), or drop save_kernels");
}

}  // namespace

StudyConfig ReadStudyConfig(const std::string& text, const std::string& baseDir, const std::string& src) {
  const Json root = ParseConfigJson(text, src);
  const ObjectReader r = Reader(root, "", src);
  StudyConfig c;
  c.path = src;
  c.baseDir = baseDir;
  c.name = r.RequiredString("name");
  c.description = r.String("description", "");
  c.seed = static_cast<std::uint64_t>(Integer(r, "seed", static_cast<std::int64_t>(c.seed), kSeedRange));
  c.threads = static_cast<int>(Integer(r, "threads", c.threads, kThreadsRange));

  if (!r.Has("subjects")) throw ConfigError("config:MissingKey", src, "/subjects: required section is missing (expected {\"table\": \"participants.tsv\"})");
  ParseSubjects(r.At("subjects"), baseDir, src, c.subjects);
  if (!r.Has("target")) throw ConfigError("config:MissingKey", src, "/target: required section is missing (expected {\"column\": ..., \"task\": ...})");
  c.target = ParseTarget(r.At("target"), src);
  if (r.Has("atlas")) c.atlas = ParseAtlas(r.At("atlas"), "/atlas", src, baseDir);
  if (r.Has("mask")) c.mask = ResolvePath(baseDir, r.String("mask", ""));
  if (r.Has("kernels")) ParseKernels(r.At("kernels"), src, baseDir, c);
  if (r.Has("covariates")) ParseCovariates(r.At("covariates"), src, true, c.covariates);
  if (r.Has("harmonisation")) c.harmonisation = ParseHarmonisation(r.At("harmonisation"), src);
  if (r.Has("cv")) ParseCv(r.At("cv"), src, c.target.task, c.cv);
  if (!c.cv.seedGiven) c.cv.seed = c.seed;

  if (!r.Has("learners") || !r.At("learners").is_array() || r.At("learners").empty())
    throw ConfigError("config:MissingKey", src, "/learners: " + std::string(kLearnersExpected));
  for (std::size_t i = 0; i < r.At("learners").size(); ++i)
    c.learners.push_back(ParseLearner(r.At("learners")[i], "/learners/" + std::to_string(i), src, c.target.task));
  if (r.Has("permutations")) c.permutations.count = static_cast<int>(Integer(Reader(r.At("permutations"), "/permutations", src), "count", 0, kPermutationsRange));
  if (r.Has("statistics")) {
    const ObjectReader s = Reader(r.At("statistics"), "/statistics", src);
    c.statistics.bootstrapResamples = static_cast<int>(Integer(s, "bootstrap_resamples", c.statistics.bootstrapResamples, kBootstrapRange));
    c.statistics.pairedSwaps = static_cast<int>(Integer(s, "paired_swaps", c.statistics.pairedSwaps, kPairedSwapsRange));
  }
  if (r.Has("region_scan")) c.regionScan.learner = Reader(r.At("region_scan"), "/region_scan", src).RequiredString("learner");
  if (r.Has("ablation")) {
    const ObjectReader a = Reader(r.At("ablation"), "/ablation", src);
    c.ablation.learner = a.RequiredString("learner");
    c.ablation.topRegions = static_cast<int>(Integer(a, "top_regions", 0, kTopRegionsRange));
  }
  c.output.dir = ResolvePath(baseDir, "results/" + c.name);
  c.output.cacheDir = ResolvePath(baseDir, ".neuromkl_cache");
  if (r.Has("output")) ParseOutput(r.At("output"), src, baseDir, c);
  // A float32 study does not hold the raw kernels that output.save_kernels writes: off unless asked (an error above).
  if (c.kernels.precision == KernelPrecision::Float32) c.output.saveKernels = false;
  // Nor does a study on features, which never forms them (auto saves them when it chooses kernels).
  if (c.kernels.representation == KernelRepresentation::Features) c.output.saveKernels = false;
  return c;
}

}  // namespace neuromkl::config
