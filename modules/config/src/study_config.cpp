// The study file's entry points: read (study_parse.cpp), then check (study_check.cpp).
#include "neuromkl/config/study_config.hpp"

#include <filesystem>

#include "json_reader.hpp"

namespace neuromkl::config {

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
std::string ToString(KernelRepresentation r) {
  return r == KernelRepresentation::Kernel ? "kernel" : r == KernelRepresentation::Features ? "features" : "auto";
}
std::string ToString(Task t) { return t == Task::Classification ? "classification" : t == Task::Multiclass ? "multiclass" : "regression"; }

StudyConfig ParseStudyConfig(const std::string& text, const std::string& baseDir, const std::string& src) {
  StudyConfig c = ReadStudyConfig(text, baseDir, src);
  CheckStudyConfig(c);
  return c;
}

StudyConfig LoadStudyConfig(const std::string& path) {
  const std::string text = ReadConfigText(path, "study file");
  return ParseStudyConfig(text, std::filesystem::absolute(path).parent_path().string(), path);
}

}  // namespace neuromkl::config
