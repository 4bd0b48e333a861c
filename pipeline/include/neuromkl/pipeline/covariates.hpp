#pragma once
// The covariates of a study (/covariates) as a design matrix over the kernels' rows.
#include <string>
#include <vector>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/gram/residualise.hpp"
#include "neuromkl/pipeline/cohort.hpp"

namespace neuromkl::pipeline {

struct CovariateDesign {
  gram::Covariates covariates;   ///< design (intercept first) and fit rows, one row per entry of `rows`
  std::vector<std::string> columns; ///< names of the design columns after the intercept ("sex=M" for a dummy)
  std::string fitOn;                ///< "all" or "column = value"
};

/// Builds the design over cohort rows `rows` (the kernels' rows). Errors: InputError
/// [covariates:Missing] listing every used subject with a missing covariate value; ConfigError at the
/// column's JSON pointer for a non-numeric numeric column, a categorical column with one level among
/// the used subjects, a fit_on value no used subject has.
CovariateDesign BuildCovariateDesign(const config::StudyConfig& study, const Cohort& cohort, const std::vector<int>& rows);

}  // namespace neuromkl::pipeline
