#pragma once
// What the study reader and CheckStudyConfig both say: the messages of the rules the reader applies to
// the document and CheckStudyConfig applies again to a StudyConfig made in code.
#include <cmath>
#include <string>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/core/strings.hpp"

namespace neuromkl::config {

inline constexpr const char* kBidsEntitiesExpected =
    "expected an object of BIDS entities that picks one image per participant, e.g. {\"space\": \"MNI152NLin2009cAsym\", \"label\": \"GM\", "
    "\"suffix\": \"probseg\"}";
inline constexpr const char* kTabularGroupsExpected =
    "expected an object {\"kernel name\": [\"column\", ...], ...} with at least one group, or one of \"each_column\", \"all_columns\", "
    "\"each_and_all\"";
inline constexpr const char* kLearnersExpected = "expected a non-empty array of learners, e.g. [{\"name\": \"enmkl_svm\"}]";

/// Keys of /target that apply to one task only: positive_class (binary classification), bias_correction
/// (regression). The message for one given with another task.
inline std::string TargetKeyMisplaced(const std::string& key, learners::Task task) {
  const bool positive = key == "positive_class";
  return key + (positive ? " applies to binary classification only" : " applies to task \"regression\" only") + ", but task is \"" + ToString(task) +
         "\"";
}

/// A learner that does not do the study's task: what is wrong, or "".
inline std::string LearnerTaskProblem(const learners::LearnerInfo& info, learners::Task task) {
  if ((task == learners::Task::Classification || task == learners::Task::Multiclass) && !info.classification)
    return "learner \"" + info.name + "\" does not do classification";
  if (task != learners::Task::Regression || info.regression) return "";
  std::vector<std::string> regression;
  for (const auto& l : learners::LearnerCatalog())
    if (l.regression) regression.push_back(l.name);
  return "learner \"" + info.name + "\" does not do regression; learners for regression: " + Join(regression, ", ");
}

/// A gaussian width (> 0) or a polynomial degree (a whole number > 0).
inline bool TabularFunctionValueOk(TabularFunction::Type type, double v) {
  return v > 0 && std::isfinite(v) && (type == TabularFunction::Type::Gaussian || v == std::floor(v));
}
inline std::string TabularFunctionValueExpected(TabularFunction::Type type) {
  return type == TabularFunction::Type::Gaussian ? "expected positive widths" : "expected positive whole degrees";
}

}  // namespace neuromkl::config
