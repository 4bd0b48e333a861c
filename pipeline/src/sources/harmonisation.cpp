// /harmonisation: the ComBat design from the subjects table and the harmonised sources' voxels (harmonisation.hpp).
#include "neuromkl/pipeline/harmonisation.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "neuromkl/core/errors.hpp"
#include "neuromkl/core/strings.hpp"
#include "neuromkl/core/system.hpp"
#include "neuromkl/core/table.hpp"
#include "neuromkl/kernels/region_kernels.hpp"
#include "neuromkl/pipeline/covariates.hpp"
#include "neuromkl/pipeline/kernel_stage.hpp"
#include "neuromkl/pipeline/sources.hpp"
#include "neuromkl/pipeline/study_context.hpp"

namespace neuromkl::pipeline {

std::shared_ptr<const gram::Harmonisation> BuildHarmonisationDesign(const config::StudyConfig& study, const Cohort& cohort, const std::vector<int>& rows) {
  const auto& spec = study.harmonisation;
  auto out = std::make_shared<gram::Harmonisation>();
  const auto& cells = cohort.covariateCells.at(spec.siteColumn);
  std::vector<std::string> missing;
  for (const int r : rows)
    if (IsMissingCell(cells[static_cast<std::size_t>(r)])) missing.push_back(cohort.ids[static_cast<std::size_t>(r)]);
  if (!missing.empty())
    throw InputError("harmonisation:MissingSite", study.subjects.table,
                     fmt::format("{} of {} subjects used have no value in the site column \"{}\" (/harmonisation/site_column): {}; fill them in "
                                 "or remove those subjects",
                                 missing.size(), rows.size(), spec.siteColumn, Join(missing, ", ")));
  for (const int r : rows) out->siteNames.push_back(cells[static_cast<std::size_t>(r)]);
  std::sort(out->siteNames.begin(), out->siteNames.end(), LabelLess);
  out->siteNames.erase(std::unique(out->siteNames.begin(), out->siteNames.end()), out->siteNames.end());
  for (const int r : rows)
    out->sites.push_back(static_cast<int>(std::lower_bound(out->siteNames.begin(), out->siteNames.end(), cells[static_cast<std::size_t>(r)], LabelLess) -
                                          out->siteNames.begin()));
  // The preserved covariates' design (intercept first: ComBat's site columns span it, so it is left out).
  const CovariateDesign design = BuildCovariateDesign(study, spec.preserve, cohort, rows);
  out->covariates = design.covariates.design.rightCols(design.covariates.design.cols() - 1);
  out->fitRow = design.covariates.fitRow;
  out->covariateNames = design.columns;
  out->categoryOf.assign(design.covariates.categoryOf.begin() + 1, design.covariates.categoryOf.end());
  out->missing = design.missing;
  out->fitOn = design.fitOn;
  out->options.empiricalBayes = spec.empiricalBayes;
  out->where = study.path + " /harmonisation";
  return out;
}

namespace {

/// An image source to harmonise: its regions on the image grid, its images (one per row of the subjects table), the
/// study as that source sees it (mask, NaN rule, intensity scaling) and its kernels in the study's kernel order.
struct ImagePart {
  std::string name;
  const atlas::RegionIndex* regions = nullptr;
  const std::vector<std::string>* images = nullptr;
  config::StudyConfig study;
  std::size_t firstKernel = 0, kernelCount = 0;
};

std::vector<ImagePart> ImageParts(const StudyContext& ctx) {
  std::vector<ImagePart> parts;
  const auto& study = ctx.study;
  if (ctx.ks.regions) {
    parts.push_back({"images", &*ctx.ks.regions, &ctx.cohort.images, study, 0, ctx.ks.set.info.size()});
    return parts;
  }
  const auto& chosen = study.harmonisation.sources;
  for (const auto& source : ctx.ks.imageSources) {
    if (!chosen.empty() && std::find(chosen.begin(), chosen.end(), source.name) == chosen.end()) continue;
    const auto spec = std::find_if(study.kernels.sources.begin(), study.kernels.sources.end(), [&](const auto& s) { return s.name == source.name; });
    parts.push_back({source.name, &source.regions, &source.images, SourceStudy(study, *spec), source.firstKernel, source.kernelCount});
  }
  return parts;
}

}  // namespace

std::shared_ptr<const std::vector<gram::HarmonisedSource>> HarmonisedImageSources(const StudyContext& ctx, const std::string& scratchDir,
                                                                                 std::vector<gram::KernelOrigin>& origins,
                                                                                 std::vector<HarmonisedSourceNote>& notes) {
  auto sources = std::make_shared<std::vector<gram::HarmonisedSource>>();
  if (!ctx.harmonisation) return sources;
  std::vector<std::string> ids, images;
  for (const ImagePart& part : ImageParts(ctx)) {
    ids.clear();
    images.clear();
    for (const int r : ctx.kernelRows) {
      ids.push_back(ctx.cohort.ids[static_cast<std::size_t>(r)]);
      images.push_back((*part.images)[static_cast<std::size_t>(r)]);
    }
    // The voxels as the kernel stage reads them: the same reading, the same NaN rule (dropped voxels set to 0 in every
    // row), the same intensity scaling; each region's columns at its offsets.
    kernels::RegionKernelOptions options = RegionKernelOptionsOf(part.study, *part.regions, scratchDir);
    options.compact = false;
    kernels::SubjectRows rows = kernels::ReadSubjectRows(ids, images, *part.regions, options);
    std::vector<std::int64_t> dropped;
    kernels::RegionKernelHeader(ids, *part.regions, rows.nonFiniteCount, part.study.kernels.nanPolicy, dropped);
    const auto n = static_cast<Eigen::Index>(ids.size()), columns = static_cast<Eigen::Index>(rows.columns);
    using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    auto voxels = std::make_shared<Eigen::MatrixXf>(Eigen::Map<const RowMajor>(rows.data.data(), n, columns));
    rows.data = {};
    for (const std::int64_t c : dropped) voxels->col(static_cast<Eigen::Index>(c)).setZero();
    const std::vector<std::int64_t> offsets = kernels::RegionColumnOffsets(*part.regions);
    const int source = static_cast<int>(sources->size());
    for (std::size_t k = part.firstKernel; k < part.firstKernel + part.kernelCount; ++k) {
      const std::int64_t label = ctx.ks.set.info[k].label;
      const auto& regions = part.regions->regions;
      const auto found = std::find_if(regions.begin(), regions.end(), [&](const auto& region) { return region.label == label; });
      if (found == regions.end())
        throw std::logic_error(fmt::format("harmonisation: kernel {} has no region of label {} in source {}", ctx.ks.set.info[k].name, label, part.name));
      const auto r = static_cast<std::size_t>(found - regions.begin());
      origins[k] = gram::KernelOrigin::Voxels(source, static_cast<Eigen::Index>(offsets[r]), static_cast<Eigen::Index>(offsets[r + 1]));
    }
    notes.push_back({part.name, columns, static_cast<std::uint64_t>(voxels->size()) * sizeof(float), "images"});
    sources->push_back({part.name, std::move(voxels)});
  }
  return sources;
}

}  // namespace neuromkl::pipeline
