#include "neuromkl/config/study_config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "json_reader.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::config {

namespace fs = std::filesystem;
using learners::Task;

std::size_t LearnerSpec::GridSize() const {
  std::size_t n = 1;
  for (const auto& [_, values] : grid) n *= values.size();
  return n;
}

std::string ToString(CvScheme s) {
  switch (s) {
    case CvScheme::KFold: return "kfold";
    case CvScheme::StratifiedKFold: return "stratified_kfold";
    case CvScheme::RepeatedKFold: return "repeated_kfold";
    case CvScheme::LeaveOneOut: return "leave_one_out";
    case CvScheme::LeaveOneGroupOut: return "leave_one_group_out";
    case CvScheme::GroupKFold: return "group_kfold";
    case CvScheme::Custom: return "custom";
  }
  return "?";
}
std::string ToString(KernelSource s) {
  switch (s) {
    case KernelSource::Images: return "images";
    case KernelSource::Precomputed: return "precomputed";
    case KernelSource::Tabular: return "tabular";
    case KernelSource::Sources: return "sources";
    case KernelSource::Connectivity: return "connectivity";
  }
  return "?";
}
std::string ToString(Task t) { return t == Task::Classification ? "classification" : t == Task::Multiclass ? "multiclass" : "regression"; }

namespace {

const std::vector<std::string> kSchemes = {"kfold", "stratified_kfold", "repeated_kfold", "leave_one_out",
                                           "leave_one_group_out", "group_kfold", "custom"};

CvScheme SchemeFrom(const std::string& s) {
  for (int i = 0; i < 7; ++i)
    if (kSchemes[static_cast<std::size_t>(i)] == s) return static_cast<CvScheme>(i);
  return CvScheme::KFold;
}

CvSchemeSpec ParseScheme(const Json& j, const std::string& ptr, const std::string& src) {
  ObjectReader r(j, ptr, src, {"scheme", "k", "repeats", "group_column", "fold_column"});
  CvSchemeSpec s;
  s.scheme = SchemeFrom(r.Choice("scheme", ToString(s.scheme), kSchemes));
  s.k = static_cast<int>(r.Integer("k", s.k, 2, 100000));
  s.repeats = static_cast<int>(r.Integer("repeats", s.repeats, 1, 100000));
  s.groupColumn = r.String("group_column", "");
  s.foldColumn = r.String("fold_column", "");
  if ((s.scheme == CvScheme::LeaveOneGroupOut || s.scheme == CvScheme::GroupKFold) && s.groupColumn.empty())
    r.FailAt(ptr + "/group_column", "scheme \"" + ToString(s.scheme) + "\" needs a group_column (a column of the subjects table)");
  if (s.scheme == CvScheme::Custom && s.foldColumn.empty())
    r.FailAt(ptr + "/fold_column", "scheme \"custom\" needs a fold_column (a column of the subjects table giving each subject's fold)");
  if (s.repeats > 1 && s.scheme != CvScheme::RepeatedKFold)
    r.FailAt(ptr + "/repeats", "repeats > 1 needs scheme \"repeated_kfold\", found scheme \"" + ToString(s.scheme) + "\"");
  return s;
}

LearnerSpec ParseLearner(const Json& j, const std::string& ptr, const std::string& src, Task task) {
  ObjectReader r(j, ptr, src, {"name", "label", "params", "grid", "class_weight"});
  LearnerSpec spec;
  std::vector<std::string> names;
  for (const auto& l : learners::LearnerCatalog()) names.push_back(l.name);
  spec.name = r.Choice("name", "", names);
  spec.label = r.String("label", spec.name);
  // The label names output files (regions_<label>.tsv): a '/' or ".." would leave the output folder.
  if (spec.label.empty() || !std::all_of(spec.label.begin(), spec.label.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.';
      }))
    r.FailAt(ptr + "/label", "a label made of letters, digits, '_', '-' and '.' (it names the files regions_<label>.tsv), found \"" + spec.label + "\"");
  const learners::LearnerInfo& info = *learners::FindLearner(spec.name);
  if ((task == Task::Classification || task == Task::Multiclass) && !info.classification)
    r.FailAt(ptr + "/name", "learner \"" + spec.name + "\" does not do classification");
  if (task == Task::Regression && !info.regression) {
    std::vector<std::string> reg;
    for (const auto& l : learners::LearnerCatalog())
      if (l.regression) reg.push_back(l.name);
    r.FailAt(ptr + "/name", "learner \"" + spec.name + "\" does not do regression; learners for regression: " + Join(reg, ", "));
  }
  std::vector<std::string> known;
  for (const auto& p : info.params) known.push_back(p.name);
  learners::ParamMap given;
  if (r.Has("params")) {
    ObjectReader pr(r.At("params"), ptr + "/params", src, known);
    for (const auto& p : info.params) {
      if (!pr.Has(p.name)) continue;
      if (!pr.At(p.name).is_number()) pr.Fail(p.name, "a number");
      const double v = pr.At(p.name).get<double>();
      if (auto msg = learners::CheckParam(p, v); !msg.empty()) pr.FailAt(pr.Pointer(p.name), msg);
      given[p.name] = v;
    }
  }
  spec.params = learners::ResolveParams(spec.name, given);
  if (r.Has("grid")) {
    ObjectReader gr(r.At("grid"), ptr + "/grid", src, known);
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
  for (const auto& p : info.params)
    if (!given.count(p.name) && !spec.grid.count(p.name))
      if (auto def = learners::DefaultGrid(p.name); !def.empty()) spec.grid[p.name] = def;
  if (r.Has("class_weight")) {
    const std::string cwp = r.Pointer("class_weight");
    if (task == Task::Regression) r.FailAt(cwp, "class_weight applies to classification and multiclass targets only, but task is \"regression\"");
    const Json& cw = r.At("class_weight");
    if (cw.is_string()) {
      if (cw.get<std::string>() != "balanced")
        r.FailAt(cwp, "expected \"balanced\" or an object {class: weight}, found \"" + cw.get<std::string>() + "\"");
      spec.classWeightBalanced = true;
    } else if (cw.is_object()) {
      for (const auto& [name, value] : cw.items()) {
        std::string key;  // the class name as a JSON pointer token (RFC 6901: ~ -> ~0, / -> ~1)
        for (char ch : name) key += ch == '~' ? std::string("~0") : ch == '/' ? std::string("~1") : std::string(1, ch);
        if (!value.is_number()) r.FailAt(cwp + "/" + key, "expected a number (the class's weight), found " + Describe(value));
        const double w = value.get<double>();
        if (!std::isfinite(w) || !(w > 0)) r.FailAt(cwp + "/" + key, "expected a class weight > 0, found " + FormatDouble(w));
        spec.classWeights.emplace_back(name, w);
      }
    } else {
      r.FailAt(cwp, "expected \"balanced\" or an object {class: weight}, found " + Describe(cw));
    }
  }
  return spec;
}

}  // namespace

namespace {

AtlasPart ParseAtlasPart(const ObjectReader& r, const std::string& baseDir) {
  AtlasPart part;
  part.image = ResolvePath(baseDir, r.RequiredString("image"));
  part.labels = ResolvePath(baseDir, r.RequiredString("labels"));
  part.prefix = r.String("prefix", "");
  part.probabilistic = r.Bool("probabilistic", false);
  part.threshold = r.Number("threshold", 0, 0, 1);
  if (part.threshold >= 1) r.FailAt(r.Pointer("threshold"), "expected a probability threshold in [0, 1), found 1: no voxel would be kept");
  if (r.Has("threshold") && !part.probabilistic)
    r.FailAt(r.Pointer("threshold"), "\"threshold\" applies to probabilistic atlases: add \"probabilistic\": true");
  return part;
}

/// An atlas section at `ptr` (/atlas or an images source's): a built-in name, one image + labels, or several images.
AtlasSpec ParseAtlas(const Json& a, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  AtlasSpec atlas;
  if (a.is_string()) {
    atlas.builtin = a.get<std::string>();
  } else {
    ObjectReader ar(a, ptr, src, {"name", "image", "labels", "prefix", "probabilistic", "threshold", "images", "space"});
    atlas.builtin = ar.String("name", "");
    atlas.space = ar.String("space", "");
    if (ar.Has("images")) {
      if (ar.Has("image") || ar.Has("labels") || ar.Has("name"))
        ar.FailAt(ptr + "/images", "give either \"images\" (a list of {\"image\", \"labels\", \"prefix\"}) or \"image\" + \"labels\" (or \"name\"), not both");
      const Json& list = ar.At("images");
      if (!list.is_array() || list.empty()) ar.Fail("images", "a non-empty array of {\"image\", \"labels\", \"prefix\", \"probabilistic\", \"threshold\"}");
      std::set<std::string> prefixes;
      for (std::size_t i = 0; i < list.size(); ++i) {
        std::string p = ptr + "/images/";
        p += std::to_string(i);
        ObjectReader pr(list[i], p, src, {"image", "labels", "prefix", "probabilistic", "threshold"});
        atlas.parts.push_back(ParseAtlasPart(pr, baseDir));
        if (list.size() > 1 && atlas.parts.back().prefix.empty())
          pr.FailAt(p + "/prefix", "several atlas images need a \"prefix\" each (it keeps region names apart, e.g. \"ctx\", \"sub\")");
        if (!prefixes.insert(atlas.parts.back().prefix).second)
          pr.FailAt(p + "/prefix", "duplicate prefix \"" + atlas.parts.back().prefix + "\"");
      }
    } else if (ar.Has("image") || ar.Has("labels")) {
      if (!atlas.builtin.empty()) ar.FailAt(ptr, "give either \"name\" (a built-in atlas) or \"image\" + \"labels\", not both");
      if (!ar.Has("image") || !ar.Has("labels"))
        ar.FailAt(ptr, "expected a built-in atlas name (\"aal\") or both \"image\" and \"labels\"");
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
  }
  if (!atlas.builtin.empty() && atlas.builtin != "aal")
    throw ConfigError("config:Value", src, ptr + ": unknown built-in atlas \"" + atlas.builtin + "\"; built in: aal" + DidYouMean(atlas.builtin, {"aal"}));
  return atlas;
}

/// kernels.intensity (or an images source's) at `ptr`: "none", "global_mean" or {"reference_region": ...}.
IntensitySpec ParseIntensity(const Json& j, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  IntensitySpec out;
  ObjectReader in(j, ptr, src, {"scaling"});
  if (in.Has("scaling") && in.At("scaling").is_object()) {
    ObjectReader ref(in.At("scaling"), ptr + "/scaling", src, {"reference_region"});
    const Json& names = ref.Has("reference_region") ? ref.At("reference_region") : Json();
    auto isName = [](const Json& v) { return v.is_string() && !v.get<std::string>().empty(); };
    if (names.is_string() && isName(names)) out.referenceRegions = {names.get<std::string>()};
    else if (names.is_array() && !names.empty() && std::all_of(names.begin(), names.end(), isName))
      out.referenceRegions = names.get<std::vector<std::string>>();
    else if (names.is_object()) {
      ObjectReader image(names, ptr + "/scaling/reference_region", src, {"image"});
      out.referenceImage = ResolvePath(baseDir, image.RequiredString("image"));
    } else
      ref.Fail("reference_region", "a region name, a non-empty array of region names of the atlas (e.g. [\"Cerebelum_Crus1_L\", "
                                   "\"Cerebelum_Crus1_R\"]) or {\"image\": \"a label image whose non-zero voxels are the reference\"}");
    out.scaling = kernels::IntensityScaling::ReferenceRegions;
  } else {
    out.scaling = in.Choice("scaling", "none", {"none", "global_mean"}) == "global_mean" ? kernels::IntensityScaling::GlobalMean
                                                                                     : kernels::IntensityScaling::None;
  }
  out.pointer = ptr;
  return out;
}

/// The header cells of a delimited table (tab, else comma), or empty when it cannot be read.
std::vector<std::string> TableHeader(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return {};
  if (!line.empty() && line.back() == '\r') line.pop_back();
  auto cells = Split(line, line.find('\t') != std::string::npos ? '\t' : ',');
  for (auto& cell : cells) cell = Trim(cell);
  return cells;
}

/// participants.json (BIDS): per column {"Description", "Levels": {value: description}, ...}.
void ReadParticipantsSidecar(const std::string& path, SubjectsSpec& subjects) {
  const Json j = ParseConfigJson(ReadConfigText(path, "participants.json sidecar"), path);
  if (!j.is_object()) throw ConfigError("config:Type", path, "/: expected an object with one entry per column, found " + Describe(j));
  for (const auto& [column, spec] : j.items()) {
    if (!spec.is_object() || !spec.contains("Levels")) continue;
    const Json& levels = spec["Levels"];
    if (!levels.is_object())
      throw ConfigError("config:Type", path, "/" + column + "/Levels: expected an object {\"value\": \"description\"}, found " + Describe(levels));
    auto& out = subjects.levels[column];
    for (const auto& [value, description] : levels.items())
      out.push_back({value, description.is_string() ? description.get<std::string>() : description.dump()});
  }
}

/// BIDS entities at `ptr` (/subjects/bids/entities or an images source's bids_entities): a non-empty object
/// of key -> value that picks one image per participant.
std::vector<std::pair<std::string, std::string>> ParseBidsEntities(const Json& j, const std::string& ptr, const std::string& src) {
  if (!j.is_object() || j.empty())
    throw ConfigError("config:Value", src, ptr + ": expected an object of BIDS entities that picks one image per participant, e.g. {\"space\": "
                                       "\"MNI152NLin2009cAsym\", \"label\": \"GM\", \"suffix\": \"probseg\"}");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, value] : j.items()) {
    const std::string p = ptr + "/" + key;
    if (!value.is_string() || value.get<std::string>().empty())
      throw ConfigError("config:Value", src, p + ": expected a non-empty string, found " + Describe(value));
    const bool keyOk = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; });
    if (!keyOk) throw ConfigError("config:Value", src, p + ": a BIDS entity key is made of letters and digits (e.g. \"space\", \"desc\", \"label\", \"suffix\")");
    if (key == "sub") throw ConfigError("config:Value", src, p + ": \"sub\" is set per participant from the subjects table; remove it");
    out.emplace_back(key, value.get<std::string>());
  }
  return out;
}

void ParseSubjects(const Json& json, const std::string& baseDir, const std::string& src, SubjectsSpec& subjects) {
  ObjectReader s(json, "/subjects", src, {"table", "id_column", "image_column", "bids"});
  if (s.Has("bids")) {
    ObjectReader b(s.At("bids"), "/subjects/bids", src, {"root", "derivatives", "entities"});
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
  if (s.Has("id_column")) {
    subjects.idColumn = s.String("id_column", subjects.idColumn);
  } else {
    // participant_id (BIDS) by default; a table with a "subject" column instead keeps working.
    const auto header = TableHeader(subjects.table);
    const bool hasParticipantId = std::find(header.begin(), header.end(), "participant_id") != header.end();
    if (!hasParticipantId && std::find(header.begin(), header.end(), "subject") != header.end()) subjects.idColumn = "subject";
  }
  fs::path sidecar = fs::path(subjects.table).replace_extension(".json");
  std::error_code ec;
  if (fs::is_regular_file(sidecar, ec)) {
    subjects.sidecar = sidecar.string();
    ReadParticipantsSidecar(subjects.sidecar, subjects);
  }
}

std::vector<std::string> ColumnList(const Json& j, const std::string& ptr, const std::string& src) {
  if (!j.is_array()) throw ConfigError("config:Type", src, ptr + ": expected an array of column names, found " + Describe(j));
  std::vector<std::string> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string p = ptr + "/" + std::to_string(i);
    if (!j[i].is_string() || j[i].get<std::string>().empty())
      throw ConfigError("config:Type", src, p + ": expected a column name (non-empty string), found " + Describe(j[i]));
    const std::string name = j[i].get<std::string>();
    if (std::find(out.begin(), out.end(), name) != out.end())
      throw ConfigError("config:Value", src, p + ": column \"" + name + "\" is listed twice");
    out.push_back(name);
  }
  return out;
}

/// A list of precomputed kernels {name, file} at `ptr` (/kernels/precomputed or a source's).
std::vector<PrecomputedKernelSpec> ParsePrecomputed(const Json& list, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  std::vector<PrecomputedKernelSpec> out;
  if (!list.is_array()) throw ConfigError("config:Type", src, ptr + ": expected an array of {\"name\", \"file\"} objects, found " + Describe(list));
  {
      std::set<std::string> names;
      for (std::size_t i = 0; i < list.size(); ++i) {
        std::string p = ptr + "/";
        p += std::to_string(i);
        ObjectReader e(list[i], p, src, {"name", "file"});
        PrecomputedKernelSpec spec{e.RequiredString("name"), ResolvePath(baseDir, e.RequiredString("file"))};
        if (!names.insert(spec.name).second) e.FailAt(p + "/name", "duplicate kernel name \"" + spec.name + "\"");
        out.push_back(spec);
      }
    }
  return out;
}

/// A tabular kernel section at `ptr` (/kernels/tabular or a source's).
TabularSpec ParseTabular(const Json& j, const std::string& ptr, const std::string& src, const std::string& baseDir) {
  TabularSpec out;
  {
      ObjectReader t(j, ptr, src, {"table", "id_column", "groups", "exclude_columns", "functions", "standardise"});
      auto& tab = out;
      tab.table = ResolvePath(baseDir, t.RequiredString("table"));
      tab.idColumn = t.String("id_column", tab.idColumn);
      tab.standardise = t.Bool("standardise", false);
      const char* groupsHelp =
          "expected an object {\"kernel name\": [\"column\", ...], ...} with at least one group, or one of \"each_column\", "
          "\"all_columns\", \"each_and_all\"";
      if (!t.Has("groups")) t.FailAt(ptr + "/groups", groupsHelp);
      if (t.At("groups").is_string()) {
        tab.groupsPreset = t.Choice("groups", "", {"each_column", "all_columns", "each_and_all"});
      } else {
        if (!t.At("groups").is_object() || t.At("groups").empty()) t.FailAt(ptr + "/groups", std::string(groupsHelp) + ", found " + Describe(t.At("groups")));
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
        for (std::size_t i = 0; i < list.size(); ++i) {
          std::string p = ptr + "/functions/";
          p += std::to_string(i);
          ObjectReader f(list[i], p, src, {"type", "width", "degree", "offset"});
          TabularFunction fn;
          const std::string type = f.Choice("type", "linear", {"linear", "gaussian", "polynomial"});
          fn.type = type == "linear" ? TabularFunction::Type::Linear : type == "gaussian" ? TabularFunction::Type::Gaussian : TabularFunction::Type::Polynomial;
          const std::string key = fn.type == TabularFunction::Type::Gaussian ? "width" : "degree";
          if (fn.type != TabularFunction::Type::Linear) {
            if (!f.Has(key)) f.FailAt(p + "/" + key, "a " + type + " kernel needs \"" + key + "\": a number or a list of numbers");
            const Json& v = f.At(key);
            std::vector<Json> values = v.is_array() ? std::vector<Json>(v.begin(), v.end()) : std::vector<Json>{v};
            if (values.empty()) f.FailAt(p + "/" + key, "expected at least one value");
            for (const auto& x : values) {
              const bool ok = x.is_number() && x.get<double>() > 0 && std::isfinite(x.get<double>()) &&
                              (fn.type == TabularFunction::Type::Gaussian || x.get<double>() == std::floor(x.get<double>()));
              if (!ok)
                f.FailAt(p + "/" + key, std::string("expected ") + (fn.type == TabularFunction::Type::Gaussian ? "positive widths" : "positive whole degrees") +
                                            ", found " + Describe(x));
              fn.values.push_back(x.get<double>());
            }
          } else if (f.Has("width") || f.Has("degree")) {
            f.FailAt(p, "a linear kernel takes no width or degree");
          }
          fn.offset = f.Number("offset", 1, 0, 1e12);
          tab.functions.push_back(fn);
        }
      }
    }
  return out;
}

/// covariates: ["age", "sex"] (numeric columns) or {columns, categorical, fit_on}.
CovariateSpec ParseCovariates(const Json& j, const std::string& src, const std::string& targetColumn) {
  CovariateSpec c;
  if (j.is_array()) {
    c.columns = ColumnList(j, "/covariates", src);
    c.listForm = true;
  } else {
    ObjectReader r(j, "/covariates", src, {"columns", "categorical", "fit_on"});
    if (r.Has("columns")) c.columns = ColumnList(r.At("columns"), "/covariates/columns", src);
    if (r.Has("categorical")) c.categorical = ColumnList(r.At("categorical"), "/covariates/categorical", src);
    for (std::size_t i = 0; i < c.categorical.size(); ++i)
      if (std::find(c.columns.begin(), c.columns.end(), c.categorical[i]) != c.columns.end())
        r.FailAt("/covariates/categorical/" + std::to_string(i), "column \"" + c.categorical[i] + "\" is also in /covariates/columns (numeric); list it once");
    if (r.Has("fit_on")) {
      const Json& f = r.At("fit_on");
      if (f.is_string()) {
        if (f.get<std::string>() != "all") r.FailAt("/covariates/fit_on", "expected \"all\" or {\"column\": ..., \"value\": ...}, found " + Describe(f));
      } else {
        ObjectReader fo(f, "/covariates/fit_on", src, {"column", "value"});
        c.fitOnColumn = fo.RequiredString("column");
        if (!fo.Has("value")) fo.FailAt("/covariates/fit_on/value", "required key is missing (the value of the column that marks the subjects to fit on, e.g. \"CN\")");
        const Json& v = fo.At("value");
        if (v.is_string()) c.fitOnValue = v.get<std::string>();
        else if (v.is_number_integer()) c.fitOnValue = std::to_string(v.get<std::int64_t>());
        else fo.FailAt("/covariates/fit_on/value", "expected a string or an integer, found " + Describe(v));
      }
    }
    if (!c.Active()) r.FailAt("/covariates", "expected at least one column in \"columns\" or \"categorical\"");
  }
  if (j.is_array() && c.columns.empty()) throw ConfigError("config:Value", src, "/covariates: expected at least one column name");
  auto all = c.columns;
  all.insert(all.end(), c.categorical.begin(), c.categorical.end());
  for (const auto& col : all)
    if (col == targetColumn)
      throw ConfigError("config:Value", src, "/covariates: the target column \"" + col + "\" cannot be a covariate (regressing it out removes the signal)");
  return c;
}

}  // namespace

StudyConfig ParseStudyConfig(const std::string& text, const std::string& baseDir, const std::string& src) {
  const Json root = ParseConfigJson(text, src);
  ObjectReader r(root, "", src,
                 {"$schema", "name", "description", "subjects", "target", "atlas", "mask", "kernels", "covariates", "cv", "learners",
                  "permutations", "output", "seed", "threads"});
  StudyConfig c;
  c.path = src;
  c.baseDir = baseDir;
  c.name = r.RequiredString("name");
  for (char ch : c.name)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.'))
      r.Fail("name", "a name made of letters, digits, '_', '-' and '.' (it names the output folder)");
  c.description = r.String("description", "");
  c.seed = static_cast<std::uint64_t>(r.Integer("seed", static_cast<std::int64_t>(c.seed), 0, (1LL << 53)));
  c.threads = static_cast<int>(r.Integer("threads", c.threads, 0, 4096));

  if (!r.Has("subjects")) throw ConfigError("config:MissingKey", src, "/subjects: required section is missing (expected {\"table\": \"participants.tsv\"})");
  ParseSubjects(r.At("subjects"), baseDir, src, c.subjects);
  if (!r.Has("target")) throw ConfigError("config:MissingKey", src, "/target: required section is missing (expected {\"column\": ..., \"task\": ...})");
  {
    ObjectReader t(r.At("target"), "/target", src, {"column", "task", "positive_class", "multiclass_weights", "bias_correction"});
    c.target.column = t.RequiredString("column");
    if (!t.Has("task"))
      throw ConfigError("config:MissingKey", src, "/target/task: required key is missing (expected \"classification\", \"multiclass\" or \"regression\")");
    const std::string task = t.Choice("task", "", {"classification", "multiclass", "regression"});
    c.target.task = task == "regression" ? Task::Regression : task == "multiclass" ? Task::Multiclass : Task::Classification;
    c.target.positiveClass = t.String("positive_class", "");
    if (c.target.task != Task::Classification && !c.target.positiveClass.empty())
      t.FailAt("/target/positive_class", "positive_class applies to binary classification only, but task is \"" + task + "\"");
    if (t.Has("multiclass_weights")) {
      if (c.target.task != Task::Multiclass)
        t.FailAt("/target/multiclass_weights", "multiclass_weights applies to task \"multiclass\" only, but task is \"" + task + "\"");
      c.target.multiclassWeights =
          t.Choice("multiclass_weights", "shared", {"shared", "per_class"}) == "per_class" ? learners::MulticlassWeights::PerClass : learners::MulticlassWeights::Shared;
    }
    if (t.Has("bias_correction")) {
      const std::string correction = t.Choice("bias_correction", "none", {"none", "linear"});
      if (correction == "linear" && c.target.task != Task::Regression)
        t.FailAt("/target/bias_correction", "bias_correction applies to task \"regression\" only, but task is \"" + task + "\"");
      c.target.biasCorrection = correction == "linear";
    }
  }
  if (r.Has("atlas")) c.atlas = ParseAtlas(r.At("atlas"), "/atlas", src, baseDir);
  if (r.Has("mask")) c.mask = ResolvePath(baseDir, r.String("mask", ""));

  if (r.Has("kernels")) {
    ObjectReader k(r.At("kernels"), "/kernels", src,
                   {"source", "centre", "normalise", "nan_policy", "memory_budget_mb", "cache", "precision", "intensity", "precomputed", "tabular",
                    "sources", "source_weighting", "missing_source"});
    const std::string source = k.Choice("source", "images", {"images", "precomputed", "tabular"});
    c.kernels.source = source == "images" ? KernelSource::Images : source == "precomputed" ? KernelSource::Precomputed : KernelSource::Tabular;
    c.kernels.centre = k.Bool("centre", c.kernels.centre);
    c.kernels.normalise = k.Bool("normalise", c.kernels.normalise);
    c.kernels.nanPolicy = k.Choice("nan_policy", "drop_voxel", {"drop_voxel", "zero"}) == "zero" ? kernels::NanPolicy::Zero : kernels::NanPolicy::DropVoxel;
    c.kernels.memoryBudgetMb = k.Number("memory_budget_mb", 0, 0, 1e9);
    c.kernels.cache = k.Bool("cache", c.kernels.cache);
    c.kernels.precision = k.Choice("precision", "float64", {"float64", "float32"}) == "float32" ? KernelPrecision::Float32 : KernelPrecision::Float64;
    if (k.Has("intensity")) c.kernels.intensity = ParseIntensity(k.At("intensity"), "/kernels/intensity", src, baseDir);
    if (k.Has("precomputed")) c.kernels.precomputed = ParsePrecomputed(k.At("precomputed"), "/kernels/precomputed", src, baseDir);
    if (k.Has("tabular")) c.kernels.tabular = ParseTabular(k.At("tabular"), "/kernels/tabular", src, baseDir);
    if (k.Has("sources")) {
      for (const char* key : {"source", "precomputed", "tabular"})
        if (k.Has(key))
          k.FailAt(std::string("/kernels/") + key, "give the kernels either as /kernels/sources (a list of named sources) or by /kernels/source with its "
                                                   "sections, not both");
      if (c.kernels.intensity.scaling != kernels::IntensityScaling::None)
        k.FailAt("/kernels/intensity", "with /kernels/sources, give intensity scaling per images source (/kernels/sources/<i>/intensity)");
      const Json& list = k.At("sources");
      if (!list.is_array() || list.empty())
        k.Fail("sources", "a non-empty array of sources {\"name\": ..., \"kind\": \"images\" | \"tabular\" | \"precomputed\" | \"connectivity\", ...}");
      c.kernels.source = KernelSource::Sources;
      c.kernels.sourceWeighting = k.Choice("source_weighting", "none", {"none", "equal"}) == "equal" ? SourceWeighting::Equal : SourceWeighting::None;
      c.kernels.missingSource = k.Choice("missing_source", "error", {"error", "drop"}) == "drop" ? MissingSource::Drop : MissingSource::Error;
      std::set<std::string> names;
      for (std::size_t i = 0; i < list.size(); ++i) {
        std::string p = "/kernels/sources/";
        p += std::to_string(i);
        ObjectReader e(list[i], p, src,
                       {"name", "kind", "image_column", "mask", "nan_policy", "precomputed", "tabular", "connectivity", "atlas", "bids_entities", "intensity"});
        SourceSpec spec;
        spec.pointer = p;
        spec.name = e.RequiredString("name");
        for (char ch : spec.name)
          if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.'))
            e.FailAt(p + "/name", "a source name made of letters, digits, '_', '-' and '.' (it prefixes the kernel names), found \"" + spec.name + "\"");
        if (!names.insert(spec.name).second) e.FailAt(p + "/name", "two sources are named \"" + spec.name + "\"; give each a distinct name");
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
          if (spec.precomputed.empty()) e.FailAt(p + "/precomputed", "expected at least one {\"name\", \"file\"} kernel");
        }
        if (spec.kind == KernelSource::Tabular) {
          if (!e.Has("tabular")) e.FailAt(p + "/tabular", "a tabular source needs a \"tabular\" section with a table and column groups");
          spec.tabular = ParseTabular(e.At("tabular"), p + "/tabular", src, baseDir);
        }
        if (spec.kind == KernelSource::Connectivity) {
          if (!e.Has("connectivity"))
            e.FailAt(p + "/connectivity", "a connectivity source needs a \"connectivity\" section, e.g. {\"column\": \"connectome\", \"kernels\": \"node\"}");
          ObjectReader cr(e.At("connectivity"), p + "/connectivity", src, {"column", "kernels", "nodes"});
          auto& conn = spec.connectivity;
          conn.column = cr.RequiredString("column");
          const std::string kinds = cr.Choice("kernels", "node", {"node", "network", "whole"});
          conn.kernels = kinds == "network" ? ConnectivitySpec::Kernels::Network
                         : kinds == "whole" ? ConnectivitySpec::Kernels::Whole
                                            : ConnectivitySpec::Kernels::Node;
          if (cr.Has("nodes")) conn.nodes = ResolvePath(baseDir, cr.RequiredString("nodes"));
          if (conn.kernels == ConnectivitySpec::Kernels::Network && conn.nodes.empty())
            cr.FailAt(p + "/connectivity/nodes", "kernels \"network\" need a node table (\"nodes\": a TSV with columns \"name\" and \"network\", one row per node)");
        }
        c.kernels.sources.push_back(std::move(spec));
      }
    }
    for (const char* key : {"source_weighting", "missing_source"})
      if (k.Has(key) && c.kernels.source != KernelSource::Sources)
        k.FailAt(std::string("/kernels/") + key, std::string("\"") + key + "\" applies to studies with several sources (/kernels/sources)");
    if (c.kernels.source == KernelSource::Precomputed && c.kernels.precomputed.empty())
      k.FailAt("/kernels/precomputed", "source \"precomputed\" needs a non-empty list of {\"name\", \"file\"} kernels");
    if (c.kernels.source == KernelSource::Tabular && c.kernels.tabular.table.empty())
      k.FailAt("/kernels/tabular", "source \"tabular\" needs a \"tabular\" section with a table and column groups");
  }

  if (r.Has("covariates")) c.covariates = ParseCovariates(r.At("covariates"), src, c.target.column);
  if (r.Has("cv")) {
    ObjectReader cv(r.At("cv"), "/cv", src, {"outer", "inner", "seed", "criterion"});
    if (cv.Has("criterion")) c.cv.criterion = cv.Choice("criterion", "", cv::InnerCriteria(c.target.task));
    if (cv.Has("outer")) c.cv.outer = ParseScheme(cv.At("outer"), "/cv/outer", src);
    if (cv.Has("inner")) c.cv.inner = ParseScheme(cv.At("inner"), "/cv/inner", src);
    if (cv.Has("seed")) {
      c.cv.seed = static_cast<std::uint64_t>(cv.Integer("seed", 0, 0, (1LL << 53)));
      c.cv.seedGiven = true;
    }
  }
  if (!c.cv.seedGiven) c.cv.seed = c.seed;

  if (!r.Has("learners") || !r.At("learners").is_array() || r.At("learners").empty())
    throw ConfigError("config:MissingKey", src, "/learners: expected a non-empty array of learners, e.g. [{\"name\": \"enmkl_svm\"}]");
  std::set<std::string> labels;
  for (std::size_t i = 0; i < r.At("learners").size(); ++i) {
    const std::string p = "/learners/" + std::to_string(i);
    LearnerSpec spec = ParseLearner(r.At("learners")[i], p, src, c.target.task);
    if (!labels.insert(spec.label).second)
      throw ConfigError("config:Value", src, p + ": two learners share the label \"" + spec.label + "\"; give each a distinct \"label\"");
    c.learners.push_back(std::move(spec));
  }
  if (r.Has("permutations")) {
    ObjectReader pr(r.At("permutations"), "/permutations", src, {"count"});
    c.permutations.count = static_cast<int>(pr.Integer("count", 0, 0, 1000000));
  }
  c.output.dir = ResolvePath(baseDir, "results/" + c.name);
  c.output.cacheDir = ResolvePath(baseDir, ".neuromkl_cache");
  if (r.Has("output")) {
    ObjectReader o(r.At("output"), "/output", src, {"dir", "cache_dir", "save_kernels", "weight_maps", "weight_maps_unit_norm",
                                                          "min_subjects_with_signal", "model"});
    if (o.Has("dir")) c.output.dir = ResolvePath(baseDir, o.RequiredString("dir"));
    if (o.Has("cache_dir")) c.output.cacheDir = ResolvePath(baseDir, o.RequiredString("cache_dir"));
    c.output.saveKernels = o.Bool("save_kernels", c.output.saveKernels);
    c.output.weightMaps = o.Bool("weight_maps", c.output.weightMaps);
    c.output.weightMapUnitNorm = o.Bool("weight_maps_unit_norm", c.output.weightMapUnitNorm);
    c.output.minSubjectsWithSignal = static_cast<int>(o.Integer("min_subjects_with_signal", c.output.minSubjectsWithSignal, 0, 1000000000));
    c.output.model = o.Bool("model", c.output.model);
    if (o.Has("save_kernels") && c.output.saveKernels && c.kernels.precision == KernelPrecision::Float32)
      o.FailAt("/output/save_kernels", "the saved kernels are the raw float64 kernels, but /kernels/precision \"float32\" keeps only the compact "
                                       "store after the kernel stage: save them from a float64 run (the kernel cache makes it cheap), or drop save_kernels");
  }
  // A float32 study does not hold the raw kernels that output.save_kernels writes: off unless asked (an error above).
  if (c.kernels.precision == KernelPrecision::Float32) c.output.saveKernels = false;
  return c;
}

StudyConfig LoadStudyConfig(const std::string& path) {
  const std::string text = ReadConfigText(path, "study file");
  return ParseStudyConfig(text, fs::absolute(path).parent_path().string(), path);
}

std::string ResolvedConfigJson(const StudyConfig& c, bool forHash) {
  Json j;
  j["name"] = c.name;
  j["description"] = c.description;
  j["subjects"] = {{"table", c.subjects.table}, {"id_column", c.subjects.idColumn}, {"image_column", c.subjects.imageColumn}};
  if (!c.subjects.bids.root.empty()) {
    Json entities = Json::object();
    for (const auto& [key, value] : c.subjects.bids.entities) entities[key] = value;
    j["subjects"]["bids"] = {{"root", c.subjects.bids.root}, {"entities", entities}};
    j["subjects"].erase("image_column");  // unused with bids (and refused there, so the resolved file parses again)
    if (!c.subjects.bids.derivatives.empty()) j["subjects"]["bids"]["derivatives"] = c.subjects.bids.derivatives;
  }
  j["target"] = {{"column", c.target.column}, {"task", ToString(c.target.task)}, {"positive_class", c.target.positiveClass}};
  if (c.target.task == Task::Multiclass) {  // binary and regression studies keep their resolved file unchanged
    j["target"].erase("positive_class");
    j["target"]["multiclass_weights"] = c.target.multiclassWeights == learners::MulticlassWeights::PerClass ? "per_class" : "shared";
  }
  if (c.target.biasCorrection) j["target"]["bias_correction"] = "linear";  // studies without it keep their resolved file unchanged
  auto partJson = [](const AtlasPart& part) {
    Json p = {{"image", part.image}, {"labels", part.labels}, {"prefix", part.prefix}, {"probabilistic", part.probabilistic}};
    if (part.probabilistic) p["threshold"] = part.threshold;
    return p;
  };
  auto atlasJson = [&](const AtlasSpec& atlas) {
    Json a;
    if (atlas.builtin.empty() && atlas.parts.size() == 1) {
      a = partJson(atlas.parts[0]);
    } else if (atlas.builtin.empty()) {
      a = {{"images", Json::array()}};
      for (const auto& part : atlas.parts) a["images"].push_back(partJson(part));
    } else {
      a = atlas.builtin;
    }
    if (!atlas.space.empty()) {
      if (!a.is_object()) a = {{"name", atlas.builtin}};
      a["space"] = atlas.space;
    }
    return a;
  };
  j["atlas"] = atlasJson(c.atlas);
  j["mask"] = c.mask.empty() ? Json(nullptr) : Json(c.mask);
  auto intensityJson = [](const IntensitySpec& in) {
    return Json{{"scaling", in.scaling == kernels::IntensityScaling::ReferenceRegions
                                ? Json{{"reference_region", in.referenceImage.empty() ? Json(in.referenceRegions) : Json{{"image", in.referenceImage}}}}
                                : Json(in.scaling == kernels::IntensityScaling::GlobalMean ? "global_mean" : "none")}};
  };
  Json k = {{"source", ToString(c.kernels.source)},
            {"centre", c.kernels.centre},
            {"normalise", c.kernels.normalise},
            {"nan_policy", c.kernels.nanPolicy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel"},
            {"memory_budget_mb", c.kernels.memoryBudgetMb},
            {"cache", c.kernels.cache},
            {"intensity", intensityJson(c.kernels.intensity)}};
  // In the hashed form only when float32: the keys hashed from float64 studies stay as they were.
  if (!forHash || c.kernels.precision == KernelPrecision::Float32) k["precision"] = c.kernels.precision == KernelPrecision::Float32 ? "float32" : "float64";
  if (!c.kernels.precomputed.empty()) {
    k["precomputed"] = Json::array();
    for (const auto& p : c.kernels.precomputed) k["precomputed"].push_back({{"name", p.name}, {"file", p.file}});
  }
  auto tabularJson = [](const TabularSpec& tab) {
    Json groups = Json::object();
    for (const auto& [name, cols] : tab.groups) groups[name] = cols;
    Json functions = Json::array();
    for (const auto& f : tab.functions) {
      if (f.type == TabularFunction::Type::Linear) functions.push_back({{"type", "linear"}});
      if (f.type == TabularFunction::Type::Gaussian) functions.push_back({{"type", "gaussian"}, {"width", f.values}});
      if (f.type == TabularFunction::Type::Polynomial) functions.push_back({{"type", "polynomial"}, {"degree", f.values}, {"offset", f.offset}});
    }
    return Json{{"table", tab.table},     {"id_column", tab.idColumn}, {"groups", tab.groupsPreset.empty() ? groups : Json(tab.groupsPreset)},
                {"exclude_columns", tab.excludeColumns}, {"functions", functions}, {"standardise", tab.standardise}};
  };
  if (c.kernels.source == KernelSource::Sources) {  // parses again: "source" is implied by "sources"
    k.erase("source");
    if (c.kernels.sourceWeighting == SourceWeighting::Equal) k["source_weighting"] = "equal";
    if (c.kernels.missingSource == MissingSource::Drop) k["missing_source"] = "drop";
    k["sources"] = Json::array();
    for (const auto& sp : c.kernels.sources) {
      Json e = {{"name", sp.name}, {"kind", ToString(sp.kind)}};
      if (sp.kind == KernelSource::Images) {
        if (c.subjects.bids.root.empty()) e["image_column"] = sp.imageColumn;
        e["nan_policy"] = sp.nanPolicy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel";
        if (!sp.mask.empty()) e["mask"] = sp.mask;
        if (sp.ownAtlas) e["atlas"] = atlasJson(sp.atlas);
        if (!c.subjects.bids.root.empty()) {
          Json entities = Json::object();
          for (const auto& [key, value] : sp.bidsEntities) entities[key] = value;
          e["bids_entities"] = entities;
        }
        if (sp.intensity.scaling != kernels::IntensityScaling::None) e["intensity"] = intensityJson(sp.intensity);
      }
      if (sp.kind == KernelSource::Connectivity) {
        using CK = ConnectivitySpec::Kernels;
        const auto& conn = sp.connectivity;
        e["connectivity"] = {{"column", conn.column}, {"kernels", conn.kernels == CK::Node ? "node" : conn.kernels == CK::Network ? "network" : "whole"}};
        if (!conn.nodes.empty()) e["connectivity"]["nodes"] = conn.nodes;
      }
      if (sp.kind == KernelSource::Precomputed) {
        e["precomputed"] = Json::array();
        for (const auto& p : sp.precomputed) e["precomputed"].push_back({{"name", p.name}, {"file", p.file}});
      }
      if (sp.kind == KernelSource::Tabular) e["tabular"] = tabularJson(sp.tabular);
      k["sources"].push_back(e);
    }
  }
  if (!c.kernels.tabular.table.empty()) k["tabular"] = tabularJson(c.kernels.tabular);
  j["kernels"] = k;
  if (c.covariates.Active()) {  // only when given: single-source studies without covariates resolve as before
    j["covariates"] = {{"columns", c.covariates.columns}, {"categorical", c.covariates.categorical}};
    j["covariates"]["fit_on"] = c.covariates.fitOnColumn.empty() ? Json("all") : Json{{"column", c.covariates.fitOnColumn}, {"value", c.covariates.fitOnValue}};
  }
  auto scheme = [](const CvSchemeSpec& s) {
    Json o = {{"scheme", ToString(s.scheme)}, {"k", s.k}, {"repeats", s.repeats}};
    if (!s.groupColumn.empty()) o["group_column"] = s.groupColumn;
    if (!s.foldColumn.empty()) o["fold_column"] = s.foldColumn;
    return o;
  };
  j["cv"] = {{"outer", scheme(c.cv.outer)}, {"inner", scheme(c.cv.inner)}, {"seed", c.cv.seed}};
  if (!c.cv.criterion.empty()) j["cv"]["criterion"] = c.cv.criterion;
  j["learners"] = Json::array();
  for (const auto& l : c.learners) {
    Json params = Json::object();
    for (const auto& [key, v] : l.params)
      if (!l.grid.count(key)) params[key] = v;  // a searched parameter appears only in the grid
    Json grid = Json::object();
    for (const auto& [key, v] : l.grid) grid[key] = v;
    j["learners"].push_back({{"name", l.name}, {"label", l.label}, {"params", params}, {"grid", grid}});
    if (l.classWeightBalanced) j["learners"].back()["class_weight"] = "balanced";  // only when given: resolved files stay as before
    if (!l.classWeights.empty()) {
      Json cw = Json::object();
      for (const auto& [name, w] : l.classWeights) cw[name] = w;
      j["learners"].back()["class_weight"] = cw;
    }
  }
  j["permutations"] = {{"count", c.permutations.count}};
  j["output"] = {{"dir", c.output.dir}, {"cache_dir", c.output.cacheDir}, {"save_kernels", c.output.saveKernels},
                 {"weight_maps", c.output.weightMaps}, {"weight_maps_unit_norm", c.output.weightMapUnitNorm},
                 {"min_subjects_with_signal", c.output.minSubjectsWithSignal}};
  // Left out of the hashes (input hash, permutation checkpoints): exporting the model changes no result.
  if (!forHash) j["output"]["model"] = c.output.model;
  j["seed"] = c.seed;
  j["threads"] = c.threads;
  return j.dump(2);
}

}  // namespace neuromkl::config
