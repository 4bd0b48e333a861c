// Precomputed kernel files, and what every non-image source's kernels go through before the learners.
#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/io/matrix_file.hpp"
#include "neuromkl/pipeline/sources.hpp"

namespace neuromkl::pipeline {

kernels::KernelSet PrecomputedKernels(const config::StudyConfig& study, const Cohort& cohort) {
  kernels::KernelSet set;
  set.subjects = cohort.ids;
  for (const auto& spec : study.kernels.precomputed) {
    Eigen::MatrixXd K = io::ReadMatrixFile(spec.file);
    if (!cohort.dropped.empty() && K.rows() == static_cast<Eigen::Index>(cohort.tableRowCount) && K.cols() == K.rows()) {
      // kernels.missing_source "drop": the file covers every row of the table; keep the rows of the kept subjects.
      Eigen::VectorXi rows(static_cast<Eigen::Index>(cohort.tableRows.size()));
      for (std::size_t i = 0; i < cohort.tableRows.size(); ++i) rows[static_cast<Eigen::Index>(i)] = static_cast<int>(cohort.tableRows[i]);
      K = Eigen::MatrixXd(K(rows, rows));
    }
    kernels::CheckKernel(K, spec.name, static_cast<Eigen::Index>(set.subjects.size()), spec.file);
    kernels::KernelInfo info;
    info.name = spec.name;
    set.info.push_back(info);
    set.kernels.push_back(std::move(K));
  }
  return set;
}

void ExcludeZeroKernelsOrRefuse(kernels::KernelSet& set, const std::string& where) {
  kernels::ExcludeZeroKernels(set);
  if (set.Size() > 0) return;
  std::vector<std::string> reasons;
  for (const auto& e : set.excluded) reasons.push_back(e.info.name + ": " + e.reason);
  throw InputError("kernels:NoneLeft", where,
                   fmt::format("no usable kernel is left: every kernel was excluded ({})", Join(reasons, "; ")));
}

}  // namespace neuromkl::pipeline
