#pragma once
// The kernels every fold forms itself (gram/fold_formed.hpp): /harmonisation's ComBat of the image sources' voxels (its
// design from the subjects table) and the tabular sources standardised or imputed with each fold's statistics.
#include <memory>
#include <string>
#include <vector>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/gram/fold_formed.hpp"
#include "neuromkl/pipeline/cohort.hpp"

namespace neuromkl::pipeline {

struct StudyContext;

/// The ComBat design of /harmonisation over cohort rows `rows` (the kernels' rows): each row's site (sites numbered in
/// label order), the preserved covariates without intercept and the reference group (fit_on). InputError
/// harmonisation:MissingSite listing every used subject without a site; the covariates' errors as /covariates'.
std::shared_ptr<const gram::Harmonisation> BuildHarmonisationDesign(const config::StudyConfig& study, const Cohort& cohort, const std::vector<int>& rows);

/// What the harmonised sources hold, for results.json: per source its name, voxels per subject and the bytes held.
struct HarmonisedSourceNote {
  std::string name;
  std::int64_t voxels = 0;  ///< voxels (a tabular source: columns) per subject
  std::uint64_t bytes = 0;
  std::string kind = "images";  ///< "images" or "tabular"
};

/// /harmonisation's image sources, their voxels read once over the kernels' rows as the kernel stage reads them (mask, NaN
/// rule, intensity scaling), and their kernels' origins (`origins`: one per kernel of the study) among those voxels.
std::shared_ptr<const std::vector<gram::HarmonisedSource>> HarmonisedImageSources(const StudyContext& ctx, const std::string& scratchDir,
                                                                                 std::vector<gram::KernelOrigin>& origins,
                                                                                 std::vector<HarmonisedSourceNote>& notes);

/// Whether /harmonisation harmonises source `name` of kind `kind` ("" for a study of one source) inside the folds: named
/// in /harmonisation/sources; with no list, every image source, and tabular sources in a study without image sources.
bool HarmonisedInFolds(const config::StudyConfig& study, const std::string& name, config::KernelSource kind);
/// Whether the folds form some of the study's kernels themselves: /harmonisation, a tabular source standardised or
/// imputed inside the folds, or a source some subjects lack (missing_source "impute").
bool FoldsFormKernels(const config::StudyConfig& study, const Cohort& cohort);
/// The study's kernels (`kernels`: the kernel stage's float64 kernels over the kernels' rows) with the kernels the folds
/// form: /harmonisation's image sources from their harmonised voxels, and the tabular sources with fold statistics
/// (standardise, impute) from their columns over the kernels' rows. InputError harmonisation:HeldByRanks or
/// tabular:HeldByRanks for kernels the MPI ranks hold (the features and each fold's kernels are in one process).
std::shared_ptr<const gram::FoldFormedKernels> FoldFormedStudyKernels(const StudyContext& ctx, std::shared_ptr<const gram::KernelList> kernels,
                                                                     const std::string& scratchDir, std::vector<HarmonisedSourceNote>& notes);

}  // namespace neuromkl::pipeline
