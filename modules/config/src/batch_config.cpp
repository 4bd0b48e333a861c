#include "neuromkl/config/batch_config.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "file_keys.hpp"
#include "json_reader.hpp"
#include "study_limits.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/hash.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::config {

namespace fs = std::filesystem;

namespace {

/// Makes every file path of a study (or of a patch of one) absolute against `base`, so that
/// pieces from different folders can be merged.
void AbsolutisePaths(Json& j, const std::string& base) {
  if (!j.is_object()) return;
  auto fix = [&](Json& parent, const char* key) {
    if (parent.is_object() && parent.contains(key) && parent[key].is_string() && !parent[key].get<std::string>().empty())
      parent[key] = ResolvePath(base, parent[key].get<std::string>());
  };
  if (j.contains("subjects") && j["subjects"].is_object()) {
    fix(j["subjects"], "table");
    if (j["subjects"].contains("bids")) fix(j["subjects"]["bids"], "root");  // derivatives stay relative to the root
  }
  if (j.contains("atlas") && j["atlas"].is_object()) {
    fix(j["atlas"], "image");
    fix(j["atlas"], "labels");
    if (j["atlas"].contains("images") && j["atlas"]["images"].is_array())
      for (auto& part : j["atlas"]["images"]) {
        fix(part, "image");
        fix(part, "labels");
      }
  }
  fix(j, "mask");
  if (j.contains("kernels") && j["kernels"].is_object()) {
    Json& k = j["kernels"];
    if (k.contains("precomputed") && k["precomputed"].is_array())
      for (auto& e : k["precomputed"]) fix(e, "file");
    if (k.contains("tabular")) fix(k["tabular"], "table");
    if (k.contains("intensity") && k["intensity"].is_object() && k["intensity"].contains("scaling") && k["intensity"]["scaling"].is_object() &&
        k["intensity"]["scaling"].contains("reference_region"))
      fix(k["intensity"]["scaling"]["reference_region"], "image");
  }
  if (j.contains("output")) {
    fix(j["output"], "dir");
    fix(j["output"], "cache_dir");
  }
}

std::string SafeName(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') ? c : '_';
  return out.empty() ? "_" : out;
}

struct AxisValue {
  std::string name;
  Json patch;
};

/// One matrix axis: generic entries {"name": ..., <study keys>...} (cohorts, atlases), or the
/// shorthands of the targets axis ({"column", "task", "positive_class"}) and the learners axis (a
/// learner spec).
std::vector<AxisValue> ReadAxis(const ObjectReader& m, const std::string& axis, const std::string& base, const Json& baseStudy) {
  std::vector<AxisValue> out;
  if (!m.Has(axis)) return out;
  const Json& list = m.At(axis);
  const std::string ptr = "/matrix/" + axis;
  if (!list.is_array() || list.empty()) m.FailAt(ptr, "expected a non-empty array, found " + Describe(list));
  std::set<std::string> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string p = ptr + "/" + std::to_string(i);
    const Json& e = list[i];
    if (!e.is_object()) m.FailAt(p, "expected an object, found " + Describe(e));
    AxisValue v;
    if (axis == "learners") {
      if (!e.contains("name") || !e["name"].is_string()) m.FailAt(p, "expected a learner spec with a \"name\"");
      v.name = e.value("label", e["name"].get<std::string>());
      v.patch = {{"learners", Json::array({e})}};
    } else if (axis == "sources") {
      // A subset of the base study's kernels.sources, by name: {"name": ..., "use": ["mri", "pet"]}.
      const ObjectReader entry(e, p, m.Source(), BatchKeysAt(p));
      const Json* all = baseStudy.contains("kernels") && baseStudy["kernels"].is_object() && baseStudy["kernels"].contains("sources") &&
                                baseStudy["kernels"]["sources"].is_array()
                            ? &baseStudy["kernels"]["sources"]
                            : nullptr;
      if (!all) m.FailAt(ptr, "the sources axis selects among the base study's /kernels/sources, but the base study has none");
      std::vector<std::string> names;
      for (const auto& src : *all)
        if (src.is_object() && src.contains("name") && src["name"].is_string()) names.push_back(src["name"].get<std::string>());
      if (!entry.Has("use") || !entry.At("use").is_array() || entry.At("use").empty())
        m.FailAt(p + "/use", "expected a non-empty array of source names of the base study (" + Join(names, ", ") + ")");
      Json chosen = Json::array();
      std::vector<std::string> used;
      for (std::size_t k = 0; k < entry.At("use").size(); ++k) {
        const Json& u = entry.At("use")[k];
        const std::string q = p + "/use/" + std::to_string(k);
        if (!u.is_string()) m.FailAt(q, "expected a source name, found " + Describe(u));
        const std::string want = u.get<std::string>();
        const auto it = std::find(names.begin(), names.end(), want);
        if (it == names.end()) m.FailAt(q, "the base study has no source \"" + want + "\" (sources: " + Join(names, ", ") + ")" + DidYouMean(want, names));
        if (std::find(used.begin(), used.end(), want) != used.end()) m.FailAt(q, "source \"" + want + "\" is listed twice");
        used.push_back(want);
      }
      for (const auto& src : *all)  // in the base study's order
        if (std::find(used.begin(), used.end(), src.value("name", std::string())) != used.end()) chosen.push_back(src);
      v.name = entry.String("name", Join(used, "+"));  // the base study's paths are absolute already
      v.patch = {{"kernels", {{"sources", chosen}}}};
    } else if (axis == "targets") {
      if (!e.contains("column") || !e["column"].is_string()) m.FailAt(p, "expected {\"column\": ..., \"task\": ...} (optional \"name\", \"positive_class\")");
      Json target = e;
      v.name = e.value("name", e["column"].get<std::string>());
      target.erase("name");
      v.patch = {{"target", target}};
    } else {
      if (!e.contains("name") || !e["name"].is_string()) m.FailAt(p + "/name", "each entry needs a \"name\" (it becomes part of the study names)");
      v.name = e["name"].get<std::string>();
      v.patch = e;
      v.patch.erase("name");
      AbsolutisePaths(v.patch, base);
    }
    v.name = SafeName(v.name);
    if (!seen.insert(v.name).second) m.FailAt(p, "two entries of " + axis + " are named \"" + v.name + "\"");
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace

bool IsBatchFile(const std::string& path) {
  try {
    const Json j = ParseConfigJson(ReadConfigText(path, "file"), path);
    return j.is_object() && (j.contains("studies") || j.contains("matrix"));
  } catch (const Error&) {
    return false;
  }
}

namespace {

/// The studies of one batch file as they are expanded.
struct Expansion {
  BatchConfig& batch;
  std::string source;  ///< the batch file, as errors name it
  Json overrides;      ///< the batch's "overrides" (absolute paths)

  /// One study: base (absolute paths) <- batch overrides <- axis patches <- its own overrides; then read and
  /// checked (CheckStudyConfig) as a study file run on its own would be, its error kept for `validate`.
  void Add(const std::string& name, std::string origin, std::map<std::string, std::string> axes, Json study, const std::vector<Json>& patches) {
    study.merge_patch(overrides);
    for (const auto& p : patches) study.merge_patch(p);
    BatchStudy s;
    s.name = SafeName(name);
    s.origin = std::move(origin);
    s.axes = std::move(axes);
    study["name"] = s.name;
    if (!study.contains("output") || !study["output"].is_object()) study["output"] = Json::object();
    study["output"]["dir"] = batch.StudyDir(s.name);
    study["output"]["cache_dir"] = batch.CacheDir();
    if (!study.contains("kernels") || !study["kernels"].is_object()) study["kernels"] = Json::object();
    study["kernels"]["cache"] = true;  // shared work: studies with the same kernel inputs compute them once
    if (batch.threads > 0) study["threads"] = batch.threads;
    s.studyJson = study.dump(2);
    try {
      s.config = ParseStudyConfig(s.studyJson, batch.baseDir, source + " (study \"" + s.name + "\", " + s.origin + ")");
    } catch (const Error& e) {
      s.error = e.what();
      s.errorCode = e.code();
    }
    batch.studies.push_back(std::move(s));
  }
};

/// "studies": study files, each with an optional name and overrides.
void ExpandStudyList(const ObjectReader& r, Expansion& x) {
  const Json& list = r.At("studies");
  if (!list.is_array()) r.Fail("studies", "an array of study files or {\"file\", \"name\", \"overrides\"} objects");
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string p = "/studies/" + std::to_string(i);
    std::string file, name;
    Json own = Json::object();
    if (list[i].is_string()) {
      file = list[i].get<std::string>();
    } else {
      const ObjectReader e(list[i], p, x.source, BatchKeysAt(p));
      file = e.RequiredString("file");
      name = e.String("name", "");
      if (e.Has("overrides")) {
        own = e.At("overrides");
        if (!own.is_object()) e.Fail("overrides", "an object of study keys");
        AbsolutisePaths(own, x.batch.baseDir);
      }
    }
    const std::string studyPath = ResolvePath(x.batch.baseDir, file);
    Json study = ParseConfigJson(ReadConfigText(studyPath, "study file named in " + x.source + " " + p), studyPath);
    if (!study.is_object()) r.FailAt(p, "the study file " + studyPath + " is not a JSON object");
    AbsolutisePaths(study, fs::path(studyPath).parent_path().string());
    if (name.empty()) name = study.value("name", fs::path(studyPath).stem().string());
    x.Add(name, "studies[" + std::to_string(i) + "]: " + file, {}, study, {own});
  }
}

/// "matrix": the base study times every axis given (the last axis varies fastest).
void ExpandMatrix(const ObjectReader& r, Expansion& x) {
  const ObjectReader m(r.At("matrix"), "/matrix", x.source, BatchKeysAt("/matrix"));
  if (!m.Has("base")) m.FailAt("/matrix/base", "the matrix needs a \"base\" study (a file name or an inline study object)");
  Json base;
  if (m.At("base").is_string()) {
    const std::string basePath = ResolvePath(x.batch.baseDir, m.At("base").get<std::string>());
    base = ParseConfigJson(ReadConfigText(basePath, "base study of " + x.source + " /matrix/base"), basePath);
    AbsolutisePaths(base, fs::path(basePath).parent_path().string());
  } else if (m.At("base").is_object()) {
    base = m.At("base");
    if (!base.contains("name")) base["name"] = x.batch.name;
    AbsolutisePaths(base, x.batch.baseDir);
  } else {
    m.Fail("base", "a study file name or an inline study object");
  }
  const std::vector<std::string> axisOrder = {"cohorts", "targets", "atlases", "sources", "learners"};
  const std::map<std::string, std::string> axisKey = {
      {"cohorts", "cohort"}, {"targets", "target"}, {"atlases", "atlas"}, {"sources", "sources"}, {"learners", "learner"}};
  std::vector<std::pair<std::string, std::vector<AxisValue>>> axes;
  for (const auto& a : axisOrder)
    if (auto values = ReadAxis(m, a, x.batch.baseDir, base); !values.empty()) axes.emplace_back(a, std::move(values));
  if (axes.empty()) m.FailAt("/matrix", "a matrix needs at least one axis: cohorts, targets, atlases, sources or learners");
  std::vector<std::size_t> idx(axes.size(), 0);
  for (;;) {
    std::vector<std::string> parts, origin;
    std::map<std::string, std::string> names;
    std::vector<Json> patches;
    for (std::size_t a = 0; a < axes.size(); ++a) {
      const auto& v = axes[a].second[idx[a]];
      parts.push_back(v.name);
      origin.push_back(axes[a].first + "[" + std::to_string(idx[a]) + "]");
      names[axisKey.at(axes[a].first)] = v.name;
      patches.push_back(v.patch);
    }
    x.Add(Join(parts, "_"), "matrix " + Join(origin, " x "), names, base, patches);
    std::size_t a = axes.size();
    while (a > 0 && ++idx[a - 1] == axes[a - 1].second.size()) idx[--a] = 0;  // last axis fastest
    if (a == 0) break;
  }
}

}  // namespace

BatchConfig LoadBatchConfig(const std::string& path) {
  const std::string src = path;
  const Json root = ParseConfigJson(ReadConfigText(path, "batch file"), src);
  const ObjectReader r(root, "", src, BatchKeysAt(""));
  BatchConfig b;
  b.path = path;
  b.baseDir = fs::absolute(path).parent_path().string();
  b.name = r.RequiredString("name");
  if (SafeName(b.name) != b.name) r.Fail("name", "a name made of letters, digits, '_', '-' and '.' (it names the output folder)");
  b.description = r.String("description", "");
  b.threads = static_cast<int>(r.Integer("threads", 0, kThreadsRange.lo, kThreadsRange.hi));
  b.outputDir = ResolvePath(b.baseDir, "results/" + b.name);
  if (r.Has("output")) {
    const ObjectReader o(r.At("output"), "/output", src, BatchKeysAt("/output"));
    b.outputDir = ResolvePath(b.baseDir, o.String("dir", b.outputDir));
  }
  Expansion expansion{b, src, Json::object()};
  if (r.Has("overrides")) {
    expansion.overrides = r.At("overrides");
    if (!expansion.overrides.is_object()) r.Fail("overrides", "an object of study keys applied to every study");
    AbsolutisePaths(expansion.overrides, b.baseDir);
  }
  if (r.Has("studies")) ExpandStudyList(r, expansion);
  if (r.Has("matrix")) ExpandMatrix(r, expansion);
  if (b.studies.empty()) throw ConfigError("config:EmptyBatch", src, "the batch has no study: give \"studies\" and/or a \"matrix\"");
  std::map<std::string, std::string> first;
  for (const auto& s : b.studies)
    if (auto [it, fresh] = first.emplace(s.name, s.origin); !fresh)
      throw ConfigError("config:DuplicateStudy", src,
                        "two studies are named \"" + s.name + "\" (" + it->second + " and " + s.origin +
                            "); names must be unique: give one a \"name\" or rename an axis entry");
  return b;
}

std::string StudyFingerprint(const BatchStudy& study) {
  Hasher h;
  h.Update(std::string_view("neuromkl-batch-study-v1")).Update(study.studyJson);
  return h.Hex();
}

}  // namespace neuromkl::config
