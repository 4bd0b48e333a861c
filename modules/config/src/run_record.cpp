#include "neuromkl/config/run_record.hpp"

#include <cmath>

#include <nlohmann/json.hpp>

namespace neuromkl::config {

using Json = nlohmann::json;

namespace {
Json Vec(const Eigen::VectorXd& v) {
  Json a = Json::array();
  for (Eigen::Index i = 0; i < v.size(); ++i) a.push_back(v[i]);
  return a;
}
}  // namespace

std::string RunRecordJson(const RunRecord& r) {
  Json j;
  j["format"] = "neuromkl-results";
  j["format_version"] = 1;
  j["study"] = r.study;
  j["neuromkl_version"] = r.version;
  j["versions"] = r.versions;
  j["config"] = r.configPath;
  j["input_hash"] = r.inputHash;
  j["seed"] = r.seed;
  j["task"] = r.task;
  j["target"] = {{"column", r.targetColumn}};
  if (r.task == "classification") {
    j["target"]["positive_class"] = r.positiveClass;
    j["target"]["negative_class"] = r.negativeClass;
  }
  j["subjects"] = {{"labelled", r.labelledSubjects}, {"targets", r.targets}, {"excluded", Json::array()}};
  for (const auto& [id, why] : r.excludedSubjects) j["subjects"]["excluded"].push_back({{"id", id}, {"reason", why}});
  j["kernels"] = {{"source", r.kernelSource}, {"cache", r.kernelCache}, {"count", r.kernels.size()}, {"regions", Json::array()},
                  {"excluded", Json::array()}, {"preprocessing", {{"centre", r.centre}, {"normalise", r.normalise}}}};
  for (const auto& k : r.kernels)
    j["kernels"]["regions"].push_back({{"name", k.name}, {"label", k.label}, {"features", k.features},
                                       {"atlas_voxels", k.atlasVoxels}, {"non_finite_voxels", k.nonFiniteVoxels},
                                       {"zeroed_values", k.zeroedValues}});
  for (const auto& k : r.excludedKernels)
    j["kernels"]["excluded"].push_back({{"name", k.info.name}, {"label", k.info.label}, {"reason", k.reason}});
  j["learners"] = Json::array();
  for (const auto& l : r.learners) {
    Json e = {{"label", l.label}, {"name", l.name}, {"params", l.params}};
    if (!l.error.empty()) {
      e["status"] = "failed";
      e["error"] = l.error;
    } else {
      const auto& m = l.model;
      e["status"] = std::string(learners::ToString(m.info.status));
      e["fit"] = {{"iterations", m.info.iterations}, {"inner_solves", m.info.innerSolves}, {"inner_iterations", m.info.innerIterations},
                  {"objective", m.info.objective}, {"gap", m.info.gap}, {"seconds", m.info.seconds}};
      e["kernel_weights"] = Vec(m.beta);
      e["bias"] = m.bias;
      e["dual_coefficients"] = Vec(m.coef);
      e["training_decision_values"] = l.decision;
      e["training_predictions"] = l.predicted;
    }
    j["learners"].push_back(e);
  }
  j["seconds"] = r.seconds;
  j["warnings"] = r.warnings;
  return j.dump(2) + "\n";
}

}  // namespace neuromkl::config
