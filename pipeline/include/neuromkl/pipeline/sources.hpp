#pragma once
// Kernel sources besides images, and the study as each source of kernels.sources sees it: precomputed kernel
// files, tabular feature groups (connectivity.hpp: connectivity matrices; covariates.hpp: the covariate design).
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/kernels/kernel_set.hpp"
#include "neuromkl/pipeline/cohort.hpp"

namespace neuromkl::pipeline {

/// The precomputed kernels of a study, read and checked (n x n for the cohort's subjects, finite,
/// symmetric: InputError kernels:*); run and validate both call it.
kernels::KernelSet PrecomputedKernels(const config::StudyConfig& study, const Cohort& cohort);
/// The kernels of a tabular study, formed from its feature groups; InputError kernels:NonFinite when a function
/// overflows (a polynomial degree too high for the features' scale, a Gaussian width whose square underflows).
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
/// A tabular study's feature groups over the cohort's subjects (the columns the kernels are built from):
/// standardised with the cohort's column statistics when /kernels/tabular/standardise (mean, sd: what
/// was subtracted and divided; 0 and 1 otherwise). Same errors as the kernel stage.
struct TabularGroupFeatures {
  std::string name;
  std::vector<std::string> columns;
  Eigen::MatrixXd X;  ///< subjects x columns
  Eigen::VectorXd mean, sd;
};
std::vector<TabularGroupFeatures> TabularFeatures(const config::StudyConfig& study, const Cohort& cohort);

}  // namespace neuromkl::pipeline
