// The resolved study (study.resolved.json, and the hashed form behind the input hash and the permutation
// checkpoints): every default filled in, in the study file's own keys, so that it parses again.
#include "file_keys.hpp"
#include "json_reader.hpp"
#include "neuromkl/config/study_config.hpp"

namespace neuromkl::config {

using learners::Task;

namespace {

Json SubjectsJson(const SubjectsSpec& s) {
  Json j = {{"table", s.table}, {"id_column", s.idColumn}, {"image_column", s.imageColumn}};
  if (!s.bids.root.empty()) {
    Json entities = Json::object();
    for (const auto& [key, value] : s.bids.entities) entities[key] = value;
    j["bids"] = {{"root", s.bids.root}, {"entities", entities}};
    j.erase("image_column");  // unused with bids (and refused there, so the resolved file parses again)
    if (!s.bids.derivatives.empty()) j["bids"]["derivatives"] = s.bids.derivatives;
  }
  return j;
}

/// A covariate section as the resolved file writes it; "impute" only when it imputes (earlier studies keep their hash).
Json CovariatesJson(const CovariateSpec& c) {
  Json j = {{"columns", c.columns}, {"categorical", c.categorical}};
  j["fit_on"] = c.fitOnColumn.empty() ? Json("all") : Json{{"column", c.fitOnColumn}, {"value", c.fitOnValue}};
  if (c.imputeMedian) j["impute"] = "median";
  return j;
}

Json TargetJson(const TargetSpec& t) {
  Json j = {{"column", t.column}, {"task", ToString(t.task)}, {"positive_class", t.positiveClass}};
  if (t.task == Task::Multiclass) {  // binary and regression studies keep their resolved file unchanged
    j.erase("positive_class");
    j["multiclass_weights"] = t.multiclassWeights == learners::MulticlassWeights::PerClass ? "per_class" : "shared";
  }
  if (t.biasCorrection) j["bias_correction"] = "linear";  // studies without it keep their resolved file unchanged
  if (t.confounds.Active()) j["confounds"] = CovariatesJson(t.confounds);
  return j;
}

Json AtlasPartJson(const AtlasPart& part) {
  Json p = {{"image", part.image}, {"labels", part.labels}, {"prefix", part.prefix}, {"probabilistic", part.probabilistic}};
  if (part.probabilistic) p["threshold"] = part.threshold;
  return p;
}

Json AtlasJson(const AtlasSpec& atlas) {
  Json a;
  if (atlas.builtin.empty() && atlas.parts.size() == 1) {
    a = AtlasPartJson(atlas.parts[0]);
  } else if (atlas.builtin.empty()) {
    a = {{"images", Json::array()}};
    for (const auto& part : atlas.parts) a["images"].push_back(AtlasPartJson(part));
  } else {
    a = atlas.builtin;
  }
  if (!atlas.space.empty()) {
    if (!a.is_object()) a = {{"name", atlas.builtin}};
    a["space"] = atlas.space;
  }
  return a;
}

Json IntensityJson(const IntensitySpec& in) {
  return Json{{"scaling", in.scaling == kernels::IntensityScaling::ReferenceRegions
                              ? Json{{"reference_region", in.referenceImage.empty() ? Json(in.referenceRegions) : Json{{"image", in.referenceImage}}}}
                              : Json(in.scaling == kernels::IntensityScaling::GlobalMean ? "global_mean" : "none")}};
}

Json PrecomputedJson(const std::vector<PrecomputedKernelSpec>& list) {
  Json out = Json::array();
  for (const auto& p : list) out.push_back({{"name", p.name}, {"file", p.file}});
  return out;
}

Json TabularJson(const TabularSpec& tab) {
  Json groups = Json::object();
  for (const auto& [name, cols] : tab.groups) groups[name] = cols;
  Json functions = Json::array();
  for (const auto& f : tab.functions) {
    if (f.type == TabularFunction::Type::Linear) functions.push_back({{"type", "linear"}});
    if (f.type == TabularFunction::Type::Gaussian) functions.push_back({{"type", "gaussian"}, {"width", f.values}});
    if (f.type == TabularFunction::Type::Polynomial) functions.push_back({{"type", "polynomial"}, {"degree", f.values}, {"offset", f.offset}});
  }
  return Json{{"table", tab.table},     {"id_column", tab.idColumn}, {"groups", tab.groupsPreset.empty() ? groups : Json(tab.groupsPreset)},
              {"exclude_columns", tab.excludeColumns}, {"functions", functions}, {"standardise", tab.standardise},
              {"impute", tab.imputeMedian ? "median" : "none"}};
}

const char* NanPolicyName(kernels::NanPolicy policy) { return policy == kernels::NanPolicy::Zero ? "zero" : "drop_voxel"; }

Json SourceJson(const SourceSpec& sp, const SubjectsSpec& subjects) {
  Json e = {{"name", sp.name}, {"kind", ToString(sp.kind)}};
  if (sp.kind == KernelSource::Images) {
    if (subjects.bids.root.empty()) e["image_column"] = sp.imageColumn;
    e["nan_policy"] = NanPolicyName(sp.nanPolicy);
    if (!sp.mask.empty()) e["mask"] = sp.mask;
    if (sp.ownAtlas) e["atlas"] = AtlasJson(sp.atlas);
    if (!subjects.bids.root.empty()) {
      Json entities = Json::object();
      for (const auto& [key, value] : sp.bidsEntities) entities[key] = value;
      e["bids_entities"] = entities;
    }
    if (sp.intensity.scaling != kernels::IntensityScaling::None) e["intensity"] = IntensityJson(sp.intensity);
  }
  if (sp.kind == KernelSource::Connectivity) {
    using CK = ConnectivitySpec::Kernels;
    const auto& conn = sp.connectivity;
    e["connectivity"] = {{"column", conn.column}, {"kernels", conn.kernels == CK::Node ? "node" : conn.kernels == CK::Network ? "network" : "whole"}};
    if (!conn.nodes.empty()) e["connectivity"]["nodes"] = conn.nodes;
  }
  if (sp.kind == KernelSource::Precomputed) e["precomputed"] = PrecomputedJson(sp.precomputed);
  if (sp.kind == KernelSource::Tabular) e["tabular"] = TabularJson(sp.tabular);
  return e;
}

Json KernelsJson(const StudyConfig& c, bool forHash) {
  const KernelSpec& ks = c.kernels;
  Json k = {{"source", ToString(ks.source)},   {"centre", ks.centre}, {"normalise", ks.normalise}, {"nan_policy", NanPolicyName(ks.nanPolicy)},
            {"memory_budget_mb", ks.memoryBudgetMb}, {"cache", ks.cache},   {"intensity", IntensityJson(ks.intensity)}};
  // In the hashed form only when float32: a float64 study's cache keys do not depend on the option.
  if (!forHash || ks.precision == KernelPrecision::Float32) k["precision"] = ks.precision == KernelPrecision::Float32 ? "float32" : "float64";
  // In the hashed form only when features are asked for (auto's choice is recorded in results.json).
  if (!forHash || ks.representation == KernelRepresentation::Features) k["representation"] = ToString(ks.representation);
  if (!ks.precomputed.empty()) k["precomputed"] = PrecomputedJson(ks.precomputed);
  if (ks.source == KernelSource::Sources) {  // parses again: "source" is implied by "sources"
    k.erase("source");
    if (ks.sourceWeighting == SourceWeighting::Equal) k["source_weighting"] = "equal";
    if (ks.missingSource != MissingSource::Error) k["missing_source"] = ks.missingSource == MissingSource::Drop ? "drop" : "impute";
    k["sources"] = Json::array();
    for (const auto& sp : ks.sources) k["sources"].push_back(SourceJson(sp, c.subjects));
  }
  if (!ks.tabular.table.empty()) k["tabular"] = TabularJson(ks.tabular);
  return k;
}

Json CvJson(const CvSpec& cv) {
  auto scheme = [](const CvSchemeSpec& s) {
    Json o = {{"scheme", ToString(s.scheme)}, {"k", s.k}, {"repeats", s.repeats}};
    if (!s.groupColumn.empty()) o["group_column"] = s.groupColumn;
    if (!s.foldColumn.empty()) o["fold_column"] = s.foldColumn;
    return o;
  };
  Json j = {{"outer", scheme(cv.outer)}, {"inner", scheme(cv.inner)}, {"seed", cv.seed}};
  if (!cv.criterion.empty()) j["criterion"] = cv.criterion;
  return j;
}

Json LearnerJson(const LearnerSpec& l) {
  Json params = Json::object();
  for (const auto& [key, v] : l.params)
    if (!l.grid.count(key)) params[key] = v;  // a searched parameter appears only in the grid
  Json grid = Json::object();
  for (const auto& [key, v] : l.grid) grid[key] = v;
  Json j = {{"name", l.name}, {"label", l.label}, {"params", params}, {"grid", grid}};
  if (l.classWeightBalanced) j["class_weight"] = "balanced";  // only when given: a study without class weights resolves without the key
  if (!l.classWeights.empty()) {
    Json cw = Json::object();
    for (const auto& [name, w] : l.classWeights) cw[name] = w;
    j["class_weight"] = cw;
  }
  return j;
}

}  // namespace

std::string ResolvedConfigJson(const StudyConfig& c, bool forHash) {
  Json j;
  j["name"] = c.name;
  j["description"] = c.description;
  j["subjects"] = SubjectsJson(c.subjects);
  j["target"] = TargetJson(c.target);
  j["atlas"] = AtlasJson(c.atlas);
  j["mask"] = c.mask.empty() ? Json(nullptr) : Json(c.mask);
  j["kernels"] = KernelsJson(c, forHash);
  if (c.covariates.Active()) {  // only when given: a study without covariates resolves (and hashes) without the key
    j["covariates"] = CovariatesJson(c.covariates);
  }
  if (c.harmonisation.Active()) {  // likewise only when given
    const auto& h = c.harmonisation;
    j["harmonisation"] = {{"site_column", h.siteColumn},
                          {"covariates", {{"columns", h.preserve.columns}, {"categorical", h.preserve.categorical}}},
                          {"fit_on", h.preserve.fitOnColumn.empty() ? Json("all") : Json{{"column", h.preserve.fitOnColumn}, {"value", h.preserve.fitOnValue}}},
                          {"empirical_bayes", h.empiricalBayes},
                          {"sources", h.sources}};
    if (h.preserve.imputeMedian) j["harmonisation"]["covariates"]["impute"] = "median";
  }
  j["cv"] = CvJson(c.cv);
  j["learners"] = Json::array();
  for (const auto& l : c.learners) j["learners"].push_back(LearnerJson(l));
  j["permutations"] = {{"count", c.permutations.count}};
  // Only when asked for: a study without them resolves (and hashes) as before.
  if (c.statistics != StatisticsSpec{})
    j["statistics"] = {{"bootstrap_resamples", c.statistics.bootstrapResamples}, {"paired_swaps", c.statistics.pairedSwaps}};
  if (!c.regionScan.learner.empty()) j["region_scan"] = {{"learner", c.regionScan.learner}};
  if (!c.ablation.learner.empty()) j["ablation"] = {{"learner", c.ablation.learner}, {"top_regions", c.ablation.topRegions}};
  j["output"] = {{"dir", c.output.dir}, {"cache_dir", c.output.cacheDir}, {"save_kernels", c.output.saveKernels},
                 {"weight_maps", c.output.weightMaps}, {"weight_maps_unit_norm", c.output.weightMapUnitNorm},
                 {"min_subjects_with_signal", c.output.minSubjectsWithSignal}};
  // Left out of the hashes (input hash, permutation checkpoints): exporting the model changes no result.
  if (!forHash) j["output"]["model"] = c.output.model;
  j["seed"] = c.seed;
  j["threads"] = c.threads;
  RequireTableKeys(StudyFileKeys(), j);  // the study file's keys only: the resolved file parses again
  return j.dump(2);
}

}  // namespace neuromkl::config
