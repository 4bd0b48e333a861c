#include "neuromkl/export/derivative.hpp"

#include <algorithm>
#include <set>

#include "json_format.hpp"

namespace neuromkl::exporting {

namespace {
bool Alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }
char Upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }
}  // namespace

std::string BidsLabel(std::string_view name) {
  std::string out;
  bool partStart = true;
  for (char c : name) {
    if (!Alnum(c)) {
      partStart = true;
      continue;
    }
    out += partStart ? Upper(c) : c;
    partStart = false;
  }
  return out;
}

namespace {
std::string Lower(std::string t) {
  for (char& c : t) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  return t;
}

/// `base` of each name, made unique ignoring case by appending separator + 2, 3, ...
std::vector<std::string> UniqueIgnoringCase(const std::vector<std::string>& bases, const std::string& separator) {
  std::vector<std::string> out;
  std::set<std::string> taken;
  for (const auto& base : bases) {
    std::string label = base;
    for (int n = 2; taken.count(Lower(label)); ++n) label = base + separator + std::to_string(n);
    taken.insert(Lower(label));
    out.push_back(label);
  }
  return out;
}

std::vector<std::string> BidsLabelsOr(const std::vector<std::string>& names, const std::string& fallback) {
  std::vector<std::string> bases;
  for (std::size_t i = 0; i < names.size(); ++i) {
    std::string base = BidsLabel(names[i]);
    bases.push_back(base.empty() ? fallback + std::to_string(i + 1) : base);
  }
  return UniqueIgnoringCase(bases, "");
}
}  // namespace

// Unique ignoring case, so that no two maps share a name on a case-insensitive file system.
std::vector<std::string> BidsLearnerLabels(const std::vector<std::string>& labels) { return BidsLabelsOr(labels, "Learner"); }

std::vector<std::string> BidsClassLabels(const std::vector<std::string>& classNames) { return BidsLabelsOr(classNames, "Class"); }

std::vector<std::string> ClassFileParts(const std::vector<std::string>& classNames) {
  std::vector<std::string> bases;
  for (const auto& name : classNames) {
    std::string part;
    for (const char c : name) {
      if (Alnum(c) || c == '_' || c == '-' || c == '.') {
        part += c;
      } else {
        static const char* hex = "0123456789ABCDEF";
        const auto byte = static_cast<unsigned char>(c);
        part += '%';
        part += hex[byte >> 4];
        part += hex[byte & 15];
      }
    }
    bases.push_back(part);
  }
  return UniqueIgnoringCase(bases, "-");
}

std::string MapSpace(const RunRecord& r) {
  if (!r.atlasSpace.empty()) return BidsLabel(r.atlasSpace);
  if (r.builtinAtlas == "aal") return "MNIColin27";  // AAL is drawn on the MNI single-subject brain (Colin27)
  return "";
}

std::string MapStem(const std::string& space, const std::string& desc) {
  std::string stem = "weights/sub-group";
  if (!space.empty()) {
    stem += "_space-";
    stem += space;
  }
  stem += "_desc-";
  stem += desc;
  stem += "_weights";
  return stem;
}

std::string FoldDesc(const std::string& learner, const cv::OuterFoldResult& fold, bool repeated) {
  std::string desc = learner;
  if (repeated) {
    desc += "Repeat";
    desc += std::to_string(fold.repeat);
  }
  desc += "Fold";
  desc += std::to_string(fold.index);
  return desc;
}

std::string DatasetDescriptionJson(const RunRecord& r) {
  Json j;
  j["Name"] = "neuromkl study " + r.study;
  j["BIDSVersion"] = "1.8.0";
  j["DatasetType"] = "derivative";
  Json generated = {{"Name", "neuromkl"}, {"Version", r.version},
                    {"Description", "region-wise multiple kernel learning with nested cross-validation (study.resolved.json, results.json)"}};
  j["GeneratedBy"] = Json::array({generated});
  if (!r.bidsRoot.empty()) {
    Json source = {{"URL", "file://" + r.bidsRoot}};
    j["SourceDatasets"] = Json::array({source});
    if (!r.bidsDerivatives.empty() && r.bidsDerivatives != r.bidsRoot) j["SourceDatasets"].push_back({{"URL", "file://" + r.bidsDerivatives}});
  }
  j["HowToAcknowledge"] = "Cite neuromkl and the papers listed in CITATION.md of this folder.";
  return j.dump(2) + "\n";
}

std::string WeightMapSidecarJson(const RunRecord& r, const LearnerRecord& lr, const cv::OuterFoldResult* fold, int foldsInMean, const std::string& className,
                                 bool pattern) {
  Json j;
  j["Description"] =
      pattern ? "Activation pattern (Haufe et al. 2014, NeuroImage 87:96-110) of a linear kernel model on the image grid: a = Cov(x~, f) / Var(f) "
                "over the fold's training subjects, x~ the fold's training-mean-centred (and, if kernels are normalised, per-region unit-norm) "
                "image data and f the decision value. Unlike a weight map it shows how the data vary with the prediction: a region that only "
                "suppresses noise has large weights but a pattern near 0. 0 outside the atlas/mask and at dropped voxels."
              : "Voxel weight map of a linear kernel model on the image grid: w = sum_i coef_i x~_i per region, x~ the fold's training-mean-centred "
                "(and, if kernels are normalised, per-region unit-norm) image data, times the region's kernel weight; <w, x~> + bias is the "
                "decision value. 0 outside the atlas/mask and at dropped voxels.";
  j["Learner"] = lr.outcome.label;
  j["LearnerName"] = lr.outcome.name;
  if (!className.empty()) j["Class"] = className + " vs rest: the model of this class's score (multiclass)";
  if (fold) {
    j["Map"] = "outer fold";
    j["Fold"] = fold->index;
    j["Repeat"] = fold->repeat;
    j["TrainingSubjects"] = fold->train.size();
    j["ChosenParameters"] = lr.outcome.grid[fold->chosen];
    j["Bias"] = Num(fold->model.bias);
  } else {
    j["Map"] = "mean over " + std::to_string(foldsInMean) + " outer folds";
    j["FoldsInMean"] = foldsInMean;
  }
  j["Units"] = pattern ? "image intensity (as the kernels saw it) per unit of decision value"
              : r.weightMapUnitNorm ? "arbitrary: each fold map scaled to unit Euclidean norm"
                                   : "decision value per unit of image intensity" +
                                         std::string(r.intensityScaling.empty() ? "" : " after intensity scaling (image / its divisor)");
  j["Normalisation"] = pattern ? "none" : r.weightMapUnitNorm ? "each fold map scaled to unit Euclidean norm before averaging (output.weight_maps_unit_norm = true)"
                                           : "none (output.weight_maps_unit_norm = false)";
  j["KernelCentring"] = r.centre ? "region kernels centred with the training subjects' mean of each fold" : "none";
  j["KernelNormalisation"] = r.normalise ? "region kernels cosine-normalised (training statistics of each fold)" : "none";
  j["IntensityScaling"] = r.intensityScaling.empty() ? "none" : r.intensityScaling;
  j["NanPolicy"] = r.nanPolicy;
  j["Atlas"] = r.atlas;
  if (!r.atlasSpace.empty()) j["AtlasSpace"] = r.atlasSpace;
  const std::string space = MapSpace(r);
  if (!space.empty()) j["Space"] = space;
  j["Sources"] = Json::array({"bids::results.json"});
  return j.dump(2) + "\n";
}

}  // namespace neuromkl::exporting
