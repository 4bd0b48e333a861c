// The inner-CV criteria per task, on their own so that the config reader (and its fuzz target)
// can check /cv/criterion without linking the nested CV.
#include "neuromkl/cv/nested_cv.hpp"

namespace neuromkl::cv {

std::vector<std::string> InnerCriteria(learners::Task task) {
  if (task == learners::Task::Multiclass) return {"balanced_accuracy", "macro_auc", "kappa", "accuracy"};
  if (task == learners::Task::Classification) return {"balanced_accuracy", "auc", "accuracy"};
  return {"mse"};
}

}  // namespace neuromkl::cv
