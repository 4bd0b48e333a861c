#pragma once
// /harmonisation: ComBat of the image sources' voxels inside every fold (gram/harmonised.hpp), its design from the
// subjects table and the store that forms each fold's kernels from the harmonised voxels.
#include <memory>
#include <string>
#include <vector>

#include "neuromkl/config/study_config.hpp"
#include "neuromkl/gram/harmonised.hpp"
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
  std::int64_t voxels = 0;
  std::uint64_t bytes = 0;
};

/// The study's kernels (`kernels`: the kernel stage's float64 kernels over the kernels' rows) with /harmonisation's
/// image sources formed per fold from their harmonised voxels, which are read here once over the kernels' rows as the
/// kernel stage reads them (mask, NaN rule, intensity scaling). InputError harmonisation:HeldByRanks for kernels the
/// MPI ranks hold (the voxels and each fold's kernels are in one process).
std::shared_ptr<const gram::HarmonisedKernels> HarmonisedStudyKernels(const StudyContext& ctx, std::shared_ptr<const gram::KernelList> kernels,
                                                                     const std::string& scratchDir, std::vector<HarmonisedSourceNote>& notes);

}  // namespace neuromkl::pipeline
