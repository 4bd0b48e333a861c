// CheckStudyConfig: every rule a study's values must satisfy, in one place, as LIBSVM's
// svm_check_parameter and OSQP's validate_settings check a problem whoever built it. The JSON reader,
// batch expansion and the Python binding all call it; errors name the JSON pointer the value has in a
// study file (the parsed study keeps the pointers whose form depends on the file: sources, covariates).
// Rules the reader applies as it reads (numbers in their range, non-empty required strings, keys and
// learners that do not apply to the task) are applied again here for a StudyConfig made in code, with
// the same words: a file never reaches them here.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <utility>

#include <fmt/format.h>

#include "json_reader.hpp"
#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/learners/feature_learners.hpp"
#include "study_limits.hpp"
#include "study_rules.hpp"

namespace neuromkl::config {

using learners::Task;

namespace {

/// Raises the study's ConfigErrors: `config.path` names the file, the pointer the value.
class Checker {
 public:
  explicit Checker(const StudyConfig& c) : source_(c.path) {}

  [[noreturn]] void Fail(const std::string& pointer, const std::string& message, const char* code = "config:Value") const {
    throw ConfigError(code, source_, pointer + ": " + message);
  }
  template <typename Int>
  void Integer(const std::string& pointer, Int value, IntegerRange range) const {
    if (std::cmp_less(value, range.lo) || std::cmp_greater(value, range.hi))
      Fail(pointer, fmt::format("expected an integer in [{}, {}], found {}", range.lo, range.hi, Describe(Json(value))));
  }
  void Number(const std::string& pointer, double value, NumberRange range) const {
    if (!(value >= range.lo && value <= range.hi))
      Fail(pointer, fmt::format("expected a number in [{}, {}], found {}", FormatDouble(range.lo), std::isinf(range.hi) ? "inf" : FormatDouble(range.hi),
                                Describe(Json(value))));
  }
  void NonEmpty(const std::string& pointer, const std::string& value, const char* code = "config:Value") const {
    if (value.empty()) Fail(pointer, "expected a non-empty string, found " + Describe(Json(value)), code);
  }
  /// An object's keys (learner params and grid) against the allowed ones, as the reader says it.
  void KnownKeys(const std::string& pointer, const std::vector<std::string>& keys, const std::vector<std::string>& allowed) const {
    for (const auto& key : keys)
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        const std::string hint = DidYouMean(key, allowed);
        throw ConfigError("config:UnknownKey", source_,
                          fmt::format("unknown key \"{}\" in {}{}", key, pointer, hint.empty() ? "; allowed keys: " + Join(allowed, ", ") : hint));
      }
  }

 private:
  std::string source_;
};

bool IsName(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.'; });
}

std::string Indexed(const std::string& pointer, std::size_t i) { return pointer + "/" + std::to_string(i); }

void CheckBidsEntities(const Checker& k, const std::vector<std::pair<std::string, std::string>>& entities, const std::string& ptr) {
  if (entities.empty()) k.Fail(ptr, kBidsEntitiesExpected);
  for (const auto& [key, value] : entities) {
    const std::string p = ptr + "/" + key;
    k.NonEmpty(p, value);
    const bool keyOk = !key.empty() && std::all_of(key.begin(), key.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) != 0; });
    if (!keyOk) k.Fail(p, "a BIDS entity key is made of letters and digits (e.g. \"space\", \"desc\", \"label\", \"suffix\")");
    if (key == "sub") k.Fail(p, "\"sub\" is set per participant from the subjects table; remove it");
  }
}

void CheckSubjectsAndTarget(const Checker& k, const StudyConfig& c) {
  k.NonEmpty("/subjects/table", c.subjects.table);
  if (!c.subjects.bids.root.empty()) CheckBidsEntities(k, c.subjects.bids.entities, "/subjects/bids/entities");
  const TargetSpec& t = c.target;
  k.NonEmpty("/target/column", t.column);
  if (t.task != Task::Classification && !t.positiveClass.empty()) k.Fail("/target/positive_class", TargetKeyMisplaced("positive_class", t.task));
  if (t.multiclassWeights == learners::MulticlassWeights::PerClass && t.task != Task::Multiclass)
    k.Fail("/target/multiclass_weights", "multiclass_weights applies to task \"multiclass\" only, but task is \"" + ToString(t.task) + "\"");
  if (t.biasCorrection && t.task != Task::Regression) k.Fail("/target/bias_correction", TargetKeyMisplaced("bias_correction", t.task));
  if (t.confounds.Active() && t.task != Task::Regression) k.Fail("/target/confounds", TargetKeyMisplaced("confounds", t.task));
}

/// An atlas section at `ptr` (/atlas or an images source's).
void CheckAtlas(const Checker& k, const AtlasSpec& atlas, const std::string& ptr) {
  std::set<std::string> prefixes;
  for (std::size_t i = 0; i < atlas.parts.size(); ++i) {
    const AtlasPart& part = atlas.parts[i];
    const std::string p = atlas.parts.size() == 1 ? ptr : Indexed(ptr + "/images", i);  // one image is given as "image" + "labels"
    k.NonEmpty(p + "/image", part.image);
    k.NonEmpty(p + "/labels", part.labels);
    k.Number(p + "/threshold", part.threshold, kThresholdRange);
    if (part.threshold >= kThresholdRange.hi) k.Fail(p + "/threshold", "expected a probability threshold in [0, 1), found 1: no voxel would be kept");
    if (part.threshold != 0 && !part.probabilistic) k.Fail(p + "/threshold", "\"threshold\" applies to probabilistic atlases: add \"probabilistic\": true");
    if (atlas.parts.size() > 1 && part.prefix.empty())
      k.Fail(p + "/prefix", "several atlas images need a \"prefix\" each (it keeps region names apart, e.g. \"ctx\", \"sub\")");
    if (!prefixes.insert(part.prefix).second) k.Fail(p + "/prefix", "duplicate prefix \"" + part.prefix + "\"");
  }
  if (!atlas.builtin.empty() && atlas.builtin != "aal")
    k.Fail(ptr, "unknown built-in atlas \"" + atlas.builtin + "\"; built in: aal" + DidYouMean(atlas.builtin, {"aal"}));
}

/// A list of precomputed kernels at `ptr` (/kernels/precomputed or a source's).
void CheckPrecomputed(const Checker& k, const std::vector<PrecomputedKernelSpec>& list, const std::string& ptr) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string p = Indexed(ptr, i);
    k.NonEmpty(p + "/name", list[i].name);
    k.NonEmpty(p + "/file", list[i].file);
    if (!names.insert(list[i].name).second) k.Fail(p + "/name", "duplicate kernel name \"" + list[i].name + "\"");
  }
}

/// A tabular section at `ptr` that names a table.
void CheckTabular(const Checker& k, const TabularSpec& tab, const std::string& ptr) {
  if (tab.groups.empty() && tab.groupsPreset.empty()) k.Fail(ptr + "/groups", kTabularGroupsExpected);
  for (const auto& [name, columns] : tab.groups)
    if (columns.empty()) k.Fail(ptr + "/groups/" + name, "expected a non-empty array of column names, found [] (array)");
  if (tab.functions.empty()) k.Fail(ptr + "/functions", "expected a non-empty array of {\"type\": \"linear\" | \"gaussian\" | \"polynomial\", ...}, found [] (array)");
  for (std::size_t i = 0; i < tab.functions.size(); ++i) {
    const TabularFunction& fn = tab.functions[i];
    const std::string p = Indexed(ptr + "/functions", i);
    const bool linear = fn.type == TabularFunction::Type::Linear;
    if (!linear && fn.values.empty()) k.Fail(p, "expected at least one value");
    if (linear && !fn.values.empty()) k.Fail(p, "a linear kernel takes no width or degree");
    for (const double v : fn.values)
      if (!TabularFunctionValueOk(fn.type, v))
        k.Fail(p + (fn.type == TabularFunction::Type::Gaussian ? "/width" : "/degree"), TabularFunctionValueExpected(fn.type) + ", found " + Describe(Json(v)));
    k.Number(p + "/offset", fn.offset, kOffsetRange);
  }
}

/// Source i of /kernels/sources; `names` collects the names seen so far.
void CheckSource(const Checker& k, const StudyConfig& c, std::size_t i, std::set<std::string>& names) {
  const SourceSpec& spec = c.kernels.sources[i];
  const std::string p = spec.pointer.empty() ? Indexed("/kernels/sources", i) : spec.pointer;
  k.NonEmpty(p + "/name", spec.name);
  if (!IsName(spec.name))
    k.Fail(p + "/name", "a source name made of letters, digits, '_', '-' and '.' (it prefixes the kernel names), found \"" + spec.name + "\"");
  if (!names.insert(spec.name).second) k.Fail(p + "/name", "two sources are named \"" + spec.name + "\"; give each a distinct name");
  switch (spec.kind) {
    case KernelSource::Images:
      if (!c.subjects.bids.root.empty()) CheckBidsEntities(k, spec.bidsEntities, p + "/bids_entities");
      if (spec.ownAtlas) CheckAtlas(k, spec.atlas, p + "/atlas");
      break;
    case KernelSource::Precomputed:
      CheckPrecomputed(k, spec.precomputed, p + "/precomputed");
      if (spec.precomputed.empty()) k.Fail(p + "/precomputed", "expected at least one {\"name\", \"file\"} kernel");
      break;
    case KernelSource::Tabular:
      if (spec.tabular.table.empty()) k.Fail(p + "/tabular", "a tabular source needs a \"tabular\" section with a table and column groups");
      CheckTabular(k, spec.tabular, p + "/tabular");
      break;
    case KernelSource::Connectivity:
      k.NonEmpty(p + "/connectivity/column", spec.connectivity.column);
      if (spec.connectivity.kernels == ConnectivitySpec::Kernels::Network && spec.connectivity.nodes.empty())
        k.Fail(p + "/connectivity/nodes", "kernels \"network\" need a node table (\"nodes\": a TSV with columns \"name\" and \"network\", one row per node)");
      break;
    case KernelSource::Sources:
      k.Fail(p + "/kind", "expected one of images, tabular, precomputed, connectivity, found \"sources\"");
  }
}

void CheckKernels(const Checker& k, const StudyConfig& c) {
  const KernelSpec& ks = c.kernels;
  k.Number("/kernels/memory_budget_mb", ks.memoryBudgetMb, kMemoryBudgetRange);
  CheckPrecomputed(k, ks.precomputed, "/kernels/precomputed");
  if (!ks.tabular.table.empty()) CheckTabular(k, ks.tabular, "/kernels/tabular");
  if (ks.source == KernelSource::Sources) {
    if (ks.intensity.scaling != kernels::IntensityScaling::None)
      k.Fail("/kernels/intensity", "with /kernels/sources, give intensity scaling per images source (/kernels/sources/<i>/intensity)");
    if (ks.sources.empty())
      k.Fail("/kernels/sources", "expected a non-empty array of sources {\"name\": ..., \"kind\": \"images\" | \"tabular\" | \"precomputed\" | \"connectivity\", "
                                 "...}, found [] (array)");
    std::set<std::string> names;
    for (std::size_t i = 0; i < ks.sources.size(); ++i) CheckSource(k, c, i, names);
  }
  if (ks.precision == KernelPrecision::Float32) {
    // The compact store holds the kernel stage's kernels; a fold's standardised or imputed tabular kernels are its own.
    auto refuse = [&](const TabularSpec& tab, const std::string& ptr) {
      if (tab.InFold())
        k.Fail(ptr + (tab.standardise ? "/standardise" : "/impute"),
               "the folds form a standardised or imputed tabular source's kernels from its columns, each with its own training subjects' "
               "statistics, in float64; \"float32\" (the compact store of the kernel stage's kernels) does not apply: use \"precision\": \"float64\"");
    };
    if (ks.source == KernelSource::Tabular) refuse(ks.tabular, "/kernels/tabular");
    if (ks.source == KernelSource::Sources && ks.missingSource == MissingSource::Impute)
      k.Fail("/kernels/missing_source", "the folds impute a lacking subject's rows of a source's kernels from their own training subjects, in "
                                        "float64; \"float32\" (the compact store of the kernel stage's kernels) does not apply: use \"precision\": "
                                        "\"float64\", or missing_source \"drop\"");
    for (std::size_t i = 0; ks.source == KernelSource::Sources && i < ks.sources.size(); ++i)
      if (ks.sources[i].kind == KernelSource::Tabular)
        refuse(ks.sources[i].tabular, (ks.sources[i].pointer.empty() ? Indexed("/kernels/sources", i) : ks.sources[i].pointer) + "/tabular");
  }
  if (ks.source == KernelSource::Precomputed && ks.precomputed.empty())
    k.Fail("/kernels/precomputed", "source \"precomputed\" needs a non-empty list of {\"name\", \"file\"} kernels");
  if (ks.source == KernelSource::Tabular && ks.tabular.table.empty())
    k.Fail("/kernels/tabular", "source \"tabular\" needs a \"tabular\" section with a table and column groups");
}

/// Column names of /covariates: non-empty, each listed once. `pointer(i)` is where name i is.
template <typename PointerOf>
void CheckColumns(const Checker& k, const std::vector<std::string>& columns, PointerOf pointer) {
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].empty()) k.Fail(pointer(i), "expected a column name (non-empty string), found \"\" (string)", "config:Type");
    if (std::find(columns.begin(), columns.begin() + static_cast<std::ptrdiff_t>(i), columns[i]) != columns.begin() + static_cast<std::ptrdiff_t>(i))
      k.Fail(pointer(i), "column \"" + columns[i] + "\" is listed twice");
  }
}

void CheckCovariateColumns(const Checker& k, const CovariateSpec& cov) {
  CheckColumns(k, cov.columns, [&](std::size_t i) { return cov.ColumnPointer(i); });
  CheckColumns(k, cov.categorical, [&](std::size_t i) { return cov.CategoricalPointer(i); });
  for (std::size_t i = 0; i < cov.categorical.size(); ++i)
    if (std::find(cov.columns.begin(), cov.columns.end(), cov.categorical[i]) != cov.columns.end())
      k.Fail(cov.CategoricalPointer(i), "column \"" + cov.categorical[i] + "\" is also in " + cov.pointer + "/columns (numeric); list it once");
}

void CheckCovariates(const Checker& k, const CovariateSpec& cov, const std::string& targetColumn) {
  CheckCovariateColumns(k, cov);
  if (cov.listForm && cov.columns.empty()) k.Fail(cov.pointer, "expected at least one column name");
  auto all = cov.columns;
  all.insert(all.end(), cov.categorical.begin(), cov.categorical.end());
  for (const auto& col : all)
    if (col == targetColumn)
      k.Fail(cov.pointer, "the target column \"" + col + "\" cannot be " +
                              (cov.pointer == "/target/confounds" ? "its own confound (regressing it out leaves nothing to predict)"
                                                                  : "a covariate (regressing it out removes the signal)"));
}

/// The image sources of a study: its own images, or the names of its image sources.
std::vector<std::string> ImageSourceNames(const StudyConfig& c) {
  std::vector<std::string> out;
  if (c.kernels.source == KernelSource::Images) out.push_back("images");
  for (const auto& s : c.kernels.sources)
    if (s.kind == KernelSource::Images) out.push_back(s.name);
  return out;
}

void CheckHarmonisation(const Checker& k, const StudyConfig& c) {
  const HarmonisationSpec& h = c.harmonisation;
  if (!h.Active()) return;
  k.NonEmpty("/harmonisation/site_column", h.siteColumn);
  if (h.siteColumn == c.target.column)
    k.Fail("/harmonisation/site_column", "the site column cannot be the target \"" + h.siteColumn + "\" (harmonising would remove what is predicted)");
  const CovariateSpec& cov = h.preserve;
  CheckCovariateColumns(k, cov);
  auto all = cov.columns;
  all.insert(all.end(), cov.categorical.begin(), cov.categorical.end());
  for (const auto& col : all) {
    if (col == c.target.column)
      k.Fail(cov.pointer, "the target \"" + col + "\" cannot be in the harmonisation's design: preserving its effect would use the labels of the "
                          "held-out subjects the harmonisation is applied to (Fortin et al. 2017 preserve biological covariates, never the outcome "
                          "being predicted)");
    if (col == h.siteColumn) k.Fail(cov.pointer, "the site column \"" + col + "\" cannot also be a preserved covariate");
  }
  std::vector<std::string> names = ImageSourceNames(c);
  if (c.kernels.source == KernelSource::Tabular) names.push_back("tabular");
  for (const auto& s : c.kernels.sources)
    if (s.kind == KernelSource::Tabular) names.push_back(s.name);
  if (names.empty())
    k.Fail("/harmonisation", "harmonisation applies to image sources (ComBat on their voxels) and tabular sources (on their columns), and this "
                             "study has neither; connectivity and precomputed sources are not harmonised");
  for (std::size_t i = 0; i < h.sources.size(); ++i)
    if (c.kernels.source != KernelSource::Sources || std::find(names.begin(), names.end(), h.sources[i]) == names.end())
      k.Fail(Indexed("/harmonisation/sources", i),
             "expected the name of an image or tabular source of /kernels/sources (" +
                 (c.kernels.source == KernelSource::Sources ? Join(names, ", ") : std::string("this study has no sources list")) + "), found " +
                 Describe(Json(h.sources[i])));
  if (c.kernels.precision == KernelPrecision::Float32)
    k.Fail("/kernels/precision", "a harmonised study forms each fold's kernels from the harmonised voxels in float64; \"float32\" (the compact store "
                                 "of precomputed kernels) does not apply: use \"float64\"");
}

void CheckScheme(const Checker& k, const CvSchemeSpec& s, const std::string& ptr) {
  k.Integer(ptr + "/k", s.k, kFoldsRange);
  k.Integer(ptr + "/repeats", s.repeats, kRepeatsRange);
  if ((s.scheme == CvScheme::LeaveOneGroupOut || s.scheme == CvScheme::GroupKFold) && s.groupColumn.empty())
    k.Fail(ptr + "/group_column", "scheme \"" + ToString(s.scheme) + "\" needs a group_column (a column of the subjects table)");
  if (s.scheme == CvScheme::Custom && s.foldColumn.empty())
    k.Fail(ptr + "/fold_column", "scheme \"custom\" needs a fold_column (a column of the subjects table giving each subject's fold)");
  if (s.repeats > 1 && s.scheme != CvScheme::RepeatedKFold)
    k.Fail(ptr + "/repeats", "repeats > 1 needs scheme \"repeated_kfold\", found scheme \"" + ToString(s.scheme) + "\"");
}

void CheckCv(const Checker& k, const CvSpec& cv, Task task) {
  if (!cv.criterion.empty()) {
    const auto criteria = cv::InnerCriteria(task);
    if (std::find(criteria.begin(), criteria.end(), cv.criterion) == criteria.end())
      k.Fail("/cv/criterion", "expected one of " + Join(criteria, ", ") + ", found \"" + cv.criterion + "\"" + DidYouMean(cv.criterion, criteria));
  }
  CheckScheme(k, cv.outer, "/cv/outer");
  CheckScheme(k, cv.inner, "/cv/inner");
  k.Integer("/cv/seed", cv.seed, kSeedRange);
}

/// The learner's catalogue entry; its name checked against the catalogue and the study's task.
const learners::LearnerInfo& CheckLearnerName(const Checker& k, const LearnerSpec& spec, const std::string& ptr, Task task) {
  std::vector<std::string> names;
  for (const auto& l : learners::LearnerCatalog()) names.push_back(l.name);
  const learners::LearnerInfo* info = learners::FindLearner(spec.name);
  if (!info) k.Fail(ptr + "/name", "expected one of " + Join(names, ", ") + ", found \"" + spec.name + "\"" + DidYouMean(spec.name, names));
  if (auto msg = LearnerTaskProblem(*info, task); !msg.empty()) k.Fail(ptr + "/name", msg);
  return *info;
}

void CheckLearner(const Checker& k, const LearnerSpec& spec, const std::string& ptr, Task task) {
  const learners::LearnerInfo& info = CheckLearnerName(k, spec, ptr, task);
  std::vector<std::string> known, fixed, searched;
  for (const auto& p : info.params) known.push_back(p.name);
  for (const auto& [name, _] : spec.params) fixed.push_back(name);
  for (const auto& [name, _] : spec.grid) searched.push_back(name);
  k.KnownKeys(ptr + "/params", fixed, known);
  k.KnownKeys(ptr + "/grid", searched, known);
  for (const auto& p : info.params) {
    if (auto it = spec.params.find(p.name); it != spec.params.end())
      if (auto msg = learners::CheckParam(p, it->second); !msg.empty()) k.Fail(ptr + "/params/" + p.name, msg);
    if (auto it = spec.grid.find(p.name); it != spec.grid.end()) {
      if (it->second.empty()) k.Fail(ptr + "/grid/" + p.name, "expected a non-empty array of numbers, found [] (array)");
      for (std::size_t i = 0; i < it->second.size(); ++i)
        if (auto msg = learners::CheckParam(p, it->second[i]); !msg.empty()) k.Fail(Indexed(ptr + "/grid/" + p.name, i), msg);
    }
  }
  const std::string cwp = ptr + "/class_weight";
  if (task == Task::Regression && (spec.classWeightBalanced || !spec.classWeights.empty()))
    k.Fail(cwp, "class_weight applies to classification and multiclass targets only, but task is \"regression\"");
  for (const auto& [name, w] : spec.classWeights)
    if (!std::isfinite(w) || !(w > 0)) k.Fail(cwp + "/" + PointerToken(name), "expected a class weight > 0, found " + FormatDouble(w));
}

void CheckLearners(const Checker& k, const std::vector<LearnerSpec>& learners, Task task) {
  if (learners.empty()) k.Fail("/learners", kLearnersExpected, "config:MissingKey");
  std::set<std::string> labels;
  for (std::size_t i = 0; i < learners.size(); ++i) {
    const std::string p = Indexed("/learners", i);
    CheckLearner(k, learners[i], p, task);
    // The label names output files (regions_<label>.tsv): a '/' or ".." would leave the output folder.
    if (learners[i].label.empty() || !IsName(learners[i].label))
      k.Fail(p + "/label", "a label made of letters, digits, '_', '-' and '.' (it names the files regions_<label>.tsv), found " +
                               Describe(Json(learners[i].label)));
    if (!labels.insert(learners[i].label).second)
      k.Fail(p, "two learners share the label \"" + learners[i].label + "\"; give each a distinct \"label\"");
  }
}

/// The analyses name one of the study's learners; an ablation needs something to leave out.
void CheckAnalyses(const Checker& k, const StudyConfig& c) {
  std::vector<std::string> labels;
  for (const auto& l : c.learners) labels.push_back(l.label);
  const auto checkLearner = [&](const std::string& ptr, const std::string& label) {
    if (std::find(labels.begin(), labels.end(), label) == labels.end())
      k.Fail(ptr, "expected the label of one of the study's learners (" + Join(labels, ", ") + "), found " + Describe(Json(label)));
  };
  if (!c.regionScan.learner.empty()) checkLearner("/region_scan/learner", c.regionScan.learner);
  if (c.ablation.learner.empty()) return;
  checkLearner("/ablation/learner", c.ablation.learner);
  k.Integer("/ablation/top_regions", c.ablation.topRegions, kTopRegionsRange);
  if (c.kernels.sources.size() < 2 && c.ablation.topRegions == 0)
    k.Fail("/ablation", "expected something to leave out: the ablation refits the learner without each source (this study has one) and without each of its "
                        "top_regions regions (0 given): set top_regions >= 1, or add a second source");
}

}  // namespace

FeatureFormObstacle WhyNoFeatureForm(const StudyConfig& c) {
  if (c.kernels.source != KernelSource::Images)
    return {c.kernels.source == KernelSource::Sources ? "/kernels/sources" : "/kernels/source",
            "the feature form holds the voxels of one image source; found kernels from " + ToString(c.kernels.source)};
  if (c.target.task == Task::Multiclass) return {"/target/task", "the learners on features fit binary classification or regression; found multiclass"};
  for (std::size_t i = 0; i < c.learners.size(); ++i)
    if (!learners::HasFeatureForm(c.learners[i].name))
      return {Indexed("/learners", i) + "/name", "the learners with a feature form are svm, krr, enmkl_svm, enmkl_krr and simplemkl; found \"" + c.learners[i].name + "\""};
  for (std::size_t i = 0; i < c.learners.size(); ++i)
    if (c.learners[i].name == "simplemkl" && c.target.task == Task::Regression)
      return {Indexed("/learners", i) + "/name", "simplemkl on features fits classification (its C-SVC); found a regression target (its epsilon-SVR has no feature form)"};
  if (c.harmonisation.Active()) return {"/harmonisation", "ComBat harmonises the voxels the folds form kernels from, which the feature form does not do yet"};
  return {};
}

void CheckStudyConfig(const StudyConfig& c) {
  const Checker k(c);
  k.NonEmpty("/name", c.name);
  if (!IsName(c.name)) k.Fail("/name", "expected a name made of letters, digits, '_', '-' and '.' (it names the output folder), found " + Describe(Json(c.name)));
  k.Integer("/seed", c.seed, kSeedRange);
  k.Integer("/threads", c.threads, kThreadsRange);
  CheckSubjectsAndTarget(k, c);
  CheckAtlas(k, c.atlas, "/atlas");
  CheckKernels(k, c);
  CheckCovariates(k, c.covariates, c.target.column);
  if (c.target.confounds.Active() || c.target.confounds.listForm) CheckCovariates(k, c.target.confounds, c.target.column);
  CheckHarmonisation(k, c);
  CheckCv(k, c.cv, c.target.task);
  CheckLearners(k, c.learners, c.target.task);
  k.Integer("/permutations/count", c.permutations.count, kPermutationsRange);
  k.Integer("/statistics/bootstrap_resamples", c.statistics.bootstrapResamples, kBootstrapRange);
  k.Integer("/statistics/paired_swaps", c.statistics.pairedSwaps, kPairedSwapsRange);
  CheckAnalyses(k, c);
  if (c.kernels.representation == KernelRepresentation::Features)
    if (const FeatureFormObstacle why = WhyNoFeatureForm(c); !why.Empty())
      k.Fail(why.pointer, why.reason + " (/kernels/representation \"features\"; \"kernel\" or \"auto\" hold the kernels as matrices)");
  if (c.kernels.representation == KernelRepresentation::Features && c.output.saveKernels)
    k.Fail("/output/save_kernels", "/kernels/representation \"features\" never forms the kernels, so there are none to save: set save_kernels false");
  k.NonEmpty("/output/dir", c.output.dir);
  k.NonEmpty("/output/cache_dir", c.output.cacheDir);
  k.Integer("/output/min_subjects_with_signal", c.output.minSubjectsWithSignal, kMinSubjectsRange);
}

}  // namespace neuromkl::config
