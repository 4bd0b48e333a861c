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
  /// With /covariates/impute: per covariate column (numeric, then categorical), how many of the rows lack a value there
  /// (imputed inside every fold; NaN in the design).
  std::vector<std::pair<std::string, int>> missing;
};

/// Largest magnitude of a numeric covariate (and smallest, as its inverse) that the fit handles without loss.
inline constexpr double kCovariateMagnitudeLimit = 1e20;
/// Above this in-sample R^2 of the target on the covariates, the study is refused: regressing such covariates out of
/// the images removes everything that could predict the target (a copy or recoding of it). Above kCovariateR2Warning
/// the run warns.
inline constexpr double kCovariateR2Refused = 0.99;
inline constexpr double kCovariateR2Warning = 0.5;

/// Builds the design of `spec` (/covariates, or the covariates /harmonisation preserves) over cohort rows `rows` (the
/// kernels' rows). A missing value is NaN in the design when `spec` imputes (every dummy of a categorical column: its
/// levels are those of the subjects with a value). Errors: InputError
/// [covariates:Missing] listing every used subject with a missing covariate value unless `spec` imputes, or a column no
/// used subject has a value in, [covariates:Scale] for a numeric
/// column with magnitudes beyond kCovariateMagnitudeLimit (or below its inverse); ConfigError at the
/// column's JSON pointer for a non-numeric numeric column, a categorical column with one level among
/// the used subjects, a fit_on value no used subject has.
CovariateDesign BuildCovariateDesign(const config::StudyConfig& study, const config::CovariateSpec& spec, const Cohort& cohort, const std::vector<int>& rows);

/// The design with every missing value imputed from all of its rows: for in-sample diagnostics (the target's R^2 on the
/// covariates) only; the folds impute from their training rows.
Eigen::MatrixXd CohortImputedDesign(const CovariateDesign& design);

}  // namespace neuromkl::pipeline
