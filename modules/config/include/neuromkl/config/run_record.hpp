#pragma once
// What a run writes to results.json, as plain structs (serialised in config/src/run_record.cpp;
// its schema is documented in configs/results.schema.json).
#include <map>
#include <string>
#include <vector>

#include "neuromkl/kernels/kernel_set.hpp"
#include "neuromkl/learners/learner.hpp"

namespace neuromkl::config {

struct LearnerRecord {
  std::string label, name;
  learners::ParamMap params;
  learners::Model model;            ///< fitted on every labelled subject
  std::vector<double> decision;     ///< decision values on the training subjects (resubstitution)
  std::vector<std::string> predicted;  ///< predicted class / value per labelled subject
  std::string error;                ///< non-empty when the fit failed (the run goes on with other learners)
};

struct RunRecord {
  std::string study, version, configPath, inputHash, task, targetColumn, positiveClass, negativeClass;
  std::uint64_t seed = 0;
  std::vector<std::string> labelledSubjects;
  std::vector<double> targets;      ///< +-1 (classification) or values, per labelled subject
  std::vector<std::pair<std::string, std::string>> excludedSubjects;  ///< id, reason
  std::vector<kernels::KernelInfo> kernels;
  std::vector<kernels::ExcludedKernel> excludedKernels;
  std::string kernelSource, kernelCache;  ///< "computed" / "cache hit"
  std::map<std::string, double> seconds;  ///< per stage
  std::vector<LearnerRecord> learners;
  std::vector<std::string> warnings;
  std::map<std::string, std::string> versions;
  bool centre = true, normalise = true;
};

std::string RunRecordJson(const RunRecord& record);

}  // namespace neuromkl::config
