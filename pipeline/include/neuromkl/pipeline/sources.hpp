#pragma once
// Kernel sources besides images, and the study as each source of kernels.sources sees it: precomputed kernel
// files, tabular feature groups (connectivity.hpp: connectivity matrices; covariates.hpp: the covariate design).
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/gram/tabular.hpp"
#include "neuromkl/kernels/kernel_set.hpp"
#include "neuromkl/pipeline/cohort.hpp"

namespace neuromkl::pipeline {

/// The precomputed kernels of a study, read and checked (n x n for the cohort's subjects, finite,
/// symmetric: InputError kernels:*); run and validate both call it.
kernels::KernelSet PrecomputedKernels(const config::StudyConfig& study, const Cohort& cohort);
/// The kernels of a tabular study, formed from its feature groups; InputError kernels:NonFinite when a function
/// overflows (a polynomial degree too high for the features' scale, a Gaussian width whose square underflows). With
/// /kernels/tabular standardise or impute the columns are standardised and imputed with every subject's statistics:
/// these are the kernel stage's (cached, written with the results); the folds form their own from the columns with
/// their training subjects' statistics (gram::FoldFormedKernels).
kernels::KernelSet TabularKernels(const config::StudyConfig& study, const Cohort& cohort);
/// What the kernel stage does with the kernels of a non-image source before the learners see them: zero kernels
/// excluded (noted in the set), and InputError kernels:NoneLeft when none is left. Run and validate both call it.
void ExcludeZeroKernelsOrRefuse(kernels::KernelSet& set, const std::string& where);
/// kernels.sources: the study as one source sees it (its kind, image column, mask, sections).
config::StudyConfig SourceStudy(const config::StudyConfig& study, const config::SourceSpec& source);
/// The cohort of one source: for an images source, the table read with its image column (or BIDS
/// entities), without the study's dropped subjects; otherwise `cohort`.
Cohort SourceCohort(const config::StudyConfig& sourceStudy, const config::SourceSpec& source, const Cohort& cohort);
/// kernels.sources: every subject of `cohort` some source has no data for (no image path or file, no
/// BIDS match, no connectivity file, no row in a tabular source's table), with what each source lacks.
std::map<std::string, std::vector<std::string>> SubjectsLackingSources(const config::StudyConfig& study, const Cohort& cohort);
/// The study's cohort: LoadCohort, and for kernels.sources the subjects every source covers. A subject
/// some source lacks is InputError [sources:MissingData] listing every such subject and what it lacks,
/// or with /kernels/missing_source "drop" is left out and listed in Cohort::dropped.
Cohort LoadStudyCohort(const config::StudyConfig& study);
/// A tabular study's features over the cohort's subjects: every column its groups use, once each in the order the
/// groups first use them, as the table holds them (a missing cell is NaN with /kernels/tabular/impute "median", else
/// InputError tabular:NotNumeric), and the groups as positions of those columns. Same errors as the kernel stage.
struct TabularFeatureTable {
  std::vector<std::string> columns;
  Eigen::MatrixXd X;  ///< subjects x columns
  struct Group {
    std::string name;
    std::vector<Eigen::Index> columns;  ///< positions in `columns`
  };
  std::vector<Group> groups;
  /// Subjects lacking a value, per column (in `columns` order).
  std::vector<int> Missing() const;
};
TabularFeatureTable TabularFeatures(const config::StudyConfig& study, const Cohort& cohort);
/// One kernel of a tabular study as the kernel stage names it ("group", or "group:linear", "group:poly(2)", ...): its
/// group (index into TabularFeatureTable::groups) and function, one per (group, function, parameter value).
struct TabularKernelSpec {
  std::string name;
  std::size_t group = 0;
  gram::FeatureKernel function;
};
/// Each tabular section of a study (/kernels/tabular, or a tabular source of /kernels/sources): the study as that source
/// sees it, the source's name ("" for /kernels/tabular), its kernels' name prefix and the section's JSON pointer.
struct TabularSection {
  config::StudyConfig study;
  std::string name, prefix, pointer;
};
std::vector<TabularSection> TabularSections(const config::StudyConfig& study);
std::vector<TabularKernelSpec> TabularKernelSpecs(const TabularFeatureTable& table, const std::vector<config::TabularFunction>& functions);

}  // namespace neuromkl::pipeline
